package ratelease

import (
	"context"
	"fmt"

	"github.com/ratelease/ratelease/internal/door"
)

// RedisOp says what one Redis round trip of a Limiter does (RedisCall).
type RedisOp uint8

// The kinds of Redis round trip. The zero value is no call. (They are the
// door's numbers: redishook_internal_test.go holds them to it.)
const (
	// RedisDecide: atomic decisions: an exact decision (WithExact, or a
	// policy that does not lease), each attempt of such a Wait,
	// AllowAtMost, and a permit's acquire or Extend. One, or, when more
	// came to the server while several were on their way, those in one
	// pipeline (Keys says how many), each still its own atomic call.
	RedisDecide RedisOp = 1
	// RedisLease: one pipeline of leases (with the refunds queued
	// meanwhile), made in the background for any number of callers.
	RedisLease RedisOp = 2
	// RedisRefund: units given back: a pipeline of refunds of unused
	// leased units (on expiry, eviction and Close), a Wait's reserved slot,
	// grants that arrived after their caller stopped waiting,
	// Limiter.Refund, and a permit's Release.
	RedisRefund RedisOp = 3
	// RedisCharge: the units that FailLocal or FailOpen admitted during an
	// outage, charged once Redis is back; Limiter.Charge.
	RedisCharge RedisOp = 4
	// RedisPeek, RedisReset, RedisBlock, RedisUnblock: Limiter.Peek,
	// Reset, Block and Unblock.
	RedisPeek    RedisOp = 5
	RedisReset   RedisOp = 6
	RedisBlock   RedisOp = 7
	RedisUnblock RedisOp = 8
	// RedisPing: Limiter.Ping.
	RedisPing RedisOp = 9
	// RedisConfig: the reading of a server's maxmemory-policy (CONFIG
	// GET), once per server, with WithEvents (see EventWarning).
	RedisConfig RedisOp = 10
)

// String returns "decide", "lease", "refund", "charge", "peek", "reset",
// "block", "unblock", "ping", "config", or "none" for the zero value.
func (o RedisOp) String() string {
	switch o {
	case RedisDecide:
		return "decide"
	case RedisLease:
		return "lease"
	case RedisRefund:
		return "refund"
	case RedisCharge:
		return "charge"
	case RedisPeek:
		return "peek"
	case RedisReset:
		return "reset"
	case RedisBlock:
		return "block"
	case RedisUnblock:
		return "unblock"
	case RedisPing:
		return "ping"
	case RedisConfig:
		return "config"
	}
	return "none"
}

// MarshalText makes the op a word in JSON and logs, as String says it.
func (o RedisOp) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// RedisCall is one Redis round trip that a Limiter starts (WithRedisHook).
type RedisCall struct {
	// Op says what it does.
	Op RedisOp
	// Keys is the number of calls it carries, each about one key: 1, or
	// the length of a pipeline (RedisDecide, RedisLease, RedisRefund,
	// RedisCharge); 0 for RedisPing and RedisConfig.
	Keys int
}

// RedisOutcome is what one Redis round trip came to (WithRedisHook).
type RedisOutcome struct {
	// Err is nil when every call of the round trip succeeded; else the
	// round trip's error, or that of its first call that failed (the
	// caller's context error, unwrapped, when that ended the wait first).
	Err error
	// Failed counts the calls that failed: 0 or 1 for a single call, up to
	// Keys for a pipeline.
	Failed int
	// Granted is the units that Redis granted to the round trip's
	// acquiring calls (RedisDecide, RedisLease, RedisCharge); 0 for the
	// others. A RedisDecide of one call that granted 0 was a denial.
	Granted int64
}

// RedisHook is told of each Redis round trip a Limiter makes: called as it
// starts, with the context it is made for (context.Background() for the
// calls a Limiter makes in the background: leases, refunds, charges), it
// returns the context to make it with and a function to be called once,
// with the outcome, when it ends (nil if none is wanted). The context
// returned must be ctx or derived from it with values only (a span, say):
// one that ends sooner would cut the call short; nil means ctx. A go-redis
// hook on the client (a tracing hook, say) sees that context.
//
// A round trip the circuit breaker refused is not made, and not told; one
// that the Limiter's Close stopped before it was sent ends with ErrClosed.
// The hook runs on the goroutine that makes the call, on the request's
// path for RedisDecide and for the operators' calls: it must not block.
// See WithRedisHook.
type RedisHook func(ctx context.Context, call RedisCall) (context.Context, func(RedisOutcome))

// WithRedisHook makes the Limiter tell h of each Redis round trip it makes,
// as it starts and as it ends: for tracing (package
// github.com/ratelease/ratelease/extra/rateleaseotel makes a span of each)
// or logging. Leased hits, which make no Redis call, never call h; without
// the option a Redis call costs a nil check more. A nil h is an error
// wrapping ErrInvalidOption.
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
		hctx, end := h(ctx, RedisCall{Op: RedisOp(op), Keys: keys})
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
