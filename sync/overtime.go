package sync

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/internal/door"
)

// answered reports whether done, the end of a Redis call on its way, came
// though ctx ended first. A ctx the door bounded, ended by the Redis
// timeout (door.Overtime), may wait on while the caller's context lasts:
//
//   - For a pipeline out, sent by an eighth of the timeout after the wait
//     began: until its own deadline and an eighth more. A call that Redis
//     does not answer ends at its deadline (a timer wakes its reader, which
//     runs at once in a process that keeps up).
//   - For the call's end, however long, once this process shows that it
//     does not keep up: this goroutine ran half a timeout or more after it
//     was due to; or the pipeline out is past its deadline by an eighth of
//     the timeout and not ended; or, within the last timeout, a pipeline
//     that Redis answered was seen that late. In such a process the answer's reader
//     waits for a CPU too (a goroutine the network wakes waits in the
//     global run queue, behind every goroutine preempted meanwhile), and a
//     timeout says nothing of Redis: an answer that came in time is used
//     rather than taken for Redis being busy. The call ends by itself, by
//     its own deadline.
//
// In a process that keeps up, a request thus waits on a Redis that does
// not answer for the timeout and at most an eighth more.
func (b *batcher) answered(ctx context.Context, done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
	}
	parent, deadline, ok := door.Overtime(ctx)
	if !ok {
		return false
	}
	timeout := b.door.Timeout()
	grace := timeout / 8
	due := deadline // when this goroutine was due to run
	var t *time.Timer
	for {
		now := time.Now()
		until := deadline.Add(grace)
		out := b.outDue()
		switch {
		case now.Sub(due) >= timeout/2,
			!out.IsZero() && now.Sub(out) >= grace,
			b.behindSince(now.Add(-timeout)):
			return waitFor(done, parent) // this process does not keep up
		case !out.IsZero() && !out.After(until) && out.Add(grace).After(until):
			until = out.Add(grace)
		}
		wait := until.Sub(now)
		if wait <= 0 {
			return false
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		due = until
		select {
		case <-done:
			return true
		case <-parent.Done():
			return false
		case <-t.C:
		}
	}
}

// waitFor waits for done or parent's end, reporting whether done came.
func waitFor(done <-chan struct{}, parent context.Context) bool {
	select {
	case <-done:
		return true
	case <-parent.Done():
		return false
	}
}

// behindSince reports whether this process was seen not to keep up
// (behind) at t or later.
func (b *batcher) behindSince(t time.Time) bool {
	ns := b.behind.Load()
	return ns != 0 && !b.base.Add(time.Duration(ns)).Before(t)
}

// outDue returns the deadline of the pipeline the batcher has out, or
// zero: none, or the calls go out in a Redis Cluster's lanes, several at a
// time, whose deadlines are not followed.
func (b *batcher) outDue() time.Time {
	if ns := b.out.Load(); ns != 0 {
		return b.base.Add(time.Duration(ns))
	}
	return time.Time{}
}
