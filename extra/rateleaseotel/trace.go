package rateleaseotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelease/ratelease"
)

// NewRedisHook returns a ratelease.RedisHook that makes a span of each
// Redis round trip of a Limiter, with a tracer of the tracer provider
// (WithTracerProvider, default the global one); pass it to New with
// ratelease.WithRedisHook. A nil option is an error wrapping
// ErrInvalidOption.
//
// A span is named "ratelease." and the round trip's op ("ratelease.decide",
// "ratelease.lease", "ratelease.refund", …), of kind client, with the
// attributes db.system.name "redis", ratelease.redis.op and
// ratelease.redis.keys as it starts, and as it ends
// ratelease.redis.failed, and for the acquiring ops (decide, lease,
// charge) ratelease.units.granted, and for a decide that succeeded
// ratelease.outcome ("allowed", or "denied" when nothing was granted). A
// failed round trip records its error and sets the status Error.
//
// The span of a decision made on a request's path (decide, and the
// operators' peek, refund, reset, block, unblock) is a child of the span in
// the request's context; leases, the refunds of unused units and the
// charges after an outage are made in the background, for any number of
// requests, and their spans are roots. Leased hits make no Redis call and
// no span. The span's context is the one the Redis client runs the call
// with, so the client's own tracing (redisotel) nests under it.
func NewRedisHook(opts ...Option) (ratelease.RedisHook, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	tracer := cfg.tracers.Tracer(ScopeName)
	base := cfg.attrs
	return func(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		op := call.Op
		attrs := make([]attribute.KeyValue, 0, 3+len(base))
		attrs = append(attrs, semconv.DBSystemNameRedis, RedisOpKey.String(op), RedisKeysKey.Int(call.Keys))
		attrs = append(attrs, base...)
		ctx, span := tracer.Start(ctx, "ratelease."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		return ctx, func(o ratelease.RedisOutcome) {
			span.SetAttributes(RedisFailedKey.Int(o.Failed))
			switch call.Op {
			case "decide", "lease", "charge":
				span.SetAttributes(UnitsGrantedKey.Int64(o.Granted))
			}
			if o.Err != nil {
				span.RecordError(o.Err)
				span.SetStatus(codes.Error, o.Err.Error())
			} else if call.Op == "decide" {
				outcome := allowed
				if o.Granted == 0 {
					outcome = denied
				}
				span.SetAttributes(outcome)
			}
			span.End()
		}
	}, nil
}
