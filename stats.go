package ratelease

import "github.com/ratelease/ratelease/tier"

// Stats counts a Limiter's work since New: a snapshot, taken by
// Limiter.Stats. Stats.Policies breaks its decisions down by policy name.
// The zero value counts nothing.
type Stats struct {
	// Allowed counts the decisions that admitted, each attempt of a Wait
	// included.
	Allowed uint64
	// Denied counts the decisions that denied, each attempt of a Wait
	// included (and the would-be denials of a policy in shadow mode).
	Denied uint64
	// Local counts the decisions answered from a leased allowance, without
	// a Redis call (Source Local).
	Local uint64
	// Remote counts the decisions made by one Redis call: a lease, or an
	// exact decision (Source Remote).
	Remote uint64
	// Cached counts the denials repeated locally because Redis denied the
	// key moments ago (Source Cached).
	Cached uint64
	// Fallback counts the decisions of the failure mode while Redis was
	// unavailable (Source Fallback).
	Fallback uint64
	// Busy counts the denials because Redis was busy (Source Busy).
	Busy uint64
	// Invalid counts the calls refused for invalid input, with
	// ErrInvalidPolicy (a nil or zero Policy, or one that a policy made
	// later redefined in this Limiter), ErrInvalidKey, ErrInvalidN or
	// ErrExceedsCapacity: decisions (Allow, Wait, AllowAtMost and their N
	// forms) and the operators' calls (Peek, Reset, Refund, Block,
	// Unblock). None is a decision: they are not in Allowed or Denied.
	// (Block's ErrInvalidDuration is not counted.)
	Invalid uint64
	// RoundTrips counts Redis round trips: one pipeline of leases and
	// refunds counts one.
	RoundTrips uint64
	// Errors counts the Redis calls that failed (an error or a timeout).
	Errors uint64
	// Leases counts the leases Redis answered, granted or denied.
	Leases uint64
	// UnitsLeased counts the units the leases granted.
	UnitsLeased uint64
	// UnitsRefunded counts the leased units given back to Redis unused (on
	// expiry, eviction from the key store, and Close).
	UnitsRefunded uint64
	// UnitsExpired counts the leased units that lapsed unused (their
	// lease's TTL or window passed): given back (in UnitsRefunded) or, when
	// a refund could no longer give anything back, dropped (in
	// UnitsDropped).
	UnitsExpired uint64
	// UnitsUsed counts the leased units that admitted requests took.
	UnitsUsed uint64
	// UnitsDropped counts the leased units neither used nor given back:
	// lapsed when a refund could no longer give anything back, forgotten
	// by a Reset, or in a refund Redis did not take (an error; they come
	// back when the key's state expires in Redis).
	UnitsDropped uint64
	// UnitsHeld counts the leased units held now: in allowances, set aside
	// to go back, or on their way back. The units add up: at any moment
	// no lease or refund is in flight, UnitsLeased = UnitsUsed +
	// UnitsRefunded + UnitsDropped + UnitsHeld, and after Close UnitsHeld
	// is 0.
	UnitsHeld uint64
	// Instances is the most instances that shared a key this instance
	// leased in the last minute, as Redis counted them (1 in exact mode).
	Instances int64
	// Keys is the number of keys the Limiter holds in its local key store
	// now, each with its leased units or its cached denial (WithMaxKeys
	// bounds them); 0 in exact mode, which holds none. A key decided once
	// is not held: its first decision keeps nothing.
	Keys uint64
	// Breaker is the circuit breaker's state now. With a Redis Cluster
	// there is a breaker per master, and Breaker is the worst of them
	// (open, then half-open, then closed).
	Breaker BreakerState
	// BreakerOpens counts the times a breaker opened: after five failed
	// calls in a row, or after a failed probe.
	BreakerOpens uint64
	// UnitsCharged counts the units admitted during outages (FailLocal,
	// FailOpen) and charged to Redis once it was back: per key, the most
	// any of its limits took (each is charged up to its own room).
	UnitsCharged uint64
	// Policies counts decisions by policy name, for the policies the
	// Limiter holds (policies of one name summed). A policy that leases is
	// let go when its last key leaves the key store (WithMaxKeys bounds
	// them; the first 1024 policies the Limiter leases under are kept), a policy
	// decided exactly when the program no longer refers to it, and every
	// policy at Close; a policy used again after it was let go counts from
	// zero. Policies made at run time (per tenant, per request) thus do not
	// accumulate.
	Policies map[string]PolicyStats
	// DroppedPolicies totals the decisions of the policies the Limiter let
	// go: the policies' counts and DroppedPolicies add up to Allowed,
	// Denied, Local, Remote, Cached, Fallback and Busy (but for decisions made
	// while Stats reads, or in the moment a policy is let go).
	DroppedPolicies PolicyStats
	// DeniedBy counts the denials of the policies in Policies by the limit
	// that decided them (Result.Limit): policy name -> the limit's String
	// ("10 req/s (burst 10)") -> denials, one entry for each of the
	// policy's limits (Policy.Limits), 0 included, so that a policy of 10/s
	// and 100/min tells which of the two denies. It counts the denials that
	// Redis made (Source Remote) and those repeated locally (Cached),
	// shadow mode's would-be denials included; not those of a blocked key
	// (Result.Blocked: no limit decided) nor those of the failure mode
	// (Fallback, which decides by local shares of the limits), so a
	// policy's sum is at most its Denied. Policies of one name with other
	// limits (a redefinition, while both are held) each add their own
	// limits. The policies let go have none: a limit means nothing across
	// them. Counting it costs a denial one atomic add, and an admission
	// nothing.
	DeniedBy map[string]map[string]uint64
}

// PolicyStats counts a Limiter's decisions under one policy name since New
// (see Stats.Policies and Limiter.PolicyStats): Allowed and Denied, each
// attempt of a Wait included, and the same decisions by Source (Local,
// Remote, Cached, Fallback, Busy). Allowed + Denied = Local + Remote +
// Cached + Fallback + Busy. The counters only grow while the Limiter holds the policy; see
// Stats.Policies for when it stops holding one. The zero value counts
// nothing.
type PolicyStats struct {
	// Allowed counts the policy's decisions that admitted.
	Allowed uint64
	// Denied counts the policy's decisions that denied, ShadowDenied's
	// included.
	Denied uint64
	// Local counts the decisions answered from a leased allowance, without
	// a Redis call. Counting them costs the hit path nothing: it is the
	// sum of the policy's keys' hit counters, read by Stats.
	Local uint64
	// Remote counts the decisions made by one Redis call.
	Remote uint64
	// Cached counts the denials repeated locally (for their RetryAfter or
	// the lease TTL, whichever is shorter).
	Cached uint64
	// Fallback counts the decisions of the failure mode while Redis was
	// unavailable.
	Fallback uint64
	// Busy counts the denials because Redis was busy (SourceBusy).
	Busy uint64
	// ShadowDenied counts the would-be denials that the policy, in shadow
	// mode (Policy.Shadow), admitted all the same; each is in Denied as
	// well.
	ShadowDenied uint64
}

// Stats returns a snapshot of the Limiter's counters, with those of each
// policy (Stats.Policies). It walks every key the Limiter holds: call it
// when metrics are scraped, not per request.
func (l *Limiter) Stats() Stats {
	return statsOf(l.engine.Stats())
}

// PolicyStats returns the counters of the policies named p.Name() that the
// Limiter holds (Stats().Policies[p.Name()]); zero for a nil p. It walks
// the keys of those policies only.
//
// Deprecated: use Stats().Policies[p.Name()], which the metrics read.
func (l *Limiter) PolicyStats(p *Policy) PolicyStats {
	if p == nil {
		return PolicyStats{}
	}
	return PolicyStats(l.engine.PolicyStats(p.name))
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
		Instances:       s.Instances,
		Keys:            s.Keys,
		Breaker:         BreakerState(s.Breaker),
		BreakerOpens:    s.BreakerOpens,
		UnitsCharged:    s.UnitsCharged,
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
