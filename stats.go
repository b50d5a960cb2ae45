package ratelease

import "github.com/ratelease/ratelease/tier"

// Stats counts a Limiter's work since New: a snapshot, taken by
// Limiter.Stats. docs/operations.md ("Metrics") says how to read it.
type Stats struct {
	// Allowed and Denied count decisions (each attempt of a Wait); Local,
	// Remote, Cached, Fallback and Busy the same decisions by Source.
	Allowed, Denied                       uint64
	Local, Remote, Cached, Fallback, Busy uint64
	// Invalid counts the calls refused for invalid input.
	Invalid uint64
	// RoundTrips counts Redis round trips (a pipeline counts one); Errors
	// the Redis calls that failed.
	RoundTrips, Errors uint64
	// Leases counts the leases Redis answered and UnitsLeased the units
	// they granted, which are UnitsUsed, UnitsRefunded (given back),
	// UnitsDropped (lost: a refund Redis did not take, a Reset) or
	// UnitsHeld, whenever no lease or refund is in flight. UnitsExpired
	// counts the units that lapsed unused.
	Leases, UnitsLeased                                             uint64
	UnitsRefunded, UnitsExpired, UnitsUsed, UnitsDropped, UnitsHeld uint64
	// Instances is the most instances that shared a key this instance
	// leased in the last minute, as Redis counted them (1 in exact mode).
	Instances int64
	// Keys is the number of keys held in the local key store (WithMaxKeys).
	Keys uint64
	// Breaker is the circuit breaker's state (a Cluster's worst), and
	// BreakerOpens the times a breaker opened.
	Breaker      BreakerState
	BreakerOpens uint64
	// UnitsCharged counts the units the failure mode admitted and Redis
	// was charged once back.
	UnitsCharged uint64
	// GlobalRoundTrips, GlobalErrors: WithGlobal's Redis; UnitsPooled: the
	// units this instance's refills put in its region's pools.
	GlobalRoundTrips, GlobalErrors, UnitsPooled uint64
	// Policies counts decisions by policy name, for the policies the
	// Limiter holds, and DroppedPolicies those of the policies let go (at
	// Close, or once no key of theirs is held and the program dropped
	// them).
	Policies        map[string]PolicyStats
	DroppedPolicies PolicyStats
	// DeniedBy counts denials by policy name and the String of the limit
	// that decided them, so that a policy of 10/s and 100/min tells which
	// of the two denies.
	DeniedBy map[string]map[string]uint64
}

// PolicyStats counts a Limiter's decisions under one policy name (see
// Stats.Policies). Allowed + Denied = Local + Remote + Cached + Fallback +
// Busy.
type PolicyStats struct {
	Allowed, Denied                       uint64
	Local, Remote, Cached, Fallback, Busy uint64
	// ShadowDenied counts the would-be denials a shadow policy admitted;
	// each is in Denied as well.
	ShadowDenied uint64
}

// Stats returns a snapshot of the Limiter's counters. It walks every key
// the Limiter holds: call it when metrics are scraped, not per request.
func (l *Limiter) Stats() Stats {
	return statsOf(l.engine.Stats())
}

// statsOf converts the engine's snapshot. PolicyStats and tier.PolicyStats
// have one layout, so a policy's counters convert as a whole; the test
// TestVocabularyAgrees keeps Stats and tier.Stats field for field.
func statsOf(s tier.Stats) Stats {
	st := Stats{
		Allowed: s.Allowed, Denied: s.Denied,
		Local: s.Local, Remote: s.Remote, Cached: s.Cached, Fallback: s.Fallback, Busy: s.Busy, Invalid: s.Invalid,
		RoundTrips: s.RoundTrips, Errors: s.Errors,
		Leases: s.Leases, UnitsLeased: s.UnitsLeased, UnitsRefunded: s.UnitsRefunded, UnitsExpired: s.UnitsExpired,
		UnitsUsed: s.UnitsUsed, UnitsDropped: s.UnitsDropped, UnitsHeld: s.UnitsHeld,
		Instances:        s.Instances,
		Keys:             s.Keys,
		Breaker:          breakerState(s.Breaker),
		BreakerOpens:     s.BreakerOpens,
		UnitsCharged:     s.UnitsCharged,
		GlobalRoundTrips: s.GlobalRoundTrips, GlobalErrors: s.GlobalErrors, UnitsPooled: s.UnitsPooled,
		DroppedPolicies: PolicyStats(s.DroppedPolicies),
		DeniedBy:        s.DeniedBy,
	}
	if s.Policies != nil {
		st.Policies = make(map[string]PolicyStats, len(s.Policies))
		for name, ps := range s.Policies {
			st.Policies[name] = PolicyStats(ps)
		}
	}
	return st
}
