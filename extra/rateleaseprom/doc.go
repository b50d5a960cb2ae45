// Package rateleaseprom exports a ratelease Limiter's Stats as Prometheus
// metrics.
//
// A Collector reads Limiter.Stats once per scrape (Stats walks every key
// the Limiter holds: never per request) and reports constant metrics, so
// that the series of policies made and dropped at run time come and go
// with them:
//
//	c, err := rateleaseprom.New(limiter, rateleaseprom.WithLimiterName("api"))
//	if err != nil { ... }
//	prometheus.MustRegister(c)
//
// The metrics, each with the Collector's constant labels (WithLimiterName
// adds limiter="name", so that several Limiters can share a registry):
//
//	ratelease_decisions_total{outcome}                      counter  allowed, denied
//	ratelease_decisions_by_source_total{source}             counter  local, remote, cached, fallback, busy
//	ratelease_redis_round_trips_total                       counter
//	ratelease_redis_errors_total                            counter
//	ratelease_leases_total                                  counter
//	ratelease_units_leased_total                            counter
//	ratelease_units_refunded_total                          counter
//	ratelease_units_expired_total                           counter
//	ratelease_units_used_total                              counter
//	ratelease_units_dropped_total                           counter
//	ratelease_units_held                                    gauge    leased = used + refunded + dropped + held
//	ratelease_units_charged_total                           counter  admitted in outages, charged later
//	ratelease_breaker_state{state}                          gauge    1 for closed, open or half_open
//	ratelease_breaker_opens_total                           counter
//	ratelease_instances                                     gauge
//	ratelease_invalid_requests_total                        counter  calls refused for invalid input
//	ratelease_keys                                          gauge    keys in the local key store (0 in exact mode)
//	ratelease_policy_decisions_total{policy,outcome}        counter
//	ratelease_policy_decisions_by_source_total{policy,source} counter
//	ratelease_policy_shadow_denied_total{policy}            counter
//	ratelease_policy_denied_by_limit_total{policy,limit}    counter  limit as Limit.String writes it
//	ratelease_dropped_policy_decisions_total{outcome}       counter
//	ratelease_dropped_policy_decisions_by_source_total{source} counter
//	ratelease_dropped_policy_shadow_denied_total            counter
//
// Each is one field of ratelease.Stats or ratelease.PolicyStats, whose docs
// say what it counts. Decisions by outcome and by source count the same
// decisions two ways: sum either over its label for the total. The
// policies' series and the dropped_policy series add up to the Limiter's
// (Stats.DroppedPolicies says when a policy is dropped; one used again
// starts from zero, which Prometheus reads as a counter reset). A policy's
// denials by limit (Stats.DeniedBy) tell which of its limits denies
// (a policy of 10/s and 100/min: the one or the other); they leave out a
// blocked key's denials and the failure mode's, and a dropped policy's go
// with it.
//
// The time of each Redis round trip, a histogram by op (decide, lease,
// refund, …; buckets from 100µs to 1s), takes two steps, since the
// Limiter must time its calls from New on, before its Collector exists:
//
//	timing, report := rateleaseprom.TimeRedisCalls()
//	limiter, err := ratelease.New(redisClient, timing)      // 1: the Limiter times its calls
//	...
//	c, err := rateleaseprom.New(limiter, report)            // 2: its Collector reports them
//
//	ratelease_redis_call_duration_seconds{op}               histogram
//
// TimeRedisCalls returns both halves at once, so that a program that uses
// one and drops the other does not compile; New refuses a report that
// another Collector has. A Limiter has one Redis hook: give its others
// (rateleaseotel's spans) to TimeRedisCalls, which passes each round trip
// on to them, not to ratelease.New.
//
// A policy name that is not valid UTF-8 (NewPolicy allows it) is reported
// with its invalid bytes written as \xNN. The package has no state of its
// own but the histogram of TimeRedisCalls, starts no goroutine, and what
// it returns is safe for concurrent use.
package rateleaseprom
