package rateleaseotel

import (
	"context"
	"fmt"
	"math"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelease/ratelease"
)

// RegisterMetrics registers l's Stats as observable instruments of a
// Meter of the meter provider (WithMeterProvider, default the global
// one), with one callback that reads Stats once per collection. The
// instruments are listed in the package doc. Unregister the returned
// Registration to stop observing l (before dropping it, so that the
// provider does not hold it). A nil l or option is an error wrapping
// ErrInvalidOption; the meter's own errors come back wrapped as they are.
func RegisterMetrics(l *ratelease.Limiter, opts ...Option) (metric.Registration, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return register(cfg, l.Stats)
}

// instruments are the observable instruments of RegisterMetrics.
type instruments struct {
	decisions, bySource               metric.Int64ObservableCounter
	roundTrips, errors                metric.Int64ObservableCounter
	leases, leased, refunded, expired metric.Int64ObservableCounter
	used, dropped                     metric.Int64ObservableCounter
	held                              metric.Int64ObservableGauge
	charged, breakerOpens             metric.Int64ObservableCounter
	globalTrips, globalErrors, pooled metric.Int64ObservableCounter
	breakerState, instances           metric.Int64ObservableGauge
	invalid                           metric.Int64ObservableCounter
	keys                              metric.Int64ObservableGauge
	policyDecisions, policySources    metric.Int64ObservableCounter
	policyShadow, policyDeniedBy      metric.Int64ObservableCounter
	droppedDecisions, droppedSources  metric.Int64ObservableCounter
	droppedShadow                     metric.Int64ObservableCounter
}

// register makes the instruments on cfg's meter and registers the
// callback that observes stats.
func register(cfg config, stats func() ratelease.Stats) (metric.Registration, error) {
	m := cfg.meters.Meter(ScopeName)
	var ins instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	ins.decisions = counter("ratelease.decisions", "{decision}",
		"Decisions of the limiter by outcome (allowed, denied), each attempt of a Wait included.")
	ins.bySource = counter("ratelease.decisions.by_source", "{decision}",
		"Decisions of the limiter by source: local (a leased allowance), remote (one Redis call), cached (a denial repeated locally), fallback (the failure mode), busy (denied: Redis busy).")
	ins.roundTrips = counter("ratelease.redis.round_trips", "{round_trip}",
		"Redis round trips (a pipeline of leases and refunds counts one).")
	ins.errors = counter("ratelease.redis.errors", "{call}", "Redis calls that failed.")
	ins.leases = counter("ratelease.leases", "{lease}", "Leases that Redis answered.")
	ins.leased = counter("ratelease.units.leased", "{unit}", "Units that leases were granted.")
	ins.refunded = counter("ratelease.units.refunded", "{unit}",
		"Leased units given back to Redis (on expiry, eviction and close).")
	ins.expired = counter("ratelease.units.expired", "{unit}",
		"Leased units that lapsed unused (refunded, or dropped when a refund could no longer change anything).")
	ins.used = counter("ratelease.units.used", "{unit}", "Leased units that admitted requests took.")
	ins.dropped = counter("ratelease.units.dropped", "{unit}",
		"Leased units neither used nor given back (lapsed past a refund's worth, forgotten by a reset, or in a refund Redis did not take).")
	ins.held = gauge("ratelease.units.held", "{unit}",
		"Leased units held now: in allowances, set aside, or on their way back. leased = used + refunded + dropped + held, with no lease in flight.")
	ins.charged = counter("ratelease.units.charged", "{unit}",
		"Units admitted during Redis outages (FailLocal, FailOpen) and charged to Redis once it was back.")
	ins.globalTrips = counter("ratelease.global.round_trips", "{round_trip}",
		"Round trips to the global Redis of worldwide policies (WithGlobal).")
	ins.globalErrors = counter("ratelease.global.errors", "{call}", "Calls to the global Redis that failed.")
	ins.pooled = counter("ratelease.units.pooled", "{unit}",
		"Units this instance's refills put in its region's pools of worldwide policies.")
	ins.breakerState = gauge("ratelease.breaker.state", "1",
		"1 for the circuit breaker's current state (closed, open, half_open), 0 for the others; with a Redis Cluster, the worst of the masters' breakers.")
	ins.breakerOpens = counter("ratelease.breaker.opens", "{open}", "Times a circuit breaker opened.")
	ins.instances = gauge("ratelease.instances", "{instance}",
		"The most instances that shared a key this instance leased in the last minute, as Redis counted them (1 in exact mode).")
	ins.invalid = counter("ratelease.invalid_requests", "{call}",
		"Calls refused for invalid input (invalid policy, key or n, or n above the policy's capacity); they are not decisions.")
	ins.keys = gauge("ratelease.keys", "{key}",
		"Keys held in the limiter's local key store now, with their leased units or cached denials (0 in exact mode).")
	ins.policyDecisions = counter("ratelease.policy.decisions", "{decision}",
		"Decisions by policy and outcome (allowed, denied), for the policies the limiter holds.")
	ins.policySources = counter("ratelease.policy.decisions.by_source", "{decision}",
		"Decisions by policy and source (local, remote, cached, fallback, busy), for the policies the limiter holds.")
	ins.policyShadow = counter("ratelease.policy.shadow_denied", "{decision}",
		"Would-be denials admitted because the policy is in shadow mode (counted in the denied outcome as well).")
	ins.policyDeniedBy = counter("ratelease.policy.denied_by_limit", "{decision}",
		"Denials by policy and the limit that decided them (as Limit.String writes it), by Redis or repeated locally, for the policies the limiter holds; a blocked key's denials and the failure mode's are in no limit's.")
	ins.droppedDecisions = counter("ratelease.dropped_policy.decisions", "{decision}",
		"Decisions by outcome of the policies the limiter no longer holds.")
	ins.droppedSources = counter("ratelease.dropped_policy.decisions.by_source", "{decision}",
		"Decisions by source of the policies the limiter no longer holds.")
	ins.droppedShadow = counter("ratelease.dropped_policy.shadow_denied", "{decision}",
		"Shadow-mode denials of the policies the limiter no longer holds.")
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	base := cfg.attrs
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		ins.observe(o, stats(), base)
		return nil
	},
		ins.decisions, ins.bySource, ins.roundTrips, ins.errors, ins.leases, ins.leased, ins.refunded, ins.expired,
		ins.used, ins.dropped, ins.held, ins.charged, ins.breakerState, ins.breakerOpens, ins.instances,
		ins.invalid, ins.keys, ins.globalTrips, ins.globalErrors, ins.pooled,
		ins.policyDecisions, ins.policySources, ins.policyShadow, ins.policyDeniedBy,
		ins.droppedDecisions, ins.droppedSources, ins.droppedShadow)
}

// The attribute values of outcomes and sources.
var (
	allowed  = OutcomeKey.String("allowed")
	denied   = OutcomeKey.String("denied")
	local    = SourceKey.String("local")
	remote   = SourceKey.String("remote")
	cached   = SourceKey.String("cached")
	busy     = SourceKey.String("busy")
	fallback = SourceKey.String("fallback")
)

// observe observes every figure of s, each with the attributes base.
func (ins *instruments) observe(o metric.Observer, s ratelease.Stats, base []attribute.KeyValue) {
	observe := func(obs metric.Int64Observable, v uint64, attrs ...attribute.KeyValue) {
		o.ObserveInt64(obs, clamp(v), metric.WithAttributes(append(attrs, base...)...))
	}
	observe(ins.decisions, s.Allowed, allowed)
	observe(ins.decisions, s.Denied, denied)
	observe(ins.bySource, s.Local, local)
	observe(ins.bySource, s.Remote, remote)
	observe(ins.bySource, s.Cached, cached)
	observe(ins.bySource, s.Busy, busy)
	observe(ins.bySource, s.Fallback, fallback)
	observe(ins.roundTrips, s.RoundTrips)
	observe(ins.errors, s.Errors)
	observe(ins.leases, s.Leases)
	observe(ins.leased, s.UnitsLeased)
	observe(ins.refunded, s.UnitsRefunded)
	observe(ins.expired, s.UnitsExpired)
	observe(ins.used, s.UnitsUsed)
	observe(ins.dropped, s.UnitsDropped)
	observe(ins.held, s.UnitsHeld)
	observe(ins.charged, s.UnitsCharged)
	observe(ins.globalTrips, s.GlobalRoundTrips)
	observe(ins.globalErrors, s.GlobalErrors)
	observe(ins.pooled, s.UnitsPooled)
	for _, st := range []ratelease.BreakerState{ratelease.BreakerClosed, ratelease.BreakerOpen, ratelease.BreakerHalfOpen} {
		var v uint64
		if s.Breaker == st {
			v = 1
		}
		observe(ins.breakerState, v, BreakerStateKey.String(stateValue(st)))
	}
	observe(ins.breakerOpens, s.BreakerOpens)
	observe(ins.instances, uint64(max(s.Instances, 0)))
	observe(ins.invalid, s.Invalid)
	observe(ins.keys, s.Keys)

	for name, ps := range s.Policies {
		policy := PolicyKey.String(name)
		observe(ins.policyDecisions, ps.Allowed, policy, allowed)
		observe(ins.policyDecisions, ps.Denied, policy, denied)
		observe(ins.policySources, ps.Local, policy, local)
		observe(ins.policySources, ps.Remote, policy, remote)
		observe(ins.policySources, ps.Cached, policy, cached)
		observe(ins.policySources, ps.Busy, policy, busy)
		observe(ins.policySources, ps.Fallback, policy, fallback)
		observe(ins.policyShadow, ps.ShadowDenied, policy)
	}
	for name, by := range s.DeniedBy {
		policy := PolicyKey.String(name)
		for limit, n := range by {
			observe(ins.policyDeniedBy, n, policy, LimitKey.String(limit))
		}
	}
	ds := s.DroppedPolicies
	observe(ins.droppedDecisions, ds.Allowed, allowed)
	observe(ins.droppedDecisions, ds.Denied, denied)
	observe(ins.droppedSources, ds.Local, local)
	observe(ins.droppedSources, ds.Remote, remote)
	observe(ins.droppedSources, ds.Cached, cached)
	observe(ins.droppedSources, ds.Busy, busy)
	observe(ins.droppedSources, ds.Fallback, fallback)
	observe(ins.droppedShadow, ds.ShadowDenied)
}

// clamp returns v as an int64, at most math.MaxInt64.
func clamp(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// stateValue returns the breaker state attribute's value for s: closed,
// open or half_open.
func stateValue(s ratelease.BreakerState) string {
	return strings.ReplaceAll(string(s), "-", "_")
}
