package tier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelease/ratelease/internal/guard"
	"github.com/ratelease/ratelease/remote"
)

// allowExact decides with one Redis call, or by the failure mode.
func (e *Engine) allowExact(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	d, cause, err := e.acquireGuarded(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n})
	if err != nil {
		return Decision{}, err
	}
	if cause != nil {
		return e.unavailable(p, key, n, cause)
	}
	return e.decided(d), nil
}

// acquireGuarded makes one acquire call through the breaker. cause is not
// nil when Redis could not decide (the breaker is open, or the call failed);
// err is the caller's context error.
func (e *Engine) acquireGuarded(ctx context.Context, r remote.Request) (d remote.Decision, cause, err error) {
	b := e.breakerFor(r.Policy, r.Key)
	ok, probe, cause := b.allow(e.nanos())
	if !ok {
		return remote.Decision{}, cause, nil
	}
	d, err = e.acquire(ctx, r)
	return d, e.outcome(b, probe, err), e.callerErr(err)
}

// outcome reports a call's result to the breaker and returns the cause of a
// Redis failure, or nil (success, or the caller's own context ended).
func (e *Engine) outcome(b *breaker, probe bool, err error) error {
	switch {
	case err == nil:
		b.success()
		return nil
	case errors.Is(err, ErrUnavailable):
		b.failure(e.nanos(), probe, err)
		return err
	default: // the caller's context, or closed
		if probe {
			b.abort(e.nanos())
		}
		return nil
	}
}

// callerErr is err unless it is a Redis failure (which the failure mode
// handles).
func (e *Engine) callerErr(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return nil
	}
	return err
}

// Wait blocks until n units of key are granted, or ctx ends. It sleeps on
// the engine's clock for each denial's RetryAfter, and returns at once with
// context.DeadlineExceeded when ctx's deadline comes before the units could.
// A leaky bucket in the policy queues the request (reserving its slot)
// instead of polling; a wait cancelled before its slot gives the slot back.
func (e *Engine) Wait(ctx context.Context, p *remote.Policy, key string, n int64) error {
	if e.leaser != nil && Leasable(p) {
		for {
			if e.closed.Load() {
				return ErrClosed
			}
			d, err := e.Allow(ctx, p, key, n)
			if err != nil || d.Allowed {
				return err
			}
			if err := e.sleep(ctx, d.RetryAfter); err != nil {
				return err
			}
		}
	}
	reserve := p.Uses(remote.LeakyBucket) // a leaky bucket's Wait reserves a slot
	for {
		if e.closed.Load() {
			return ErrClosed
		}
		d, cause, err := e.acquireGuarded(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n, Reserve: reserve})
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
		e.decided(d)
		if d.Granted > 0 {
			if d.Wait <= 0 {
				return nil
			}
			if err := e.sleep(ctx, d.Wait); err != nil {
				e.giveBack(p, key, d)
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
// ctx's deadline is sooner than d.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// giveBack refunds a grant the caller will not use. The caller's context
// is over, so the refund gets its own, bounded by the timeout; if Redis
// cannot take it, the units come back by themselves when their state expires.
func (e *Engine) giveBack(p *remote.Policy, key string, d remote.Decision) {
	if !e.guard {
		e.refund(p, key, d)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	_, _ = guard.Do(&e.guards, ctx, func(context.Context) (struct{}, error) {
		e.refund(p, key, d)
		return struct{}{}, nil
	}, nil)
}

// refund makes one refund call on the calling goroutine, bounded by the
// timeout.
func (e *Engine) refund(p *remote.Policy, key string, d remote.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	e.stats.roundTrips.Add(1)
	if err := e.store.Refund(ctx, p, key, d.Granted, d.At); err != nil {
		e.stats.errors.Add(1)
	}
}

// bounded returns ctx limited to the Redis timeout, unless ctx's own
// deadline is sooner (then ctx itself, and no timer is made).
func (e *Engine) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= e.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, e.timeout)
}

// acquire makes one acquire call, bounded by the timeout and ctx. Errors
// are ctx's, unwrapped, ErrClosed, or wrap ErrUnavailable. With Guard, the
// call runs on its own goroutine (package guard), and a grant that arrives
// after the deadline is refunded there.
func (e *Engine) acquire(ctx context.Context, r remote.Request) (remote.Decision, error) {
	if err := ctx.Err(); err != nil {
		return remote.Decision{}, err
	}
	rctx, cancel := e.bounded(ctx)
	defer cancel()
	var d remote.Decision
	var err error
	if e.guard {
		d, err = guard.Do(&e.guards, rctx,
			func(ctx context.Context) (remote.Decision, error) { return e.store.Acquire(ctx, r) },
			func(late remote.Decision, err error) {
				if err == nil && late.Granted > 0 {
					e.refund(r.Policy, r.Key, late) // already on a tracked goroutine
				}
			})
		if errors.Is(err, guard.ErrClosed) {
			return remote.Decision{}, ErrClosed
		}
	} else {
		d, err = e.store.Acquire(rctx, r)
	}
	e.stats.roundTrips.Add(1)
	if err != nil {
		e.stats.errors.Add(1)
		if cerr := ctx.Err(); cerr != nil {
			return remote.Decision{}, cerr
		}
		return remote.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return d, nil
}

// decided counts a Redis decision and converts it.
func (e *Engine) decided(d remote.Decision) Decision {
	e.stats.remote.Add(1)
	if d.Granted > 0 {
		e.stats.allowed.Add(1)
	} else {
		e.stats.denied.Add(1)
	}
	return Decision{
		Allowed:    d.Granted > 0,
		Source:     Remote,
		Limit:      d.Decider,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
	}
}
