package sync

import (
	stdsync "sync"

	"github.com/ratelease/ratelease/remote"
)

// lane is the queue of one Redis Cluster master: its requests go out in
// pipelines of their own, one at a time, so that a master that is down or
// slow holds up only its own keys' requests (one go-redis pipeline across
// masters waits for every one of them).
type lane struct {
	mu    stdsync.Mutex
	busy  bool // a goroutine is sending the lane's queue
	queue      // requires mu held
}

// lane returns the lane of node, making it. Batcher only.
func (b *batcher) lane(node string) *lane {
	ln := b.lanes[node]
	if ln == nil {
		ln = &lane{}
		b.lanes[node] = ln
	}
	return ln
}

// push queues c or g (either may be nil) in ln.
func (ln *lane) push(c *call, g *remote.Grant) {
	ln.mu.Lock()
	if c != nil {
		ln.calls = append(ln.calls, c)
	}
	if g != nil {
		ln.backs = append(ln.backs, *g)
	}
	ln.mu.Unlock()
}

// startLane starts a goroutine that sends ln's queue until it is empty,
// unless one is at it. It reports whether ln is busy now: false means it
// is idle and empty. Batcher only: close waits for the goroutine (wg).
func (b *batcher) startLane(ln *lane) bool {
	ln.mu.Lock()
	if ln.busy || len(ln.calls)+len(ln.backs) == 0 {
		busy := ln.busy
		ln.mu.Unlock()
		return busy
	}
	ln.busy = true
	ln.mu.Unlock()
	b.wg.Add(1) // the batcher's own count is held: no race with close's Wait
	b.spawn(func() {
		defer b.wg.Done()
		for {
			ln.mu.Lock()
			calls, backs := ln.take()
			if len(calls)+len(backs) == 0 {
				ln.busy = false
				ln.mu.Unlock()
				return
			}
			ln.mu.Unlock()
			b.send(calls, backs)
		}
	})
	return true
}
