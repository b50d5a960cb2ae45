package ratetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
)

// Epoch is where an Env's clocks start: 2024-01-01 00:00:00 UTC, a whole
// number of days since the Unix epoch, so that every window of a period
// that divides a day (a second, a minute, an hour, a day) begins at it.
var Epoch = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

// RedisTimeout is the Redis timeout of an Env's Limiters
// (ratelease.WithRedisTimeout): long, so that an in-memory Redis slowed by a
// loaded machine never hands a decision to the failure mode.
const RedisTimeout = 5 * time.Second

// The errors of ratetest, matched with errors.Is.
var (
	// ErrNotExhausted: Exhaust could not use the key up: the Limiter kept
	// admitting (a Redis that fails under FailOpen or FailLocal, say, or
	// time moved by another goroutine meanwhile).
	ErrNotExhausted = errors.New("ratetest: key not exhausted")
	// ErrClosed: the Env was closed.
	ErrClosed = errors.New("ratetest: env closed")
)

// Env is a Limiter on an in-memory Redis, with one manual clock for both;
// see the package doc. Make it with New or Run. Safe for concurrent use.
type Env struct {
	mr      *miniredis.Miniredis
	addr    string // mr's, read once: a closed miniredis has none
	clock   *clock.Manual
	client  *redis.Client
	limiter *ratelease.Limiter

	// mu serializes Advance, so that Redis's time, its key expiry and the
	// local clock move as one; it also guards closed and the extra
	// Limiters and clients NewLimiter made (closed with the Env).
	mu      sync.Mutex
	now     time.Time // requires mu held
	closed  bool      // requires mu held
	closers []func()  // requires mu held; run in reverse order by Close
}

// New returns an Env whose Limiter is made with opts (after the Env's own
// options: see the package doc), closed when t ends (t.Cleanup). An error
// (an invalid option: ratelease.ErrInvalidOption) fails t with t.Fatalf.
func New(t testing.TB, opts ...ratelease.Option) *Env {
	t.Helper()
	e, err := Run(opts...)
	if err != nil {
		t.Fatalf("ratetest: %v", err)
		return nil // for a testing.TB whose Fatalf returns
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Run is New for code without a testing.TB (an example, a TestMain, a
// program): it returns an Env, or an error (an invalid option:
// ratelease.ErrInvalidOption; miniredis failing to listen), and the caller
// must Close the Env.
func Run(opts ...ratelease.Option) (*Env, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, fmt.Errorf("ratetest: start miniredis: %w", err)
	}
	mr.SetTime(Epoch)
	e := &Env{mr: mr, addr: mr.Addr(), clock: clock.NewManual(Epoch), now: Epoch}
	e.closers = append(e.closers, mr.Close)
	l, c, err := e.newLimiter(opts)
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	e.limiter, e.client = l, c
	return e, nil
}

// newLimiter makes a Limiter with a Redis client of its own on e's Redis,
// with e's options and then opts, and registers both to be closed with e.
// e.mu must not be held.
func (e *Env) newLimiter(opts []ratelease.Option) (*ratelease.Limiter, *redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: e.addr, ContextTimeoutEnabled: true})
	all := make([]ratelease.Option, 0, len(opts)+3)
	all = append(all, ratelease.WithExact(), ratelease.WithRedisTimeout(RedisTimeout))
	all = append(all, opts...)
	all = append(all, ratelease.WithClock(e.clock)) // last: Advance drives it
	l, err := ratelease.New(c, all...)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		_ = l.Close()
		_ = c.Close()
		return nil, nil, ErrClosed
	}
	// The Limiter first, then its client (Close runs these in reverse).
	e.closers = append(e.closers, func() { _ = c.Close() }, func() { _ = l.Close() })
	return l, c, nil
}

// Limiter returns the Env's Limiter, for the code under test.
func (e *Env) Limiter() *ratelease.Limiter { return e.limiter }

// NewLimiter returns another Limiter on the Env's Redis and clock, with a
// Redis client of its own: another replica of the service under test. Its
// options are as the Env's Limiter's (opts after the Env's own; the clock
// is the Env's). It is closed with the Env. Errors: an invalid option
// (ratelease.ErrInvalidOption), ErrClosed.
func (e *Env) NewLimiter(opts ...ratelease.Option) (*ratelease.Limiter, error) {
	l, _, err := e.newLimiter(opts)
	return l, err
}

// Now returns the Env's time: the Limiter's clock and Redis's TIME.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Advance moves the Env's time forward by d, all of it at once: Redis's
// TIME (so every limit refills and every window moves by d), the expiry of
// Redis keys, and then the Limiters' clock, which wakes every Wait whose
// sleep has ended (after Redis's time moved, so that it finds the units it
// waited for). A d of zero or less changes nothing: the time never goes
// back. A decision made while Advance runs may see the new Redis time with
// the old local time.
func (e *Env) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
	e.mr.SetTime(e.now)
	e.mr.FastForward(d)
	e.clock.Set(e.now)
}

// Exhaust charges key under p until the Limiter denies it: once it returns
// nil, the next Allow of key under p is denied (under a policy in shadow
// mode, Policy.Shadow, a would-be denial: admitted with Result.Shadowed),
// until the time moves. It takes as much as it is granted with AllowAtMost
// until a limit of p denies (a LeakyBucket's queue is filled up to its
// burst, so that WaitN cannot queue either), and checks the denial with
// Peek.
//
// It charges the Env's Limiter; use ExhaustWith for another one. Errors:
// the Limiter's (ratelease.ErrInvalidPolicy, ErrInvalidKey, ErrClosed,
// ctx's error, ErrUnavailable), or ErrNotExhausted when the Limiter kept
// admitting.
func (e *Env) Exhaust(ctx context.Context, p *ratelease.Policy, key string) error {
	return ExhaustWith(ctx, e.limiter, p, key)
}

// ExhaustWith is Exhaust on l: any Limiter (one of NewLimiter's, or one of
// the code under test). A nil l is an error wrapping
// ratelease.ErrInvalidOption. Only a Limiter whose time stands still (an
// Env's, between Advances) can be relied on to stay exhausted.
func ExhaustWith(ctx context.Context, l *ratelease.Limiter, p *ratelease.Policy, key string) error {
	if l == nil {
		return fmt.Errorf("%w: nil Limiter", ratelease.ErrInvalidOption)
	}
	// n: as much as one call may be granted (AllowAtMost caps n at the
	// capacity). On a clock that stands still, a limit is used up in
	// ceil(its capacity / n) grants, so calls beyond the sum of those mean
	// that something admits without charging. A zero or nil Policy is left
	// to AllowAtMost to refuse.
	n, calls := 1, 2
	if p != nil && p.Name() != "" {
		n = p.Capacity()
		for _, lim := range p.Limits() { // Burst filled in: Rate for windows
			calls += (lim.Burst + n - 1) / n
		}
	}
	for range calls {
		res, err := l.AllowAtMost(ctx, p, key, n)
		if err != nil {
			return err
		}
		if res.Allowed && !res.Shadowed {
			continue // more may be left: every limit is used up only once denied
		}
		// Denied. In lease mode a lease in flight may have brought units
		// meanwhile: Peek answers from them, or from Redis.
		res, err = l.Peek(ctx, p, key)
		if err != nil {
			return err
		}
		if !res.Allowed || res.Shadowed {
			return nil
		}
	}
	return fmt.Errorf("%w: %q under policy %q still admitted after %d calls", ErrNotExhausted, key, p.Name(), calls)
}

// Clock returns the Env's clock, which Advance moves. Read it (Now, and
// Timers: how many sleeps of Wait, and in lease mode of the Limiter's own
// goroutines, are pending, to know that a goroutine has started waiting),
// but move the time with Advance: Advance or Set on the clock alone would
// leave Redis's time behind.
func (e *Env) Clock() *clock.Manual { return e.clock }

// Redis returns the in-memory Redis. Inspect it (Keys, TTL, Dump), or fail
// it (SetError, Close) to test the failure mode; move its time with
// Advance, not with its SetTime or FastForward.
func (e *Env) Redis() *miniredis.Miniredis { return e.mr }

// Client returns the Redis client of the Env's Limiter. It is closed with
// the Env.
func (e *Env) Client() *redis.Client { return e.client }

// Close closes the Limiters (giving back what they leased), their clients,
// and the in-memory Redis. It is idempotent and returns nil; New's Env is
// closed when its test ends.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	closers := e.closers
	e.closers = nil
	e.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	return nil
}
