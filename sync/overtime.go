package sync

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/internal/door"
)

// overtimeCap caps, in timeouts past the last time the process showed it
// does not keep up, a wait that goes on for a call's end in such a process
// (waitLate): a call ends by its own deadline once its reader runs, and
// the cap holds should it not.
const overtimeCap = 4

// answered reports whether done, the end of c, a Redis call on its way
// (nil: a lease in flight not tagged with its call, Entry.Tag), came
// though ctx ended first, and whether this process showed meanwhile that
// it does not keep up (late). A ctx the door bounded, ended by the Redis
// timeout (door.Overtime), may wait on while the caller's context lasts:
//
//   - For the call, sent by an eighth of the timeout after the wait
//     began: until its pipeline's deadline (call.due) and an eighth more.
//     A call that Redis does not answer ends at its deadline (a timer
//     wakes its reader, which runs at once in a process that keeps up).
//   - For the call's end, once this process shows that it does not keep
//     up (lateFor), while it goes on showing it and overtimeCap timeouts
//     more (waitLate). In such a process the answer's reader waits for a
//     CPU too (a goroutine the network wakes waits in the global run
//     queue, behind every goroutine preempted meanwhile): an answer that
//     came in time is used rather than taken for Redis being busy.
//
// In a process that keeps up, a request thus waits on a Redis that does
// not answer for the timeout and at most a quarter more (an eighth but
// for its own call sent late by up to an eighth).
func (b *batcher) answered(ctx context.Context, done <-chan struct{}, c *call) (came, late bool) {
	if ended(done) {
		return true, false
	}
	parent, deadline, ok := door.Overtime(ctx)
	if !ok {
		return false, false
	}
	grace := b.grace()
	end := b.since(deadline)
	wake := end // when this goroutine was due to run
	var t *time.Timer
	for {
		now := b.since(time.Now())
		if b.lateFor(c, wake, now) {
			return b.waitLate(done, parent, now, c), true
		}
		until := end + grace
		if c != nil {
			if d := c.due.Load(); d > end && d <= until {
				until = d + grace
			}
		}
		if until <= now {
			return ended(done), false
		}
		if t == nil {
			t = time.NewTimer(time.Duration(until - now))
			defer t.Stop()
		} else {
			t.Reset(time.Duration(until - now))
		}
		wake = until
		select {
		case <-done:
			return true, false
		case <-parent.Done():
			return ended(done), false
		case <-t.C:
		}
	}
}

// ended reports whether done is closed: asked before a wait gives up, as
// a select that found done and a timer ready together may have picked the
// timer.
func ended(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// renew returns, for ctx the door bounded that ended by the Redis timeout
// (door.Overtime), a fresh timeout under the context ctx bounded (bounded
// by the door again: its wait may go on in overtime too), if this process
// shows it does not keep up (late, or lateAt now): the time ctx gave was
// lost to this process, not spent waiting for Redis. ok is false
// otherwise: ctx's end stands. Release the context with cancel.
func (b *batcher) renew(ctx context.Context, late bool) (renewed context.Context, cancel context.CancelFunc, ok bool) {
	parent, deadline, ok := door.Overtime(ctx)
	if !ok || !late && !b.late(deadline) {
		return nil, nil, false
	}
	renewed, cancel = b.door.Bound(parent)
	return renewed, cancel, true
}

// late reports whether this process shows, now, that it does not keep up,
// for a goroutine due to run at deadline that runs now (see lateAt).
func (b *batcher) late(deadline time.Time) bool {
	return b.lateAt(b.since(deadline), b.since(time.Now()))
}

// lateAt reports whether this process shows, at now, that it does not
// keep up, for a goroutine due to run at wake (both ns from base): that
// goroutine runs half a timeout or more late; or the pipeline out is past
// its deadline by an eighth of the timeout and not ended; or what was
// queued while the batcher was not sending has waited that long for it
// (or a goroutine started to send) to look (queued, spawned); or,
// within the last timeout, a pipeline that Redis answered was seen that
// late, or a look came that late (behind). In a process that keeps up
// none holds: a timer's goroutine runs at once, and so do the reader of
// a call that failed at its deadline and the goroutines woken to send.
func (b *batcher) lateAt(wake, now int64) bool {
	timeout, grace := int64(b.door.Timeout()), b.grace()
	if now-wake >= timeout/2 {
		return true
	}
	for _, at := range [...]int64{b.out.Load(), b.queued.Load(), b.spawned.Load()} {
		if at != 0 && now-at >= grace {
			return true
		}
	}
	at := b.behind.Load()
	return at != 0 && now-at <= timeout
}

// grace is an eighth of the timeout (ns): how late a step that runs at
// once in a process that keeps up may be before it shows the process
// does not.
func (b *batcher) grace() int64 { return int64(b.door.Timeout() / 8) }

// lateSince marks this process behind at now (ns from base) when a step
// due at at (0: none) ran a grace or more late.
func (b *batcher) lateSince(at, now int64) {
	if at != 0 && now-at >= b.grace() {
		b.behind.Store(now)
	}
}

// lateFor is lateAt, or c, the lease waited for, not handed to the
// batcher or the door an eighth of the timeout after its goroutine tagged
// it (call.tagged: that goroutine has not run since, and Redis was not
// asked), or ended that long ago with its requester not yet back to put
// its answer in (call.ended). (c nil: not known.)
func (b *batcher) lateFor(c *call, wake, now int64) bool {
	if late := b.lateAt(wake, now); late || c == nil {
		return late
	}
	grace := b.grace()
	if at := c.ended.Load(); at != 0 && now-at >= grace {
		return true
	}
	return c.tagged != 0 && c.due.Load() == 0 && now-c.tagged >= grace
}

// waiting notes, as something is queued, when the batcher began to owe a
// look at its queue (queued). Requires mu held.
func (b *batcher) waiting() {
	if !b.sending && !b.closed && b.queued.Load() == 0 {
		b.queued.Store(b.since(time.Now()))
	}
}

// spawn runs f on a goroutine started to send (a Cluster lane's, a
// prefetch's that found the lock held). Such a goroutine owes a look as
// the batcher does (queued), followed one at a time (spawned): as it runs,
// it marks this process behind if it waited an eighth of the timeout or
// more for a CPU.
func (b *batcher) spawn(f func()) {
	at := b.since(time.Now())
	if !b.spawned.CompareAndSwap(0, at) {
		at = 0
	}
	go func() {
		if at != 0 && b.spawned.CompareAndSwap(at, 0) {
			b.lateSince(at, b.since(time.Now()))
		}
		f()
	}()
}

// since returns t in ns from the batcher's base, on the monotonic clock,
// at least 1.
func (b *batcher) since(t time.Time) int64 { return max(1, int64(t.Sub(b.base))) }

// waitLate waits for done, the end of c (nil: not known), or parent's end
// in a process that showed at now (ns from base) that it does not keep
// up: while it goes on showing it (lateFor, looked at every half timeout),
// and overtimeCap timeouts more, reporting whether done came. The call's
// reader ends the call once it gets a CPU: a cap counted from the call's
// deadline would take an answer that came in time for Redis being busy.
func (b *batcher) waitLate(done <-chan struct{}, parent context.Context, now int64, c *call) bool {
	timeout := int64(b.door.Timeout())
	step := timeout / 2
	seen := now // when this process last showed it does not keep up
	t := time.NewTimer(time.Duration(step))
	defer t.Stop()
	for wake := now + step; ; wake = now + step {
		select {
		case <-done:
			return true
		case <-parent.Done():
			return ended(done)
		case <-t.C:
		}
		now = b.since(time.Now())
		if b.lateFor(c, wake, now) {
			seen = now
		}
		if now-seen >= overtimeCap*timeout {
			return ended(done)
		}
		t.Reset(time.Duration(step))
	}
}
