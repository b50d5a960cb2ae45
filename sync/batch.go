package sync

import (
	"context"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// call is one lease request on its way through the batcher.
type call struct {
	req   remote.Request
	entry *Entry
	start int64 // ns, when the request was made: validity counts from here
	done  chan struct{}
	d     remote.Decision
	err   error
	// abandoned: the requester stopped waiting; the batcher applies the
	// grant to the entry itself.
	abandoned atomic.Bool
}

// abandon marks c as no longer awaited, so that the batcher applies its
// grant to the entry itself. It reports false when c was already complete
// (or being completed): the caller must then wait for done and apply it.
func (c *call) abandon() bool { return c.abandoned.CompareAndSwap(false, true) }

// finish completes c: it hands the result to its requester or, if the
// requester left, applies it to the entry (all of the grant goes into the
// allowance).
func (l *Leaser) finish(c *call, d remote.Decision, err error) {
	c.d, c.err = d, err
	if !c.abandoned.CompareAndSwap(false, true) { // the requester left
		if err == nil {
			l.apply(c, 0)
		}
		l.pending.Done()
	}
	close(c.done)
}

// maxBatch caps the calls sent in one pipeline.
const maxBatch = 256

// queue holds lease calls and refunds waiting to be sent: the Leaser's, and
// each Cluster lane's.
type queue struct {
	calls []*call
	backs []remote.Grant
}

// take removes and returns one pipeline's worth of each: up to maxBatch.
func (q *queue) take() ([]*call, []remote.Grant) {
	calls := q.calls[:min(len(q.calls), maxBatch)]
	q.calls = q.calls[len(calls):]
	backs := q.backs[:min(len(q.backs), maxBatch)]
	q.backs = q.backs[len(backs):]
	return calls, backs
}

// batcher sends what is queued, as soon as it is queued: refunds and lease
// requests in one pipeline. Nothing waits to fill a batch; requests
// that arrive while a pipeline is out go together in the next one.
func (l *Leaser) batcher() {
	defer l.wg.Done()
	for {
		select {
		case <-l.work:
		case <-l.stop:
			for l.flush() { // what Close queued
			}
			return
		}
		for l.flush() {
		}
	}
}

// flush takes one batch of each queue and sends it: on the batcher's
// goroutine, or with a Redis Cluster through each master's lane. It reports
// whether anything was taken.
func (l *Leaser) flush() bool {
	l.mu.Lock()
	calls, backs := l.take()
	l.mu.Unlock()
	if len(calls) == 0 && len(backs) == 0 {
		return false
	}
	if !l.door.Sharded() {
		l.send(calls, backs)
		return true
	}
	ctx, cancel := l.door.Bound(context.Background()) // for loading the cluster's layout
	defer cancel()
	for _, c := range calls {
		l.lane(l.door.Node(ctx, c.req.Policy, c.req.Key)).push(c, nil)
	}
	for _, g := range backs {
		l.lane(l.door.Node(ctx, g.Policy, g.Key)).push(nil, &g)
	}
	for node, ln := range l.lanes {
		if !l.startLane(ln) {
			// Idle: dropped, and made again when next needed, so that the
			// masters a resharding or a failover left behind do not stay.
			delete(l.lanes, node)
		}
	}
	return true
}

// send sends one pipeline of refunds and lease requests, within the
// door's timeout, or once Close has begun within Close's bound.
func (l *Leaser) send(calls []*call, backs []remote.Grant) {
	l.mu.Lock()
	ctx := l.closeCtx // set once stopped
	l.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	l.sendBatch(ctx, calls, backs)
}

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
func (l *Leaser) lane(node string) *lane {
	ln := l.lanes[node]
	if ln == nil {
		ln = &lane{}
		l.lanes[node] = ln
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
// is idle and empty. Batcher only: Close waits for the goroutine (wg).
func (l *Leaser) startLane(ln *lane) bool {
	ln.mu.Lock()
	if ln.busy || len(ln.calls)+len(ln.backs) == 0 {
		busy := ln.busy
		ln.mu.Unlock()
		return busy
	}
	ln.busy = true
	ln.mu.Unlock()
	l.wg.Add(1) // the batcher's own count is held: no race with Close's Wait
	go func() {
		defer l.wg.Done()
		for {
			ln.mu.Lock()
			calls, backs := ln.take()
			if len(calls)+len(backs) == 0 {
				ln.busy = false
				ln.mu.Unlock()
				return
			}
			ln.mu.Unlock()
			l.send(calls, backs)
		}
	}()
	return true
}

// sendBatch sends one pipeline of refunds and lease requests through the
// door (which refunds the grants that arrive after ctx's end) and
// completes the requests. It measures the lease round trip.
func (l *Leaser) sendBatch(ctx context.Context, calls []*call, backs []remote.Grant) {
	rs := make([]remote.Request, len(calls))
	for i, c := range calls {
		rs[i] = c.req
	}
	start := time.Now()
	ds, errs, gerrs := l.door.Batch(ctx, rs, backs)
	if len(calls) > 0 {
		l.measured(time.Since(start))
	}
	for i, err := range gerrs {
		// A refund that failed is not retried: its units come back by
		// themselves when their key's state expires.
		if err == nil {
			l.stats.refunded.Add(uint64(backs[i].Units))
		}
	}
	for i, c := range calls {
		if errs[i] == nil {
			l.stats.leases.Add(1)
			l.stats.leased.Add(uint64(ds[i].Granted))
			l.stats.refunded.Add(uint64(c.req.Back))
			if ds[i].Granted == 0 {
				l.stats.denied.Add(1)
			}
		}
		l.finish(c, ds[i], errs[i])
	}
}

// measured folds one lease round trip into the moving average.
func (l *Leaser) measured(d time.Duration) {
	old := l.rtt.Load()
	if old == 0 {
		l.rtt.Store(int64(d))
		return
	}
	l.rtt.Store(old + (int64(d)-old)/8)
}
