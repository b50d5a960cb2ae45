package ratelease

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
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
	events       func(Event)
	redisHook    RedisHook
	exact        bool
	lease        LeaseConfig
	maxKeys      int
	prefix       string
	clock        clock.Clock
	redisTimeout time.Duration
	// global and region: WithGlobal's.
	global redis.UniversalClient
	region string
}

const (
	defaultKeyPrefix    = "ratelease"
	defaultRedisTimeout = 100 * time.Millisecond
	defaultMaxKeys      = 100_000
	maxPrefixLen        = 64
)

// DefaultLeaseConfig returns the lease configuration used unless WithLease
// says otherwise. Max and Refresh are 0, "measured": leases are bounded by
// the policy's capacity and the fair share, and sized to serve three
// quarters of TTL at the key's measured demand. TTL is 1.5s, so the token
// bucket's overshoot bound is Rate·1.5s.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{Min: 1, Max: 0, Refresh: 0, TTL: 1500 * time.Millisecond, LowWater: 0.25}
}

func defaultConfig() config {
	return config{
		lease:        DefaultLeaseConfig(),
		maxKeys:      defaultMaxKeys,
		prefix:       defaultKeyPrefix,
		clock:        clock.System{},
		redisTimeout: defaultRedisTimeout,
	}
}

// LeaseConfig tunes leasing: how many units a Limiter takes from Redis at a
// time, and for how long it may hold them. A zero field takes its value
// from DefaultLeaseConfig(). docs/leasing.md says how to choose them.
type LeaseConfig struct {
	// Min and Max bound one lease, in units: 1 <= Min, and Max 0 (the
	// policy's capacity) or at least Min.
	Min, Max int
	// Refresh is how much of the key's measured demand a lease serves; 0
	// is three quarters of TTL, and it must not exceed TTL.
	Refresh time.Duration
	// TTL is how long leased units may stay unused (1ms to 24h): a token
	// bucket admits at most Burst + Rate·(w + TTL) in any span w.
	TTL time.Duration
	// LowWater, in (0, 1): below LowWater × its lease size, a key's next
	// lease is made in the background.
	LowWater float64
}

// WithExact makes every decision one atomic Redis call, with each
// algorithm's exact per-request semantics and no local state. Of WithExact
// and WithLease, the last given wins.
func WithExact() Option {
	return optionFunc(func(c *config) error { c.exact = true; return nil })
}

// WithLease configures leasing, the default mode: decisions come from units
// leased from Redis in batches (a SlidingWindowLog or a LeakyBucket stays
// exact). Zero fields of lc take DefaultLeaseConfig's values; invalid ones
// make New fail with ErrInvalidOption. Of WithExact and WithLease, the last
// given wins.
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

// WithMaxKeys bounds the keys a Limiter keeps local state for (default
// 100,000, at least 1). Past it, the least recently leased key's state is
// dropped and its unused units go back to Redis.
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
// (default "ratelease"), so that applications can share one Redis: 1 to 64
// bytes without '{' or '}', which would move the Cluster hash tag.
func WithKeyPrefix(prefix string) Option {
	return optionFunc(func(c *config) error {
		if prefix == "" || len(prefix) > maxPrefixLen || strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("%w: key prefix %q: 1 to %d bytes without '{' or '}'", ErrInvalidOption, prefix, maxPrefixLen)
		}
		c.prefix = prefix
		return nil
	})
}

// WithClock sets the local clock (default clock.System{}), which times
// waits and lease expiry; Redis's TIME decides every limit, so hosts need
// no clock sync. Tests pass a *clock.Manual.
func WithClock(c clock.Clock) Option {
	return optionFunc(func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		cfg.clock = c
		return nil
	})
}

// Clock returns the Limiter's local clock (WithClock), for code that
// reports on its decisions, such as a rate-limit header's reset time.
func (l *Limiter) Clock() clock.Clock { return l.engine.Clock() }

// WithRedisTimeout bounds each Redis call on top of the caller's context
// (default 100ms; it must be positive). Without the client's
// ContextTimeoutEnabled, each call costs a goroutine that the Limiter
// stops waiting for at the deadline.
func WithRedisTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: redis timeout %v must be positive", ErrInvalidOption, d)
		}
		c.redisTimeout = d
		return nil
	})
}

// FailureMode says how a Limiter decides while Redis is unavailable: its
// circuit breaker is open, or a call failed. Leased units are used first in
// every mode, and a call that timed out while Redis answers others is
// denied (SourceBusy). The zero value is FailLocal.
type FailureMode uint8

// The failure modes.
const (
	// FailLocal decides with a local limit per key at this instance's share
	// of each limit: the key's members as Redis last counted them, or
	// WithInstances. SourceFallback.
	FailLocal FailureMode = iota
	// FailOpen admits every request. SourceFallback.
	FailOpen
	// FailClosed returns an error wrapping ErrUnavailable and the cause.
	FailClosed
)

// String returns "fail-local", "fail-open", "fail-closed", or "unknown".
func (m FailureMode) String() string { return tier.FailureMode(m).String() }

// MarshalText makes the mode a word in JSON, as String says it.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// BreakerState is the state of a Limiter's circuit breaker (Stats().Breaker,
// Event.Breaker).
type BreakerState string

// The circuit breaker's states: it opens after 5 failed calls in a row and
// probes Redis after a backoff (100ms, doubling to 5s). A Redis Cluster has
// one breaker per master.
const (
	// BreakerClosed: every call goes to Redis.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen: no call goes to Redis; the failure mode decides.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen: one call probes Redis; the others are decided as
	// while open.
	BreakerHalfOpen BreakerState = "half-open"
)

// breakerState returns the root's word for the door's state.
func breakerState(s door.BreakerState) BreakerState { return BreakerState(s.String()) }

// WithFailureMode sets how requests are decided while Redis is unavailable
// (default FailLocal). What FailLocal and FailOpen admit is charged to
// Redis once it is back, so that recovery does not admit a fresh burst on
// top.
func WithFailureMode(m FailureMode) Option {
	return optionFunc(func(c *config) error {
		if m > FailClosed {
			return fmt.Errorf("%w: unknown failure mode %d", ErrInvalidOption, m)
		}
		c.failure = m
		return nil
	})
}

// WithInstances fixes how many instances FailLocal divides each limit by
// (at least 1). By default it is the key's members as Redis last counted
// them (for a key not leased yet, the most any key had in the last
// minute), and 1 in exact mode.
func WithInstances(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: instances %d must be at least 1", ErrInvalidOption, n)
		}
		c.instances = n
		return nil
	})
}

// WithGlobal makes client the global Redis of the policies made Worldwide,
// and the Limiter's own client its region's (region: 1 to 128 bytes, no
// ':', '{', '}' or whitespace, not starting with '#', the same for every
// Limiter of the region).
// docs/regions.md has the design and the bound.
func WithGlobal(client redis.UniversalClient, region string) Option {
	return optionFunc(func(c *config) error {
		if client == nil {
			return fmt.Errorf("%w: WithGlobal: nil redis client", ErrInvalidOption)
		}
		// (The region is a member of each worldwide key in the global
		// Redis: its members hash keeps their aggregates under '#'.)
		if err := remote.CheckName(region); err != nil || strings.HasPrefix(region, "#") {
			return fmt.Errorf("%w: WithGlobal: region %q: 1 to %d bytes, no ':', '{', '}' or whitespace, not starting with '#'", ErrInvalidOption, region, remote.MaxNameLen)
		}
		c.global, c.region = client, region
		return nil
	})
}
