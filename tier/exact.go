package tier

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// allowExact decides with one Redis call, or by the failure mode.
func (e *Engine) allowExact(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	d, cause, err := e.door.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n})
	if err != nil {
		return Decision{}, err
	}
	if cause != nil {
		return e.unavailable(p, key, n, cause)
	}
	return e.decided(p, d), nil
}

// Wait blocks until n units of key are granted, or ctx ends, or the engine
// is closed. Without leases the waiters of a key in this engine queue,
// first come first served, and only the head asks Redis (see waitQueues).
// It sleeps on the engine's clock for each denial's RetryAfter, and returns
// at once with context.DeadlineExceeded when ctx's deadline comes before
// the units could, and with door.ErrClosed when Close is called while it
// sleeps (or was called before). A leaky bucket in the policy queues the
// request (reserving its slot) instead of polling; a wait cancelled before
// its slot gives the slot back.
func (e *Engine) Wait(ctx context.Context, p *remote.Policy, key string, n int64) error {
	if e.leaser != nil && leasable(p) {
		return e.waitLeased(ctx, p, key, n)
	}
	if _, err := e.check(p); err != nil {
		return err
	}
	// One waiter of the key at a time asks Redis, in the order they came.
	leave, err := e.joinWait(ctx, p, key)
	if err != nil {
		return err
	}
	var pause time.Duration // for the next waiter: see waitQueue
	defer func() {
		if leave != nil {
			leave(pause)
		}
	}()
	// A leaky bucket's Wait reserves a slot; so does a policy of buckets
	// only (token and leaky), as x/time/rate's WaitN does: its units are
	// taken ahead of time and used when they conform, one call each. (A
	// window would count a unit taken ahead in the window it was taken in.)
	reserve := p.Uses(remote.LeakyBucket) || !(p.Uses(remote.FixedWindow) ||
		p.Uses(remote.SlidingWindowCounter) || p.Uses(remote.SlidingWindowLog) || p.Uses(remote.CalendarWindow))
	for {
		if e.closed.Load() {
			return door.ErrClosed
		}
		d, cause, err := e.door.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n, Reserve: reserve})
		if err != nil {
			return err
		}
		if cause != nil { // Redis unavailable: the failure mode decides
			fd, err := e.unavailable(p, key, n, cause)
			if err != nil || fd.Allowed {
				return err
			}
			if err := e.sleep(ctx, fd.RetryAfter); err != nil {
				return err
			}
			continue
		}
		e.decided(p, d)
		if d.Granted > 0 {
			if short := n - d.Remaining; short > 0 {
				// A bucket left short of as many units again: the next
				// waiter asks once they have refilled.
				pause = time.Duration(short * p.UnitRefill(d.Decider))
			}
			if d.Wait <= 0 {
				return nil
			}
			// A reserved slot: the next waiter may reserve the one after it
			// while this one sleeps until its own.
			leave(pause)
			leave = nil
			if err := e.sleep(ctx, d.Wait); err != nil {
				// The slot is not used: give it back (its own context, the
				// door's; Redis expires it if that fails).
				e.door.Refund(p, key, d.Granted, d.At)
				return err
			}
			return nil
		}
		if err := e.sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// sleep waits d on the engine's clock, or returns ctx's error; at once when
// ctx's deadline is sooner than d. Close wakes it: it returns
// door.ErrClosed.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.closed.Load() {
		return door.ErrClosed
	}
	// The wall clock, not e.clock: a context's deadline is on it.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-e.done:
		return door.ErrClosed
	case <-t.C():
		return nil
	}
}

// decided counts a Redis decision on p and converts it.
func (e *Engine) decided(p *remote.Policy, d remote.Decision) Decision {
	dec := decision(d)
	e.countBy(p, SourceRemote, dec.Allowed, deciding(dec))
	return dec
}

// decision is the Decision of Redis's answer d, uncounted.
func decision(d remote.Decision) Decision {
	return Decision{
		Allowed:    d.Granted > 0,
		Source:     SourceRemote,
		Limit:      d.Decider,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Blocked:    d.Blocked,
		FairShare:  d.FairShare,
		At:         d.At,
	}
}

// waitLeased is Wait for a policy that leases: allow, and sleep for each
// denial's RetryAfter. From its first denial until it returns, the caller
// is counted on the key's entry (Entry.Waiting): asleep, it asks nothing,
// and the key's leases (but a region's pool's) say for it that it wants
// more than the key got. Its retries take their units back out of the
// demand (Entry.Retried), which its first try counted where it counts
// anything (not a first use decided exactly, nor the failure mode's:
// there a retry undercounts by n, once; see docs/leasing.md). An entry
// evicted meanwhile is let go: the key's next one counts the caller anew
// (when the eviction came during a try, which counted on the next entry
// already, that try counts twice there, once).
func (e *Engine) waitLeased(ctx context.Context, p *remote.Policy, key string, n int64) error {
	var waiting *leasesync.Entry
	defer func() {
		if waiting != nil {
			waiting.Waiting(-1)
		}
	}()
	for {
		if e.closed.Load() {
			return door.ErrClosed
		}
		if waiting != nil && waiting.Gone() {
			// Evicted while its caller slept: the key's next entry has not
			// counted this caller's units, nor that it waits (the next
			// denial counts it there).
			waiting.Waiting(-1)
			waiting = nil
		}
		if waiting != nil {
			// The first try counted this caller's units into the demand.
			waiting.Retried(n)
		}
		d, err := e.allow(ctx, p, key, n)
		if err != nil || d.Allowed {
			return err
		}
		if waiting == nil && d.Source != SourceFallback {
			if ent, err := e.entry(p, key); err == nil {
				waiting = ent
				ent.Waiting(1)
			}
		}
		if err := e.sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}
