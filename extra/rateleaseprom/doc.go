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
//	ratelease_decisions_by_source_total{source}             counter  local, remote, cached, fallback
//	ratelease_redis_round_trips_total                       counter
//	ratelease_redis_errors_total                            counter
//	ratelease_leases_total                                  counter
//	ratelease_units_leased_total                            counter
//	ratelease_units_refunded_total                          counter
//	ratelease_units_expired_total                           counter
//	ratelease_units_charged_total                           counter  admitted in outages, charged later
//	ratelease_breaker_state{state}                          gauge    1 for closed, open or half_open
//	ratelease_breaker_opens_total                           counter
//	ratelease_instances                                     gauge
//	ratelease_policy_decisions_total{policy,outcome}        counter
//	ratelease_policy_decisions_by_source_total{policy,source} counter
//	ratelease_policy_shadow_denied_total{policy}            counter
//	ratelease_dropped_policy_decisions_total{outcome}       counter
//	ratelease_dropped_policy_decisions_by_source_total{source} counter
//	ratelease_dropped_policy_shadow_denied_total            counter
//
// Each is one field of ratelease.Stats or ratelease.PolicyStats, whose docs
// say what it counts. Decisions by outcome and by source count the same
// decisions two ways: sum either over its label for the total. The
// policies' series and the dropped_policy series add up to the Limiter's
// (Stats.DroppedPolicies says when a policy is dropped; one used again
// starts from zero, which Prometheus reads as a counter reset).
//
// A policy name that is not valid UTF-8 (NewPolicy allows it) is reported
// with its invalid bytes written as \xNN. The package has no state of its
// own, starts no goroutine, and a Collector is safe for concurrent use.
package rateleaseprom
