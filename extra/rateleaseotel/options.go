package rateleaseotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the package's meter and
// tracer.
const ScopeName = "github.com/ratelease/ratelease/extra/rateleaseotel"

// ErrInvalidOption is wrapped by the errors of RegisterMetrics and
// NewRedisHook: a nil Limiter, option or provider.
var ErrInvalidOption = errors.New("rateleaseotel: invalid option")

// Option configures RegisterMetrics and NewRedisHook; each takes the
// options that concern it and ignores the others.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	attrs   []attribute.KeyValue
}

// newConfig returns the configuration opts make: by default the global
// providers (otel.GetMeterProvider, otel.GetTracerProvider) and no
// attribute.
func newConfig(opts []Option) (config, error) {
	c := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithMeterProvider makes RegisterMetrics use mp (default: the global one,
// otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		c.meters = mp
		return nil
	})
}

// WithTracerProvider makes NewRedisHook use tp (default: the global one,
// otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
		}
		c.tracers = tp
		return nil
	})
}

// WithLimiterName adds the attribute ratelease.limiter=name (LimiterKey) to
// every measurement and span, so that the metrics of several Limiters
// stay apart.
func WithLimiterName(name string) Option {
	return WithAttributes(LimiterKey.String(name))
}

// WithAttributes adds attrs to every measurement and span.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) error {
		c.attrs = append(c.attrs, attrs...)
		return nil
	})
}

// The attributes the package sets.
const (
	// LimiterKey names the Limiter (WithLimiterName).
	LimiterKey = attribute.Key("ratelease.limiter")
	// PolicyKey is a policy's name.
	PolicyKey = attribute.Key("ratelease.policy")
	// LimitKey is one of a policy's limits, as ratelease.Limit's String
	// writes it: "10 req/s (burst 10)".
	LimitKey = attribute.Key("ratelease.limit")
	// OutcomeKey is a decision's outcome: "allowed" or "denied".
	OutcomeKey = attribute.Key("ratelease.outcome")
	// SourceKey is a decision's source: "local", "remote", "cached" or
	// "fallback".
	SourceKey = attribute.Key("ratelease.source")
	// BreakerStateKey is a circuit breaker state: "closed", "open" or
	// "half_open".
	BreakerStateKey = attribute.Key("ratelease.breaker.state")
	// RedisOpKey is what a Redis round trip does (ratelease.RedisCall.Op:
	// "decide", "lease", "refund", …).
	RedisOpKey = attribute.Key("ratelease.redis.op")
	// RedisKeysKey is the number of calls a round trip carries, each about
	// one key (ratelease.RedisCall.Keys).
	RedisKeysKey = attribute.Key("ratelease.redis.keys")
	// RedisFailedKey is the number of its calls that failed.
	RedisFailedKey = attribute.Key("ratelease.redis.failed")
	// UnitsGrantedKey is the units Redis granted to a round trip's
	// acquiring calls (decide, lease, charge).
	UnitsGrantedKey = attribute.Key("ratelease.units.granted")
)
