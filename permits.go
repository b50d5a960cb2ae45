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

// Concurrency is a limit on work in flight: at most limit permits of a key
// held at once across every instance ("at most 5 exports in flight per
// tenant"). A permit is held until its Release or until its TTL ends, so
// that a crashed holder gives it back by itself; long work extends it.
// Make one with NewConcurrency; it is immutable and safe for concurrent
// use. docs/operations.md says how permits are kept and leased, and the
// bound: never more than limit held at any instant of Redis's clock.
type Concurrency struct {
	name  string
	limit int
	ttl   time.Duration
}

// maxPermitTTL is the longest TTL of a permit.
const maxPermitTTL = 24 * time.Hour

// NewConcurrency returns a limit of limit permits per key, each held for
// ttl (1ms to 24h; else ErrInvalidDuration) unless released or extended.
// Its name follows NewPolicy's rules (else ErrInvalidPolicy); a limit below
// 1 is ErrInvalidLimit. A Concurrency and a Policy of one name keep apart
// state.
func NewConcurrency(name string, limit int, ttl time.Duration) (*Concurrency, error) {
	if err := remote.CheckName(name); err != nil {
		return nil, rootErr(err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: concurrency %q: limit %d is below 1", ErrInvalidLimit, name, limit)
	}
	if ttl < time.Millisecond || ttl > maxPermitTTL {
		return nil, fmt.Errorf("%w: concurrency %q: permit TTL %v is not within 1ms and %v", ErrInvalidDuration, name, ttl, maxPermitTTL)
	}
	return &Concurrency{name: name, limit: limit, ttl: ttl}, nil
}

// Name returns the limit's name.
func (c *Concurrency) Name() string { return c.name }

// Permit is one permit of a Concurrency's key, held: Release it when the
// work ends. Safe for concurrent use.
type Permit struct {
	l        *Limiter
	c        *Concurrency
	key, id  string
	hold     tier.PermitHold // where it was granted: Redis, leased slots, the fallback
	released atomic.Bool
}

// AcquirePermit acquires a permit of key under c if fewer than the limit
// are held, without waiting. A denial is a nil Permit and no error; the
// Result says Allowed, Remaining permits, RetryAfter (until the first one
// held expires) and Source (SourceFallback: the failure mode granted it,
// and it is this instance's alone). While Redis is unavailable, FailClosed
// returns ErrUnavailable, FailOpen grants, and FailLocal grants up to this
// instance's share of the limit. Errors: ErrInvalidPolicy (a nil
// Concurrency), ErrInvalidKey, ErrClosed, ErrUnavailable, ctx's error.
func (l *Limiter) AcquirePermit(ctx context.Context, c *Concurrency, key string) (*Permit, Result, error) {
	if ctx == nil {
		return nil, Result{}, ErrNilContext
	}
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
	return &Permit{l: l, c: c, key: key, id: id, hold: d.Hold}, res, nil
}

// WaitPermit acquires a permit of key under c, asking again while the limit
// are held (a release is not announced: at least every 100ms). Errors are
// AcquirePermit's.
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

// Release gives the permit back, for another holder at once, even after
// the Limiter's Close. It returns ErrPermitLost if the permit was no longer
// held, and ErrUnavailable if Redis cannot take it (it then comes back when
// its TTL ends).
func (p *Permit) Release(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
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

// Extend makes the permit last ttl (1ms to 24h) from now, for work longer
// than its TTL. Errors: Release's, and ErrInvalidDuration. A permit of the
// failure mode has no TTL: Extend does nothing.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return ErrNilContext
	}
	if ttl < time.Millisecond || ttl > maxPermitTTL {
		return fmt.Errorf("%w: permit TTL %v is not within 1ms and %v", ErrInvalidDuration, ttl, maxPermitTTL)
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
