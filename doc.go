// Package ratelease enforces global rate limits, held in Redis, for many
// processes at once: a Limiter applies a Policy, a named set of limits that
// must all admit, to keys (a user, an API key, an IP):
//
//	l, err := ratelease.New(redisClient)
//	api, err := ratelease.NewPolicy("api", ratelease.PerSecond(10), ratelease.PerMinute(100))
//	res, err := l.Allow(ctx, api, "user:42")
//	if !res.Allowed { /* 429, Retry-After: res.RetryAfter */ }
//
// By default a Limiter leases units from Redis in batches and answers most
// requests from memory, within a tested bound (LeaseConfig); WithExact makes
// every decision one atomic Redis call. The guarantees, leasing, outages
// and operations are told in the README and docs/ of
// https://github.com/ratelease/ratelease.
package ratelease
