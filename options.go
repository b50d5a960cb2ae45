package ratelease

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelease/ratelease/clock"
)

// Option configures a Limiter in New.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	exact        bool
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
	// maxPrefixLen is the longest key prefix, in bytes.
	maxPrefixLen = 64
)

func defaultConfig() config {
	return config{
		exact:        true,
		prefix:       DefaultKeyPrefix,
		clock:        clock.System{},
		redisTimeout: DefaultRedisTimeout,
	}
}

// WithExact makes every decision one atomic Redis call, with the exact
// per-request semantics of each algorithm. It is the only mode in this
// release, and so the default.
func WithExact() Option {
	return optionFunc(func(c *config) error { c.exact = true; return nil })
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
// decides every limit; the local clock only times Wait's sleeps. Tests pass
// a *clock.Manual.
func WithClock(c clock.Clock) Option {
	return optionFunc(func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		cfg.clock = c
		return nil
	})
}

// WithRedisTimeout bounds each Redis call (default DefaultRedisTimeout, 100ms),
// on top of the caller's context: a call that takes longer fails with an
// error wrapping ErrUnavailable. It must be positive.
//
// The bound holds whatever the client's own timeouts. go-redis cuts a call
// short at its context's deadline only when the client was made with
// ContextTimeoutEnabled: true; with such a client (Client, ClusterClient or
// Ring) each call is made directly. With any other, each call runs on its own
// goroutine that the Limiter stops waiting for at the deadline (a grant that
// arrives late is refunded), which costs about a microsecond and a few
// allocations per call: set ContextTimeoutEnabled for the cheapest path.
func WithRedisTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: redis timeout %v must be positive", ErrInvalidOption, d)
		}
		c.redisTimeout = d
		return nil
	})
}
