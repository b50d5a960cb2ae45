package door

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// Peek reads what one unit of key under p would meet now, charging
// nothing (remote.Store.Peek), in one call through the breaker of the
// key's server, bounded by the timeout and ctx. Errors: one wrapping
// ErrUnavailable when Redis could not answer (the breaker is open, or the
// call failed), ctx's error unwrapped, or ErrClosed.
func (d *Door) Peek(ctx context.Context, p *remote.Policy, key string) (remote.Decision, error) {
	return call(d, ctx, RedisPeek, p, key, func(ctx context.Context) (remote.Decision, error) {
		return d.store.Peek(ctx, p, key)
	})
}

// GiveBack gives units of key under p back to Redis, as granted now
// (remote.Store.GiveBack): for a caller that waits for the outcome, so
// with the caller's context, unlike Refund. Errors are Peek's.
func (d *Door) GiveBack(ctx context.Context, p *remote.Policy, key string, units int64) error {
	_, err := call(d, ctx, RedisRefund, p, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.store.GiveBack(ctx, p, key, units)
	})
	return err
}

// RefundAt gives units of key under p back to the limit states that
// granted them at Redis time at (µs) (remote.Store.Refund: a window gets
// them back only while it is the window of at), with the caller's
// context. Errors are Peek's.
func (d *Door) RefundAt(ctx context.Context, p *remote.Policy, key string, units, at int64) error {
	_, err := call(d, ctx, RedisRefund, p, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.store.Refund(ctx, p, key, units, at)
	})
	return err
}

// Debit charges units to key under p in Redis whatever its limits have
// left (remote.Store.Charge), with the caller's context. Errors are
// Peek's.
func (d *Door) Debit(ctx context.Context, p *remote.Policy, key string, units int64) (remote.Decision, error) {
	return call(d, ctx, RedisCharge, p, key, func(ctx context.Context) (remote.Decision, error) {
		return d.store.Charge(ctx, p, key, units)
	})
}

// Permit makes one permit call (remote.Store.Permit) through the breaker
// that stands for keys whose server cannot be named (a permit key is no
// policy's), bounded by the timeout and ctx. Errors are Peek's. Once the
// door is closed a release or a lease call (which gives slots back) is
// still made, so that permits released after Close go back: with Guard,
// on a goroutine of its own that the door no longer tracks, waited for
// within the timeout (a client that ignores deadlines ends it at its own
// timeouts).
func (d *Door) Permit(ctx context.Context, c remote.PermitCall) (remote.PermitReply, error) {
	op := RedisDecide
	if c.Op == remote.PermitRelease {
		op = RedisRefund
	}
	// Through the breaker of the server holding the permits' key.
	enter := func() (Pass, error) { return d.enterKey(d.store.PermitKey(c.Name, c.Key)) }
	fn := func(ctx context.Context) (remote.PermitReply, error) { return d.store.Permit(ctx, c) }
	detach := d.guard && d.closed.Load() && (c.Op == remote.PermitRelease || c.Op == remote.PermitLease)
	return callVia(d, ctx, op, enter, fn, detach)
}

// untracked is bounded for a call made once the guards are closed, with
// Guard: fn runs on a goroutine of its own, untracked, waited for until
// the timeout or ctx ends.
func untracked[T any](d *Door, ctx context.Context, node string, fn func(context.Context) (T, error)) (T, error) {
	rctx := d.begin(ctx, node)
	defer rctx.end()
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := fn(rctx)
		ch <- reply{v, err}
	}()
	var r reply
	select {
	case r = <-ch:
	case <-rctx.Done():
		r.err = rctx.Err()
	}
	return r.v, Classify(ctx, rctx.dialed(r.err))
}

// Reset deletes key's state under p in Redis (remote.Store.Reset). Errors
// are Peek's.
func (d *Door) Reset(ctx context.Context, p *remote.Policy, key string) error {
	_, err := call(d, ctx, RedisReset, p, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.store.Reset(ctx, p, key)
	})
	return err
}

// Block blocks key under p in Redis for d (remote.Store.Block). Errors
// are Peek's.
func (d *Door) Block(ctx context.Context, p *remote.Policy, key string, dur time.Duration) error {
	_, err := call(d, ctx, RedisBlock, p, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.store.Block(ctx, p, key, dur)
	})
	return err
}

// Unblock lifts a block of key under p in Redis (remote.Store.Unblock).
// Errors are Peek's.
func (d *Door) Unblock(ctx context.Context, p *remote.Policy, key string) error {
	_, err := call(d, ctx, RedisUnblock, p, key, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, d.store.Unblock(ctx, p, key)
	})
	return err
}

// call makes one call fn, an op, for key under p: asks the breaker,
// bounds it by the timeout and ctx, guards it when the client ignores
// deadlines, counts it, tells the hook, and tells the breaker its
// outcome. A failure of Redis is an error wrapping ErrUnavailable; ctx's
// own error comes back unwrapped.
func call[T any](d *Door, ctx context.Context, op RedisOp, p *remote.Policy, key string, fn func(context.Context) (T, error)) (T, error) {
	return callVia(d, ctx, op, func() (Pass, error) { return d.Enter(p, key) }, fn, false)
}

// callVia is call, through the breaker enter picks; with detach, fn runs
// untracked (see untracked).
func callVia[T any](d *Door, ctx context.Context, op RedisOp, enter func() (Pass, error), fn func(context.Context) (T, error), detach bool) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	pass, cause := enter()
	if cause != nil {
		return zero, unavailable(cause)
	}
	hctx, end := d.start(ctx, op, 1)
	var v T
	var err error
	if detach {
		v, err = untracked(d, hctx, pass.b.node, fn)
	} else {
		v, err = bounded(d, hctx, pass.b.node, fn, nil)
	}
	if end != nil {
		var granted int64
		if dec, ok := any(v).(remote.Decision); ok && op == RedisCharge {
			granted = dec.Granted // Debit's units
		}
		end(single(err, granted))
	}
	if errors.Is(err, ErrClosed) {
		d.Leave(pass, err)
		return zero, err // never sent: not a round trip
	}
	d.single.roundTrips.Add(1)
	if err != nil {
		d.single.errors.Add(1)
	}
	if cause := d.Leave(pass, err); cause != nil {
		return zero, unavailable(cause)
	}
	return v, err
}

// unavailable returns cause wrapping ErrUnavailable, if it does not yet.
func unavailable(cause error) error {
	if errors.Is(cause, ErrUnavailable) {
		return cause
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// Claim asks the regional pool of key under the pooled policy p whether
// the caller refills it (remote.Store.Claim), as a lease's round trip.
func (d *Door) Claim(ctx context.Context, p *remote.Policy, key string, low int64, lead, gap, hold, eta time.Duration) (remote.Claim, error) {
	return call(d, ctx, RedisLease, p, key, func(ctx context.Context) (remote.Claim, error) {
		return d.store.Claim(ctx, p, key, low, lead, gap, hold, eta)
	})
}

// Deposit puts a refill's units in the regional pool of key under the
// pooled policy p and ends the refill (remote.Store.Deposit), as a
// lease's round trip.
func (d *Door) Deposit(ctx context.Context, p *remote.Policy, key string, dep remote.Deposit) (int64, error) {
	return call(d, ctx, RedisLease, p, key, func(ctx context.Context) (int64, error) {
		return d.store.Deposit(ctx, p, key, dep)
	})
}
