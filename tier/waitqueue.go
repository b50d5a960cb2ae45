package tier

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// waitQueues holds the waiters of an exact-mode Wait, in the order they
// came, per (policy, key): only the head of a queue asks Redis, and the
// others wait for their turn, rather than all sleep for the same
// RetryAfter and wake together to ask for the same units: one admitted,
// the rest denied, a round trip each (a herd). The zero value is
// ready; safe for concurrent use.
type waitQueues struct {
	mu sync.Mutex
	q  map[waitKey]*waitQueue
}

type waitKey struct {
	p   *remote.Policy
	key string
}

// waitQueue is one key's waiters: their turns, in order (the head's is
// closed), and when (on the engine's clock) the head should first ask
// Redis: a grant that left the bucket short of the next waiter's units
// says when they refill, so the next head does not ask only to be denied.
type waitQueue struct {
	turns     []chan struct{}
	notBefore time.Time
}

// joinWait queues a waiter on (p, key) and returns when it is at the head
// of the queue and may ask Redis, with leave, which the caller calls once
// it is done (admitted or given up) to pass the turn on: with how long the
// next head should wait before it asks (0: at once). When ctx ends or the
// engine closes first, joinWait leaves the queue itself and returns ctx's
// error or door.ErrClosed.
func (e *Engine) joinWait(ctx context.Context, p *remote.Policy, key string) (leave func(pause time.Duration), err error) {
	ws, k, turn := &e.waiting, waitKey{p, key}, make(chan struct{})
	ws.mu.Lock()
	if ws.q == nil {
		ws.q = make(map[waitKey]*waitQueue)
	}
	q := ws.q[k]
	if q == nil {
		q = &waitQueue{}
		ws.q[k] = q
	}
	q.turns = append(q.turns, turn)
	if len(q.turns) == 1 {
		close(turn)
	}
	ws.mu.Unlock()
	leave = func(pause time.Duration) { ws.leave(k, turn, e.clock.Now().Add(pause)) }
	select {
	case <-turn:
		ws.mu.Lock()
		pause := q.notBefore.Sub(e.clock.Now())
		ws.mu.Unlock()
		if pause > 0 {
			if err = e.sleep(ctx, pause); err != nil {
				leave(0) // the next head keeps the time it was given
				return nil, err
			}
		}
		return leave, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-e.done:
		err = door.ErrClosed
	}
	leave(0) // a turn that came meanwhile goes to the next
	return nil, err
}

// leave takes turn out of k's queue; the head leaving gives the turn to
// the next waiter, who is not to ask Redis before notBefore, or before the
// time an earlier head gave, whichever is later (a head that gives up
// unadmitted learnt nothing new of the bucket).
func (ws *waitQueues) leave(k waitKey, turn chan struct{}, notBefore time.Time) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.q[k]
	if q == nil {
		return
	}
	i := slices.Index(q.turns, turn)
	if i < 0 {
		return
	}
	q.turns = slices.Delete(q.turns, i, i+1)
	if len(q.turns) == 0 {
		delete(ws.q, k)
		return
	}
	if i == 0 {
		if notBefore.After(q.notBefore) {
			q.notBefore = notBefore
		}
		close(q.turns[0])
	}
}
