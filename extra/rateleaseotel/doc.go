// Package rateleaseotel reports a ratelease Limiter to OpenTelemetry: its
// Stats as metrics, and its Redis round trips as spans.
//
// Metrics: RegisterMetrics registers observable instruments with one
// callback, which reads Limiter.Stats once per collection (Stats walks
// every key the Limiter holds: never per request):
//
//	reg, err := rateleaseotel.RegisterMetrics(limiter, rateleaseotel.WithLimiterName("api"))
//	if err != nil { ... }
//	defer reg.Unregister()
//
// The instruments, each with the attributes of WithAttributes (and
// ratelease.limiter with WithLimiterName):
//
//	ratelease.decisions                          counter  ratelease.outcome: allowed, denied
//	ratelease.decisions.by_source                counter  ratelease.source: local, remote, cached, fallback, busy
//	ratelease.redis.round_trips                  counter
//	ratelease.redis.errors                       counter
//	ratelease.leases                             counter
//	ratelease.units.leased                       counter
//	ratelease.units.refunded                     counter
//	ratelease.units.expired                      counter
//	ratelease.units.used                         counter
//	ratelease.units.dropped                      counter
//	ratelease.units.held                         gauge    leased = used + refunded + dropped + held
//	ratelease.units.charged                      counter  admitted in outages, charged later
//	ratelease.breaker.state                      gauge    ratelease.breaker.state: closed, open, half_open (1 for the current one)
//	ratelease.breaker.opens                      counter
//	ratelease.instances                          gauge
//	ratelease.invalid_requests                   counter  calls refused for invalid input
//	ratelease.keys                               gauge    keys in the local key store (0 in exact mode)
//	ratelease.policy.decisions                   counter  ratelease.policy, ratelease.outcome
//	ratelease.policy.decisions.by_source         counter  ratelease.policy, ratelease.source
//	ratelease.policy.shadow_denied               counter  ratelease.policy
//	ratelease.policy.denied_by_limit             counter  ratelease.policy, ratelease.limit (Limit.String)
//	ratelease.dropped_policy.decisions           counter  ratelease.outcome
//	ratelease.dropped_policy.decisions.by_source counter  ratelease.source
//	ratelease.dropped_policy.shadow_denied       counter
//
// The counters are cumulative and monotonic (Int64ObservableCounter). Each
// is one field of ratelease.Stats or ratelease.PolicyStats, whose docs say
// what it counts; package extra/rateleaseprom reports the same figures to
// Prometheus under the same names, "_" for "." (and a _total suffix on
// counters). A policy's denials by limit (Stats.DeniedBy) tell
// which of its limits denies; they leave out a blocked key's denials and
// the failure mode's, and a dropped policy's go with it.
//
// Spans: NewRedisHook returns a ratelease.RedisHook, given to the Limiter
// at New, that makes a span of each Redis round trip (a lease, a refund,
// an exact decision, …) with its outcome:
//
//	hook, err := rateleaseotel.NewRedisHook()
//	if err != nil { ... }
//	limiter, err := ratelease.New(redisClient, ratelease.WithRedisHook(hook))
//
// A Limiter has one Redis hook (the last ratelease.WithRedisHook wins): to
// time the round trips for Prometheus as well, give the hook to
// rateleaseprom.TimeRedisCalls, whose timing option then replaces
// ratelease.WithRedisHook(hook).
//
// The package has no state of its own and starts no goroutine; what it
// returns is safe for concurrent use.
package rateleaseotel
