package ratelease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// Concurrency is a limit on work in flight: at most Limit permits of a key
// held at once, across every instance, for work that takes a while ("at
// most 5 exports in flight per tenant"). A permit is held from
// AcquirePermit or WaitPermit until its Release, or until its TTL ends,
// so that a holder that crashed (its process killed, its network gone)
// gives it back by itself; a holder of long work extends it (Extend).
// Make one with NewConcurrency; it is immutable and safe for concurrent
// use.
//
// Their state is a sorted set in Redis, on Redis's clock: in exact mode
// of permit ids by expiry, one call for each acquire, release and
// extension. In lease mode an instance leases slots of a key in batches
// (members of that set, under a fair share of the slots by the instances'
// demands) and grants permits from them: an acquire and a release are
// usually local; a call leases or renews slots (at most 100ms after the
// last, and within half the TTL), and gives back those no permit has used
// for 100ms, or at once when other instances wait (a free slot goes to
// the instance that has waited longest). The bound:
// never more than Limit held across the fleet at any instant of Redis's
// clock, a crashed holder's permits counted until their TTL ends (exact
// mode) or its slots expire, within 1.5 TTLs of its last call (lease
// mode). While Redis is unavailable the failure mode decides (see
// AcquirePermit).
type Concurrency struct {
	name  string
	limit int
	ttl   time.Duration
}

// MaxPermitTTL is the longest TTL of a permit: work longer than that
// extends its permit (Permit.Extend).
const MaxPermitTTL = 24 * time.Hour

// NewConcurrency returns a concurrency limit of limit permits per key,
// each held for ttl (1ms to MaxPermitTTL) unless released sooner or
// extended. Its name is a policy's (see NewPolicy): errors wrap
// ErrInvalidPolicy; a limit below 1 is ErrInvalidLimit, a ttl out of range
// ErrInvalidDuration. A Concurrency and a Policy of one name keep apart
// state.
func NewConcurrency(name string, limit int, ttl time.Duration) (*Concurrency, error) {
	if err := remote.CheckName(name); err != nil {
		return nil, rootErr(err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: concurrency %q: limit %d is below 1", ErrInvalidLimit, name, limit)
	}
	if ttl < time.Millisecond || ttl > MaxPermitTTL {
		return nil, fmt.Errorf("%w: concurrency %q: permit TTL %v is not within 1ms and %v", ErrInvalidDuration, name, ttl, MaxPermitTTL)
	}
	return &Concurrency{name: name, limit: limit, ttl: ttl}, nil
}

// Name returns the limit's name.
func (c *Concurrency) Name() string { return c.name }

// Limit returns the most permits of a key held at once.
func (c *Concurrency) Limit() int { return c.limit }

// TTL returns how long a permit is held unless released or extended.
func (c *Concurrency) TTL() time.Duration { return c.ttl }

// Permit is one permit of a Concurrency's key, held: Release it when the
// work ends. Safe for concurrent use.
type Permit struct {
	l        *Limiter
	c        *Concurrency
	key, id  string
	hold     tier.PermitHold // where it was granted: Redis, leased slots, the fallback
	fallback bool            // granted by the failure mode: this instance's alone
	released atomic.Bool
}

// Fallback reports whether the permit was granted by the failure mode
// while Redis was unavailable: it is this instance's alone (FailLocal's
// share, or FailOpen's), and its Release and Extend stay here.
func (p *Permit) Fallback() bool { return p.fallback }

// AcquirePermit acquires a permit of key under c if fewer than c.Limit()
// are held, without waiting: the Permit, and a Result with Allowed and
// Granted (1 or 0), Remaining (the permits left after the call, across
// every instance, as Redis last said in lease mode), RetryAfter when
// denied (until the first permit or leased slot held expires: a release
// frees one sooner) and Source (SourceRemote; SourceLocal for a permit
// from this instance's leased slots; SourceFallback). Result.Limit is the
// zero Limit. A denial is a nil Permit, and no error.
//
// While Redis is unavailable the failure mode decides: FailClosed returns
// an error wrapping ErrUnavailable; FailOpen grants a permit; FailLocal
// grants while this instance holds fewer fallback permits of key than its
// share of the limit (c.Limit() over WithInstances, at least 1). A
// fallback permit is this instance's alone (Permit.Fallback). Errors:
// ErrInvalidPolicy (a nil or zero Concurrency), ErrInvalidKey, ErrClosed,
// ctx's error unwrapped, ErrUnavailable as above.
func (l *Limiter) AcquirePermit(ctx context.Context, c *Concurrency, key string) (*Permit, Result, error) {
	if err := checkConcurrency(c, key); err != nil {
		return nil, Result{}, err
	}
	id := rand.Text()
	d, err := l.engine.AcquirePermit(ctx, c.name, key, id, int64(c.limit), c.ttl)
	if err != nil {
		return nil, Result{}, rootErr(err)
	}
	res := Result{Allowed: d.Granted, Remaining: max(0, c.limit-int(d.Held)), RetryAfter: d.RetryAfter, Source: Source(d.Source)}
	if !d.Granted {
		return nil, res, nil
	}
	res.Granted = 1
	return &Permit{l: l, c: c, key: key, id: id, hold: d.Hold, fallback: d.Source == tier.SourceFallback}, res, nil
}

// WaitPermit acquires a permit of key under c, waiting while c.Limit() are
// held: it asks again when one may be free, at least every 100ms (a
// release is not announced) and at the latest when the first permit held
// expires. It returns ctx's error, unwrapped, when ctx ends first, and
// ErrClosed when the Limiter closes. Other errors are AcquirePermit's.
func (l *Limiter) WaitPermit(ctx context.Context, c *Concurrency, key string) (*Permit, error) {
	backoff := 2 * time.Millisecond
	for {
		p, res, err := l.AcquirePermit(ctx, c, key)
		if err != nil || p != nil {
			return p, err
		}
		d := min(backoff, res.RetryAfter, 100*time.Millisecond)
		backoff = min(2*backoff, 100*time.Millisecond)
		t := l.engine.Clock().NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-l.engine.Done():
			t.Stop()
			return nil, ErrClosed
		case <-t.C():
		}
	}
}

// Release gives the permit back, for another holder at once. It returns
// ErrPermitLost if the permit was no longer held (its TTL ended first, or
// it was released already); an error wrapping ErrUnavailable if Redis
// cannot take it, whatever the failure mode (the permit then comes back
// when its TTL ends); ctx's error, unwrapped. A fallback permit is
// released here. After the Limiter's Close a Release still gives the
// permit back to Redis (in lease mode, its slot), bounded by the Redis
// timeout, so that a graceful shutdown's permits are free at once.
func (p *Permit) Release(ctx context.Context) error {
	if !p.released.CompareAndSwap(false, true) {
		return ErrPermitLost
	}
	held, err := p.l.engine.ReleasePermit(ctx, p.c.name, p.key, p.id, p.hold)
	switch {
	case err != nil:
		if !errors.Is(err, door.ErrUnavailable) {
			p.released.Store(false) // not sent: it may be released again
		}
		return rootErr(err)
	case !held:
		return ErrPermitLost
	}
	return nil
}

// Extend makes the permit last ttl (1ms to MaxPermitTTL) from now, for
// work longer than its TTL: call it before the TTL ends. Errors: Release's,
// and ErrInvalidDuration for a ttl out of range. A fallback permit has no
// TTL: Extend does nothing.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxPermitTTL {
		return fmt.Errorf("%w: permit TTL %v is not within 1ms and %v", ErrInvalidDuration, ttl, MaxPermitTTL)
	}
	if p.released.Load() {
		return ErrPermitLost
	}
	held, err := p.l.engine.ExtendPermit(ctx, p.c.name, p.key, p.id, ttl, p.hold)
	switch {
	case err != nil:
		return rootErr(err)
	case !held:
		return ErrPermitLost
	}
	return nil
}

// checkConcurrency validates the concurrency limit and key of a call.
func checkConcurrency(c *Concurrency, key string) error {
	if c == nil || c.limit == 0 {
		return fmt.Errorf("%w: a nil or zero Concurrency: make one with NewConcurrency", ErrInvalidPolicy)
	}
	return checkKey(key)
}
