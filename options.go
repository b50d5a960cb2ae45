package ratelease

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/tier"
)

// Option configures a Limiter in New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	failure      FailureMode
	instances    int
	observer     func(BreakerState)
	events       func(Event)
	redisHook    RedisHook
	exact        bool
	lease        LeaseConfig
	maxKeys      int
	prefix       string
	clock        clock.Clock
	redisTimeout time.Duration
}

// Defaults, all in one place.
const (
	// DefaultKeyPrefix starts every Redis key of a Limiter.
	DefaultKeyPrefix = "ratelease"
	// DefaultRedisTimeout bounds each Redis call.
	DefaultRedisTimeout = 100 * time.Millisecond
	// DefaultMaxKeys bounds the keys with local state (WithMaxKeys).
	DefaultMaxKeys = 100_000
	// maxPrefixLen is the longest key prefix, in bytes.
	maxPrefixLen = 64
)

// DefaultLeaseConfig returns the lease configuration used unless WithLease
// says otherwise; see LeaseConfig for what each field does. Its zeros mean
// "measured": no bound on a lease but the policy's capacity and the fair
// share (Max), and leases sized to serve three quarters of TTL at the key's
// measured demand (Refresh). TTL is 1.5s: a key used twice a second by each
// instance then needs a lease for every three requests; the price is the
// token bucket's overshoot bound, Rate·1.5s. It is a function, so that
// nothing in the process can change the defaults of every Limiter.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{Min: 1, Max: 0, Refresh: 0, TTL: 1500 * time.Millisecond, LowWater: 0.25}
}

// DefaultLease is a copy of DefaultLeaseConfig's value, made at start.
//
// Deprecated: New does not read it (a package variable that any code could
// change would change every Limiter's defaults): use DefaultLeaseConfig.
var DefaultLease = DefaultLeaseConfig()

func defaultConfig() config {
	return config{
		exact:        false,
		lease:        DefaultLeaseConfig(),
		maxKeys:      DefaultMaxKeys,
		prefix:       DefaultKeyPrefix,
		clock:        clock.System{},
		redisTimeout: DefaultRedisTimeout,
	}
}

// LeaseConfig tunes leasing: how many units a Limiter takes from Redis at a
// time, and for how long it may hold them. A zero field takes its value
// from DefaultLeaseConfig().
type LeaseConfig struct {
	// Min and Max bound one lease, in units: 1 <= Min, and Max 0 (no bound
	// but the policy's capacity) or at least Min. A cold key's first lease
	// is the request's own n (at least Min): a key used once costs one
	// Redis call, as in exact mode.
	Min, Max int
	// Refresh sizes leases: a lease holds about Refresh worth of the key's
	// measured demand, and never less than four measured lease round trips
	// (so that a hot key's next lease arrives before its units run out).
	// 0, the default, is three quarters of TTL. Longer means fewer Redis
	// calls and more units held; it must not exceed TTL.
	Refresh time.Duration
	// TTL: leased units unused after this long go back to Redis. It is the
	// overshoot bound: in any window of length w a token bucket admits at
	// most Burst + Rate·(w + TTL). Window algorithms' leases also end with
	// their window. From 1ms to 24h.
	TTL time.Duration
	// LowWater, in (0, 1): when a key's allowance falls below LowWater × its
	// lease size (or below what its demand takes in three lease round
	// trips, if more), the next lease is made in the background, so that in
	// steady state no request waits on Redis.
	LowWater float64
}

// WithExact makes every decision one atomic Redis call, with the exact
// per-request semantics of each algorithm: no leases, no local state. Use it
// when every unit must be accounted in Redis the moment it is used, or when
// the decision rate is low enough that a round trip per request is fine. Of
// WithExact and WithLease, the last given wins.
func WithExact() Option {
	return optionFunc(func(c *config) error { c.exact = true; return nil })
}

// WithLease configures leasing, the default mode, with lc (zero fields take
// DefaultLeaseConfig's values): policies without a SlidingWindowLog or
// LeakyBucket are answered from local allowances leased from Redis in
// batches (a CalendarWindow's lease ends at its window's end), and the
// others stay exact. See docs/leasing.md for how to choose the values. Of
// WithExact and WithLease, the last given wins. Invalid values are an error
// wrapping ErrInvalidOption (from New).
func WithLease(lc LeaseConfig) Option {
	return optionFunc(func(c *config) error {
		c.exact = false
		d := DefaultLeaseConfig()
		if lc.Min == 0 {
			lc.Min = d.Min
		}
		if lc.Max == 0 {
			lc.Max = d.Max
		}
		if lc.Refresh == 0 {
			lc.Refresh = d.Refresh
		}
		if lc.TTL == 0 {
			lc.TTL = d.TTL
		}
		if lc.LowWater == 0 {
			lc.LowWater = d.LowWater
		}
		c.lease = lc
		return nil
	})
}

// WithMaxKeys bounds the number of keys a Limiter keeps local state for
// (default DefaultMaxKeys). Past it, the least recently leased key's state is
// dropped and its unused units given back to Redis. It must be at least 1.
func WithMaxKeys(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max keys %d must be at least 1", ErrInvalidOption, n)
		}
		c.maxKeys = n
		return nil
	})
}

// WithKeyPrefix sets the prefix of every Redis key the Limiter writes
// (default DefaultKeyPrefix), so that several applications can share one
// Redis. It must be 1 to 64 bytes without '{' or '}' (a brace would move the
// Redis Cluster hash tag into the prefix and put every key in one slot).
func WithKeyPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if prefix == "" || len(prefix) > maxPrefixLen || strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: key prefix %q: 1 to %d bytes without '{' or '}'", ErrInvalidOption, prefix, maxPrefixLen)
		}
		c.prefix = prefix
		return nil
	})
}

// WithClock sets the local clock (default clock.System{}). Redis's own TIME
// decides every limit, so hosts need no clock sync; the local clock times
// Wait's sleeps and when leased units lapse. With the system clock a
// Limiter reads a coarse clock of its own on a leased hit; a clock.Coarse
// given here is read the same way (see docs/leasing.md on how a hit allows
// for its lag). Tests pass a *clock.Manual.
func WithClock(c clock.Clock) Option {
	return optionFunc(func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		cfg.clock = c
		return nil
	})
}

// Clock returns the Limiter's local clock (WithClock): what code that
// reports on its decisions (the reset time of a rate-limit header, say)
// reads, so that a test clock moves it too.
func (l *Limiter) Clock() clock.Clock { return l.engine.Clock() }

// WithRedisTimeout bounds each Redis call (default DefaultRedisTimeout, 100ms),
// on top of the caller's context: a call that takes longer fails with an
// error wrapping ErrUnavailable. It must be positive.
//
// The bound holds whatever the client's own timeouts. go-redis cuts a call
// short at its context's deadline only when the client was made with
// ContextTimeoutEnabled: true; with such a client (Client, ClusterClient or
// Ring) each call is made directly. With any other, each call runs on its own
// goroutine that the Limiter stops waiting for at the deadline (a grant that
// arrives late is refunded): a goroutine and its allocations more per call,
// which BenchmarkAllowExact's tb-guarded measures next to tb. Set
// ContextTimeoutEnabled for the cheapest path.
func WithRedisTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: redis timeout %v must be positive", ErrInvalidOption, d)
		}
		c.redisTimeout = d
		return nil
	})
}

// FailureMode says how a Limiter decides while Redis is unavailable: while
// its circuit breaker is open, or when a call fails. Units already leased
// are used first in every mode. A call that times out while Redis answers
// others (busy, not down: see SourceBusy) is denied in every mode. The
// zero value is FailLocal.
type FailureMode uint8

// The failure modes (WithFailureMode).
const (
	// FailLocal (the default) decides by per-key local limits at this
	// instance's share of each limit: Rate/instances per Period and
	// Burst/instances (at least 1), with x/time/rate. Instances are the
	// key's members as Redis counted them at its last lease (the instances
	// that lease it), or WithInstances. SourceFallback.
	FailLocal FailureMode = iota
	// FailOpen admits every request. SourceFallback.
	FailOpen
	// FailClosed returns an error wrapping ErrUnavailable and the cause.
	FailClosed
)

// String returns "fail-local", "fail-open", "fail-closed", or "unknown".
func (m FailureMode) String() string { return tier.FailureMode(m).String() }

// MarshalText makes the mode a word in JSON and logs, as String says it.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// BreakerState is the state of a Limiter's circuit breaker (Stats().Breaker,
// WithObserver and Event.Breaker). The zero value is BreakerClosed.
type BreakerState int32

// The circuit breaker's states. It opens after 5 failed Redis calls in a
// row; while open no call goes to Redis. After a backoff (100ms, doubling
// after each failed probe up to 5s) one call probes Redis (half-open); its
// success closes the breaker. With a *redis.ClusterClient there is one
// breaker per master: a master that fails sends only its own keys to the
// failure mode.
const (
	// BreakerClosed: Redis answers; every call goes to it.
	BreakerClosed BreakerState = iota
	// BreakerOpen: Redis failed repeatedly; no call goes to it until the
	// backoff has passed, and decisions come from the failure mode.
	BreakerOpen
	// BreakerHalfOpen: one call (the probe) is testing Redis; the others
	// are decided as while open.
	BreakerHalfOpen
)

// String returns "closed", "open", "half-open", or "unknown".
func (s BreakerState) String() string { return door.BreakerState(s).String() }

// MarshalText makes the state a word in JSON, expvar and logs, as String
// says it.
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// WithFailureMode sets how requests are decided while Redis is unavailable
// (default FailLocal). What FailLocal and FailOpen admit during an outage is
// charged to Redis once it is back, to each limit of a key up to that
// limit's own room (so its capacity), so that the first moments after
// recovery do not admit a fresh full burst of any limit on top.
func WithFailureMode(m FailureMode) Option {
	return optionFunc(func(c *config) error {
		if m > FailClosed {
			return fmt.Errorf("%w: unknown failure mode %d", ErrInvalidOption, m)
		}
		c.failure = m
		return nil
	})
}

// WithInstances fixes the number of instances that FailLocal divides each
// limit by (default, when leasing: the instances that lease the key, as
// Redis counted them at its last lease, or for a key not leased yet the
// most any key had in the last minute; 1 in exact mode). It must be at
// least 1.
func WithInstances(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: instances %d must be at least 1", ErrInvalidOption, n)
		}
		c.instances = n
		return nil
	})
}

// WithObserver calls f with each new state of the circuit breaker: state
// changes only, never on the hot path. f is called in the order of the
// changes, never concurrently, holding no lock, on a goroutine that was
// calling Redis: it must not block. With a Redis Cluster, each master's
// breaker reports its own changes.
//
// Deprecated: use WithEvents: its EventBreaker events tell the same
// changes (Event.Breaker), with their causes.
func WithObserver(f func(BreakerState)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.observer = f
		return nil
	})
}
