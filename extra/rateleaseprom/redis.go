package rateleaseprom

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelease/ratelease"
)

// redisCallBuckets are the upper bounds, in seconds, of the buckets of
// ratelease_redis_call_duration_seconds: 100µs to 1s, from a round trip to
// a loopback Redis to one at the Redis timeout's scale.
var redisCallBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// TimeRedisCalls returns the two halves of the histogram
// ratelease_redis_call_duration_seconds{op}, the time of each Redis round
// trip of one Limiter by what it does (op: ratelease.RedisCall.Op,
// "decide", "lease", "refund", …), from its start to its end: a Redis
// call and what it waited for (a pooled connection, the batch it rode
// in). Neither half works alone:
//
//   - timing, a ratelease.Option (ratelease.WithRedisHook), makes the
//     Limiter time its round trips: pass it to ratelease.New;
//   - report, an Option, makes the Collector of that Limiter report the
//     histogram, with its constant labels: pass it to New.
//
// A program that keeps one half and drops the other does not compile (a
// variable declared and not used). New refuses report (ErrInvalidOption)
// when another Collector reports it already: one pair for each Limiter.
//
// A Limiter has one Redis hook (the last ratelease.WithRedisHook given to
// ratelease.New wins): give TimeRedisCalls the Limiter's other hooks, such
// as the spans of package extra/rateleaseotel's NewRedisHook, not
// ratelease.New. Each round trip is told to them in their order, with the
// context each returns passed to the next and the Redis call, and its end
// in the reverse order; the time is the call's, without theirs. A nil
// hook makes ratelease.New fail with an error wrapping
// ratelease.ErrInvalidOption.
//
// Leased hits make no Redis call and are not timed. The histogram's
// buckets end at 100µs, 250µs, 500µs, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms,
// 100ms, 250ms, 500ms and 1s.
func TimeRedisCalls(hooks ...ratelease.RedisHook) (timing ratelease.Option, report Option) {
	t := &redisTimes{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratelease_redis_call_duration_seconds",
		Help:    "Time of the limiter's Redis round trips, by op (decide, lease, refund, charge, peek, reset, block, unblock, ping, config), from start to end: the call and its wait for a connection or a batch.",
		Buckets: redisCallBuckets,
	}, []string{"op"})}
	for _, h := range hooks {
		if h == nil {
			return ratelease.WithRedisHook(nil), optionFunc(func(c *config) { c.redis = t })
		}
	}
	t.hooks = append([]ratelease.RedisHook(nil), hooks...)
	return ratelease.WithRedisHook(t.hook), optionFunc(func(c *config) { c.redis = t })
}

// redisTimes is the histogram of TimeRedisCalls, and the hooks it passes
// each round trip on to.
type redisTimes struct {
	vec   *prometheus.HistogramVec
	hooks []ratelease.RedisHook
	// taken: a Collector reports the histogram (see New).
	taken atomic.Bool
}

// hook is the Limiter's RedisHook: it tells t.hooks of the round trip, and
// times it.
func (t *redisTimes) hook(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
	var ends []func(ratelease.RedisOutcome)
	for _, h := range t.hooks {
		hctx, end := h(ctx, call)
		if hctx != nil {
			ctx = hctx
		}
		if end != nil {
			ends = append(ends, end)
		}
	}
	start := time.Now()
	return ctx, func(o ratelease.RedisOutcome) {
		t.vec.WithLabelValues(call.Op).Observe(time.Since(start).Seconds())
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](o)
		}
	}
}
