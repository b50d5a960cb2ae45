package ratelease

import (
	"context"
	"fmt"

	"github.com/ratelease/ratelease/internal/door"
)

// RedisCall is one Redis round trip that a Limiter starts (WithRedisHook).
type RedisCall struct {
	// Op says what it does: "decide" (atomic decisions), "lease" (leases,
	// with refunds queued meanwhile), "refund", "charge" (Charge, and what
	// the failure mode admitted), "peek", "reset", "block", "unblock",
	// "ping", or "config" (reading a server's maxmemory-policy).
	Op string
	// Keys is the number of calls it carries, each about one key.
	Keys int
}

// redisOps names the door's round trips.
var redisOps = [...]string{
	door.RedisDecide: "decide", door.RedisLease: "lease", door.RedisRefund: "refund",
	door.RedisCharge: "charge", door.RedisPeek: "peek", door.RedisReset: "reset",
	door.RedisBlock: "block", door.RedisUnblock: "unblock", door.RedisPing: "ping",
	door.RedisConfig: "config",
}

// RedisOutcome is what one Redis round trip came to (WithRedisHook).
type RedisOutcome struct {
	// Err is nil when every call succeeded; else the round trip's error,
	// or its first failed call's.
	Err error
	// Failed counts the calls that failed.
	Failed int
	// Granted is the units Redis granted to the round trip's acquiring
	// calls ("decide", "lease", "charge"); 0 for the others.
	Granted int64
}

// RedisHook is told of each Redis round trip a Limiter makes. Called as it
// starts, with the context it is made for (context.Background() for
// background leases, refunds and charges), it returns the context to make
// it with (ctx, or derived from it with values only; nil means ctx) and a
// function called once with the outcome (or nil). It runs on the calling
// goroutine, often a request's: it must not block.
type RedisHook func(ctx context.Context, call RedisCall) (context.Context, func(RedisOutcome))

// WithRedisHook tells h of each Redis round trip the Limiter makes, for
// tracing (extra/rateleaseotel) or logging. Leased hits make no round trip.
// A nil h is an error wrapping ErrInvalidOption.
func WithRedisHook(h RedisHook) Option {
	return optionFunc(func(c *config) error {
		if h == nil {
			return fmt.Errorf("%w: nil redis hook", ErrInvalidOption)
		}
		c.redisHook = h
		return nil
	})
}

// doorHook returns h as the door's hook: nil for a nil h.
func doorHook(h RedisHook) door.Hook {
	if h == nil {
		return nil
	}
	return func(ctx context.Context, op door.RedisOp, keys int) (context.Context, func(door.RedisOutcome)) {
		hctx, end := h(ctx, RedisCall{Op: redisOps[op], Keys: keys})
		if hctx == nil {
			hctx = ctx
		}
		if end == nil {
			return hctx, nil
		}
		return hctx, func(o door.RedisOutcome) {
			if o.Err != nil {
				o.Err = rootErr(o.Err)
			}
			end(RedisOutcome{Err: o.Err, Failed: o.Failed, Granted: o.Granted})
		}
	}
}
