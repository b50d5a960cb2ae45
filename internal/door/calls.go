package door

import (
	"context"
	"errors"
	"slices"

	"github.com/ratelease/ratelease/internal/guard"
	"github.com/ratelease/ratelease/remote"
)

// Acquire makes one acquire call through the breaker of r's key's server,
// bounded by the timeout and ctx. cause is not nil when Redis could not
// decide (the breaker is open, or the call failed: then cause wraps
// ErrUnavailable); err is the caller's: ctx's error, unwrapped, or
// ErrClosed. With Guard, a grant that arrives after the deadline is
// refunded where it arrives. Of a pooled policy, a denial by a pool
// short of r.Min (remote.Policy.EmptyPool) waits for a refill and is made
// again, once (the first answer stands if the second call fails), or
// holds until the refill's units may land, and the pools are told of the
// decision.
func (d *Door) Acquire(ctx context.Context, r remote.Request) (dec remote.Decision, cause, err error) {
	dec, cause, err = d.acquireOnce(ctx, r)
	if cause != nil || err != nil || d.pools == nil || r.Policy.Global() == nil {
		return dec, cause, err
	}
	if r.Policy.EmptyPool(dec) {
		if again, retry := d.pools.Refill(ctx, r.Policy, r.Key, r.Min); !again {
			dec.RetryAfter = max(dec.RetryAfter, retry)
		} else if again, cause, err := d.acquireOnce(ctx, r); cause == nil && err == nil {
			dec = again
		}
	}
	d.pools.Answered(r.Policy, r.Key, dec)
	return dec, nil, nil
}

// Decide makes the acquire call r as Acquire does, through the combiner
// of its key's server, for a caller that has been through the breaker
// itself (Enter and Leave): a lease of a cold key, an exact decision that
// goes in one round trip with the exact decisions and first uses that
// come with it, told to the hook as a lease. While it waits there, other
// requests of owner's (not nil) may join it (Join). The pools are told of
// the decision; an empty pool is not refilled here (the caller decides
// such a denial again).
func (d *Door) Decide(ctx context.Context, r remote.Request, owner any) (remote.Decision, error) {
	dec, err := d.decide(ctx, RedisLease, r, Pass{b: d.serverOf(r.Policy, r.Key)}, owner)
	if err == nil && d.pools != nil && r.Policy.Global() != nil {
		d.pools.Answered(r.Policy, r.Key, dec)
	}
	return dec, err
}

// acquireOnce is one acquire call through the breaker (Acquire).
func (d *Door) acquireOnce(ctx context.Context, r remote.Request) (dec remote.Decision, cause, err error) {
	pass, cause := d.Enter(r.Policy, r.Key)
	if cause != nil {
		return remote.Decision{}, cause, nil
	}
	dec, err = d.decide(ctx, RedisDecide, r, pass, nil)
	if cause = d.Leave(pass, err); cause != nil {
		return dec, cause, nil
	}
	return dec, nil, err
}

// acquire makes one acquire call (op, to the hook) to the server named
// node ("": any), bounded by the timeout and ctx, and ended by a failed dial to it (see
// begin). Errors are Classify's.
func (d *Door) acquire(ctx context.Context, op RedisOp, r remote.Request, node string) (remote.Decision, error) {
	if err := ctx.Err(); err != nil {
		return remote.Decision{}, err
	}
	hctx, end := d.start(ctx, op, 1)
	var dec remote.Decision
	var err error
	if d.guard {
		dec, err = d.acquireGuarded(hctx, r, node)
	} else {
		// Without the guard's closures, which would cost two allocations
		// a call (r would move to the heap with them).
		rctx := d.begin(hctx, node)
		dec, err = d.store.Acquire(rctx, r)
		rctx.end()
		err = Classify(hctx, rctx.dialed(err))
	}
	if end != nil {
		end(single(err, dec.Granted))
	}
	if errors.Is(err, ErrClosed) {
		return remote.Decision{}, err // never sent: not a round trip
	}
	d.single.roundTrips.Add(1)
	if err != nil {
		d.single.errors.Add(1)
		return remote.Decision{}, err
	}
	return dec, nil
}

// acquireGuarded is acquire's call with Guard: a grant that arrives after
// the deadline is refunded where it arrives.
func (d *Door) acquireGuarded(ctx context.Context, r remote.Request, node string) (remote.Decision, error) {
	return bounded(d, ctx, node,
		func(ctx context.Context) (remote.Decision, error) { return d.store.Acquire(ctx, r) },
		func(late remote.Decision, err error) {
			if err == nil && late.Granted > 0 {
				d.single.lateGranted.Add(uint64(late.Granted))
				if d.refund(r.Policy, r.Key, late.Granted, late.At) { // already on a tracked goroutine
					d.single.lateRefunded.Add(uint64(late.Granted))
				}
			}
		})
}

// bounded makes one call fn to the server named node ("": any) within the
// timeout and ctx, ended by a failed dial to it (see begin): with Guard on a
// goroutine of its own, late getting what comes back after the deadline
// (nil: dropped), and ErrClosed once the door is closing. Errors are
// Classify's. The caller counts the call.
func bounded[T any](d *Door, ctx context.Context, node string, fn func(context.Context) (T, error), late func(T, error)) (T, error) {
	rctx := d.begin(ctx, node)
	defer rctx.end()
	var v T
	var err error
	if d.guard {
		v, err = guard.Do(&d.guards, rctx, fn, late)
		if errors.Is(err, guard.ErrClosed) {
			err = ErrClosed
		}
	} else {
		v, err = fn(rctx)
	}
	return v, Classify(ctx, rctx.dialed(err))
}

// Refund gives back units of key under p, granted at Redis time at (µs),
// that the caller will not use: its own context is over, so the refund
// gets its own, bounded by the timeout. If Redis cannot take them, the
// units come back by themselves when their state expires.
func (d *Door) Refund(p *remote.Policy, key string, units, at int64) {
	if !d.guard {
		d.refund(p, key, units, at)
		return
	}
	ctx, cancel := d.Bound(context.Background())
	defer cancel()
	_, _ = guard.Do(&d.guards, ctx, func(context.Context) (struct{}, error) {
		d.refund(p, key, units, at)
		return struct{}{}, nil
	}, nil)
}

// refund makes one refund call on the calling goroutine, bounded by the
// timeout. It reports whether Redis took it.
func (d *Door) refund(p *remote.Policy, key string, units, at int64) bool {
	ctx, end := d.start(context.Background(), RedisRefund, 1)
	ctx, cancel := d.Bound(ctx)
	defer cancel()
	d.single.roundTrips.Add(1)
	err := d.store.Refund(ctx, p, key, units, at)
	if end != nil {
		end(single(err, 0))
	}
	if err != nil {
		d.single.errors.Add(1)
		return false
	}
	return true
}

// Charge charges Redis with what take returns: the units
// (remote.Request.Max) admitted without Redis while the server named node
// was unavailable, once its breaker has closed (see Config.Recovered), each
// limit of a key only what it has room for (remote.Store.ChargeFit). take
// is given a test of whether a key's state is on node, nil when every key
// is (but with a Redis Cluster). It all runs on a goroutine Close waits
// for, within one timeout, the calls in one pipeline: one round trip, and
// one error if any call failed. A grant that arrives late stays charged: it
// was owed. Charge returns the units granted, 0 once Close has begun.
func (d *Door) Charge(node string, take func(on func(*remote.Policy, string) bool) []remote.Request) int64 {
	ctx, cancel := d.Bound(context.Background())
	defer cancel()
	var on func(*remote.Policy, string) bool
	if d.sharded {
		on = func(p *remote.Policy, key string) bool { return d.store.Node(ctx, p, key) == node }
	}
	n, err := guard.Do(&d.guards, ctx, func(ctx context.Context) (charged int64, err error) {
		rs := take(on)
		if len(rs) == 0 {
			return 0, nil
		}
		ctx, end := d.start(ctx, RedisCharge, len(rs))
		ds, errs := d.store.ChargeFit(ctx, rs)
		if end != nil {
			end(outcome(ds, errs, nil))
		}
		for i := range ds {
			if errs[i] != nil {
				err = errs[i]
				continue
			}
			charged += ds[i].Granted
		}
		return charged, err
	}, nil)
	if errors.Is(err, guard.ErrClosed) {
		return 0
	}
	d.single.roundTrips.Add(1)
	if err != nil {
		d.single.errors.Add(1)
	}
	return n
}

// Batch makes the refunds gs and the acquire calls rs in one pipeline (see
// remote.Store.Batch), bounded by the timeout and ctx, and ended by a
// failed dial to the server of its first call (see begin): one round trip,
// and an error for each call that failed. With Guard, when the pipeline
// outlives its deadline every call fails with the deadline's error, and the
// grants that arrive later are refunded as they arrive: nobody holds them.
// seen, when not nil, is called as the round trip ends, before the hook
// and the pools hear of it (either may be slow): answered is whether Redis
// answered any call in it.
func (d *Door) Batch(ctx context.Context, rs []remote.Request, gs []remote.Grant, seen func(answered bool)) ([]remote.Decision, []error, []error) {
	op := RedisLease
	if len(rs) == 0 {
		op = RedisRefund
	}
	node := ""
	switch {
	case len(rs) > 0:
		node = d.node(rs[0].Policy, rs[0].Key)
	case len(gs) > 0:
		node = d.node(gs[0].Policy, gs[0].Key)
	}
	ds, errs, gerrs := d.pipeline(ctx, op, node, rs, gs, nil, seen)
	if d.pools != nil {
		for i, r := range rs {
			if errs[i] == nil && r.Policy.Global() != nil {
				d.pools.Answered(r.Policy, r.Key, ds[i])
			}
		}
	}
	return ds, errs, gerrs
}

// pipeline is Batch as op to the server named node: one round trip, told
// to the hook and counted. classify, when not nil, gives each acquire
// call's error as its caller sees it, before the hook and the counters do;
// seen is Batch's.
func (d *Door) pipeline(ctx context.Context, op RedisOp, node string, rs []remote.Request, gs []remote.Grant,
	classify func(i int, err error) error, seen func(answered bool)) ([]remote.Decision, []error, []error) {
	ctx, end := d.start(ctx, op, len(rs)+len(gs))
	rctx := d.begin(ctx, node)
	defer rctx.end()
	d.batched.roundTrips.Add(1)
	ds, errs, gerrs := d.batch(rctx, rs, gs)
	if seen != nil {
		seen(slices.Contains(errs, nil) || slices.Contains(gerrs, nil))
	}
	for i, err := range errs {
		errs[i] = rctx.dialed(err)
		if classify != nil {
			errs[i] = classify(i, errs[i])
		}
	}
	for i, err := range gerrs {
		gerrs[i] = rctx.dialed(err)
	}
	if end != nil {
		end(outcome(ds, errs, gerrs))
	}
	d.batched.failed(errs)
	d.batched.failed(gerrs)
	return ds, errs, gerrs
}

// batch is Batch, uncounted: directly, or with Guard on a goroutine of its
// own.
func (d *Door) batch(ctx context.Context, rs []remote.Request, gs []remote.Grant) ([]remote.Decision, []error, []error) {
	if !d.guard {
		return d.store.Batch(ctx, rs, gs)
	}
	type answer struct {
		ds          []remote.Decision
		errs, gerrs []error
	}
	a, err := guard.Do(&d.guards, ctx, func(ctx context.Context) (answer, error) {
		ds, errs, gerrs := d.store.Batch(ctx, rs, gs)
		return answer{ds, errs, gerrs}, nil
	}, func(a answer, _ error) {
		d.refundLate(rs, a.ds, a.errs)
	})
	if err != nil {
		if errors.Is(err, guard.ErrClosed) {
			err = ErrClosed
		}
		a.ds, a.errs, a.gerrs = make([]remote.Decision, len(rs)), allFailed(len(rs), err), allFailed(len(gs), err)
	}
	return a.ds, a.errs, a.gerrs
}

// refundLate refunds the grants ds (errs their errors) to the requests rs
// of a pipeline whose caller had stopped waiting. It runs on the guarded
// call's goroutine, past the caller's deadline (and maybe past Close): the
// refund gets a timeout of its own.
func (d *Door) refundLate(rs []remote.Request, ds []remote.Decision, errs []error) {
	var late []remote.Grant
	for i, dec := range ds {
		if errs[i] == nil && dec.Granted > 0 {
			d.batched.lateGranted.Add(uint64(dec.Granted))
			late = append(late, remote.Grant{Policy: rs[i].Policy, Key: rs[i].Key, Units: dec.Granted, At: dec.At})
		}
	}
	if len(late) == 0 {
		return
	}
	ctx, end := d.start(context.Background(), RedisRefund, len(late))
	ctx, cancel := d.Bound(ctx)
	defer cancel()
	d.batched.roundTrips.Add(1)
	rerrs := d.store.RefundBatch(ctx, late)
	if end != nil {
		end(outcome(nil, nil, rerrs))
	}
	for i, err := range rerrs {
		if err != nil {
			// Not retried: the units come back by themselves when their
			// key's state expires.
			d.batched.errors.Add(1)
			continue
		}
		d.batched.lateRefunded.Add(uint64(late[i].Units))
	}
}

// allFailed returns n errors, each err: what a pipeline that failed as a
// whole gives each of its calls.
func allFailed(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// Ping asks Redis whether it answers (every master, with a Cluster), within
// the timeout and ctx, with the guard if the client needs one, and without
// a breaker: it is how an owner learns that Redis is back, or not there.
// Errors are Classify's.
func (d *Door) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	hctx, end := d.start(ctx, RedisPing, 0)
	_, err := bounded(d, hctx, "", func(ctx context.Context) (struct{}, error) { return struct{}{}, d.store.Ping(ctx) }, nil)
	if end != nil {
		end(single(err, 0))
	}
	return err
}
