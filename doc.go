// Package ratelease enforces global rate limits, held in Redis, for many
// processes at once.
//
// A Policy is a named set of limits (10/s and 100/min and 1000/h at once);
// every limit must admit a request, and a denial by one charges none. Each
// limit counts with one of five algorithms: TokenBucket, FixedWindow,
// SlidingWindowLog, SlidingWindowCounter, LeakyBucket. A Limiter applies
// policies to keys (a user, an API key, an IP):
//
//	l, err := ratelease.New(redisClient)
//	api, err := ratelease.NewPolicy("api", ratelease.PerSecond(10), ratelease.PerMinute(100))
//	res, err := l.Allow(ctx, api, "user:42")
//	if !res.Allowed { /* 429, Retry-After: res.RetryAfter */ }
//
// By default a Limiter leases: it takes units from Redis in batches, through
// atomic Lua scripts, and answers most requests from memory, while the global
// limit holds within a tested bound (a token bucket admits at most
// Burst + Rate·(w + TTL) in any window w; see LeaseConfig and
// docs/leasing.md). WithExact makes every decision one atomic script call
// instead. Redis's own TIME is the only clock that decides a limit, so hosts
// need no clock sync. The state of a key
// lives under <prefix>:{<policy>:<key>}:<limit>; the hash tag keeps all limits
// of one key in one Redis Cluster slot.
//
// For operators: Peek, Reset, AllowAtMost and Refund; Policy.Shadow, a
// policy whose would-be denials are admitted, marked (Result.Shadowed) and
// counted (PolicyStats.ShadowDenied), to roll a limit out safely; and
// Block and Unblock, which deny a key on every instance for a while
// (Result.Blocked).
//
// While Redis is unavailable, a circuit breaker stops calling it and the
// failure mode decides (WithFailureMode: FailLocal, FailOpen, FailClosed).
// Stats counts what happened; WithEvents tells it as it happens, with the
// cause: the first failure, each change of the breaker, and a warning of a
// Redis whose maxmemory-policy may evict limiter keys.
//
// A denial is a Result, not an error. Errors are the sentinels in this
// package (ErrInvalidKey, ErrUnavailable, …), matched with errors.Is, or the
// caller's context error, unwrapped.
package ratelease
