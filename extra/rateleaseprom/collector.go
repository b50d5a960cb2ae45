package rateleaseprom

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelease/ratelease"
)

// ErrInvalidOption is wrapped by New's errors: a nil Limiter, labels that
// Prometheus would refuse, or the report of TimeRedisCalls that another
// Collector has.
var ErrInvalidOption = errors.New("rateleaseprom: invalid option")

// LimiterLabel is the name of the constant label that WithLimiterName
// sets.
const LimiterLabel = "limiter"

// Collector is a prometheus.Collector of one Limiter's Stats: it reads
// Stats once per scrape and reports every counter in it (see the package
// doc for the metrics). Make it with New and register it with a
// prometheus.Registerer. It is safe for concurrent use.
type Collector struct {
	stats func() ratelease.Stats
	d     descs
	// redis is the histogram of TimeRedisCalls, with the constant labels;
	// nil without it.
	redis prometheus.Collector
}

var _ prometheus.Collector = (*Collector)(nil)

// descs are the descriptions of every metric a Collector reports.
type descs struct {
	decisions, bySource                 *prometheus.Desc
	roundTrips, errors                  *prometheus.Desc
	leases, leased, refunded, expired   *prometheus.Desc
	used, dropped, held                 *prometheus.Desc
	charged, breakerState, breakerOpens *prometheus.Desc
	globalTrips, globalErrors, pooled   *prometheus.Desc
	instances, invalid, keys            *prometheus.Desc
	policyDecisions, policySources      *prometheus.Desc
	policyShadow, policyDeniedBy        *prometheus.Desc
	droppedDecisions, droppedSources    *prometheus.Desc
	droppedShadow                       *prometheus.Desc
}

// each calls f with every description.
func (d *descs) each(f func(*prometheus.Desc)) {
	for _, desc := range []*prometheus.Desc{
		d.decisions, d.bySource, d.roundTrips, d.errors, d.leases, d.leased, d.refunded, d.expired,
		d.used, d.dropped, d.held, d.charged, d.breakerState, d.breakerOpens, d.instances, d.invalid, d.keys,
		d.globalTrips, d.globalErrors, d.pooled,
		d.policyDecisions, d.policySources, d.policyShadow, d.policyDeniedBy,
		d.droppedDecisions, d.droppedSources, d.droppedShadow,
	} {
		f(desc)
	}
}

// Option configures a Collector in New.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	labels prometheus.Labels
	redis  *redisTimes // TimeRedisCalls's report
}

// WithLimiterName adds the constant label limiter="name" (LimiterLabel)
// to every metric, so that the collectors of several Limiters can be
// registered with one registry: each needs a name of its own.
func WithLimiterName(name string) Option {
	return optionFunc(func(c *config) { c.labels[LimiterLabel] = name })
}

// WithConstLabels adds constant labels to every metric. They must be valid
// Prometheus label names and values, and none of the metrics' own labels
// (policy, outcome, source, state, limit, op).
func WithConstLabels(labels prometheus.Labels) Option {
	return optionFunc(func(c *config) {
		for k, v := range labels {
			c.labels[k] = v
		}
	})
}

// New returns a Collector of l's Stats, and of its Redis call times when
// given the report of TimeRedisCalls (whose timing l was made with). A nil
// l or a nil option, labels that Prometheus would refuse (see
// WithConstLabels), or a report another Collector has, is an error
// wrapping ErrInvalidOption.
func New(l *ratelease.Limiter, opts ...Option) (*Collector, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter", ErrInvalidOption)
	}
	cfg := config{labels: prometheus.Labels{}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		o.apply(&cfg)
	}
	c := &Collector{stats: l.Stats, d: newDescs(cfg.labels)}
	if cfg.redis != nil {
		c.redis = prometheus.WrapCollectorWith(cfg.labels, cfg.redis.vec)
	}
	// A registry checks every description (names, labels, values): a
	// Collector that one refuses is refused here, not at the first scrape.
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if cfg.redis != nil && !cfg.redis.taken.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: the Redis call times of TimeRedisCalls are reported by another Collector: "+
			"call TimeRedisCalls once for each Limiter", ErrInvalidOption)
	}
	return c, nil
}

// newDescs returns the descriptions, each with the constant labels.
func newDescs(labels prometheus.Labels) descs {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("ratelease_"+name, help, variable, labels)
	}
	return descs{
		decisions: desc("decisions_total",
			"Decisions of the limiter by outcome (allowed, denied), each attempt of a Wait included.", "outcome"),
		bySource: desc("decisions_by_source_total",
			"Decisions of the limiter by source: local (a leased allowance), remote (one Redis call), cached (a denial repeated locally), fallback (the failure mode), busy (denied: Redis busy).", "source"),
		roundTrips: desc("redis_round_trips_total",
			"Redis round trips (a pipeline of leases and refunds counts one)."),
		errors: desc("redis_errors_total",
			"Redis calls that failed."),
		leases: desc("leases_total",
			"Leases that Redis answered."),
		leased: desc("units_leased_total",
			"Units that leases were granted."),
		refunded: desc("units_refunded_total",
			"Leased units given back to Redis (on expiry, eviction and close)."),
		expired: desc("units_expired_total",
			"Leased units that lapsed unused (refunded, or dropped when a refund could no longer change anything)."),
		used: desc("units_used_total",
			"Leased units that admitted requests took."),
		dropped: desc("units_dropped_total",
			"Leased units neither used nor given back (lapsed past a refund's worth, forgotten by a reset, or in a refund Redis did not take)."),
		held: desc("units_held",
			"Leased units held now: in allowances, set aside, or on their way back. units_leased_total = units_used_total + units_refunded_total + units_dropped_total + units_held, with no lease in flight."),
		charged: desc("units_charged_total",
			"Units admitted during Redis outages (FailLocal, FailOpen) and charged to Redis once it was back."),
		globalTrips: desc("global_round_trips_total",
			"Round trips to the global Redis of worldwide policies (WithGlobal)."),
		globalErrors: desc("global_errors_total",
			"Calls to the global Redis that failed."),
		pooled: desc("units_pooled_total",
			"Units this instance's refills put in its region's pools of worldwide policies."),
		breakerState: desc("breaker_state",
			"1 for the circuit breaker's current state (closed, open, half_open), 0 for the others; with a Redis Cluster, the worst of the masters' breakers.", "state"),
		breakerOpens: desc("breaker_opens_total",
			"Times a circuit breaker opened."),
		instances: desc("instances",
			"The most instances that shared a key this instance leased in the last minute, as Redis counted them (1 in exact mode)."),
		invalid: desc("invalid_requests_total",
			"Calls refused for invalid input (invalid policy, key or n, or n above the policy's capacity); they are not decisions."),
		keys: desc("keys",
			"Keys held in the limiter's local key store now, with their leased units or cached denials (0 in exact mode)."),
		policyDecisions: desc("policy_decisions_total",
			"Decisions by policy and outcome (allowed, denied), for the policies the limiter holds.", "policy", "outcome"),
		policySources: desc("policy_decisions_by_source_total",
			"Decisions by policy and source (local, remote, cached, fallback, busy), for the policies the limiter holds.", "policy", "source"),
		policyShadow: desc("policy_shadow_denied_total",
			"Would-be denials admitted because the policy is in shadow mode (counted in the denied outcome as well).", "policy"),
		policyDeniedBy: desc("policy_denied_by_limit_total",
			"Denials by policy and the limit that decided them (as Limit.String writes it), by Redis or repeated locally, for the policies the limiter holds; a blocked key's denials and the failure mode's are in no limit's.", "policy", "limit"),
		droppedDecisions: desc("dropped_policy_decisions_total",
			"Decisions by outcome of the policies the limiter no longer holds.", "outcome"),
		droppedSources: desc("dropped_policy_decisions_by_source_total",
			"Decisions by source of the policies the limiter no longer holds.", "source"),
		droppedShadow: desc("dropped_policy_shadow_denied_total",
			"Shadow-mode denials of the policies the limiter no longer holds."),
	}
}

// Describe sends the description of every metric the Collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.d.each(func(d *prometheus.Desc) { ch <- d })
	if c.redis != nil {
		c.redis.Describe(ch)
	}
}

// Collect reads the Limiter's Stats once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.redis != nil {
		c.redis.Collect(ch)
	}
	s := c.stats()
	d := &c.d
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- constMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- constMetric(desc, prometheus.GaugeValue, v, labels...)
	}

	counter(d.decisions, s.Allowed, "allowed")
	counter(d.decisions, s.Denied, "denied")
	counter(d.bySource, s.Local, "local")
	counter(d.bySource, s.Remote, "remote")
	counter(d.bySource, s.Cached, "cached")
	counter(d.bySource, s.Busy, "busy")
	counter(d.bySource, s.Fallback, "fallback")
	counter(d.roundTrips, s.RoundTrips)
	counter(d.errors, s.Errors)
	counter(d.leases, s.Leases)
	counter(d.leased, s.UnitsLeased)
	counter(d.refunded, s.UnitsRefunded)
	counter(d.expired, s.UnitsExpired)
	counter(d.used, s.UnitsUsed)
	counter(d.dropped, s.UnitsDropped)
	gauge(d.held, float64(s.UnitsHeld))
	counter(d.charged, s.UnitsCharged)
	counter(d.globalTrips, s.GlobalRoundTrips)
	counter(d.globalErrors, s.GlobalErrors)
	counter(d.pooled, s.UnitsPooled)
	for _, st := range []ratelease.BreakerState{ratelease.BreakerClosed, ratelease.BreakerOpen, ratelease.BreakerHalfOpen} {
		v := 0.0
		if s.Breaker == st {
			v = 1
		}
		gauge(d.breakerState, v, stateLabel(st))
	}
	counter(d.breakerOpens, s.BreakerOpens)
	gauge(d.instances, float64(s.Instances))
	counter(d.invalid, s.Invalid)
	gauge(d.keys, float64(s.Keys))

	for name, ps := range policies(s.Policies) {
		counter(d.policyDecisions, ps.Allowed, name, "allowed")
		counter(d.policyDecisions, ps.Denied, name, "denied")
		counter(d.policySources, ps.Local, name, "local")
		counter(d.policySources, ps.Remote, name, "remote")
		counter(d.policySources, ps.Cached, name, "cached")
		counter(d.policySources, ps.Busy, name, "busy")
		counter(d.policySources, ps.Fallback, name, "fallback")
		counter(d.policyShadow, ps.ShadowDenied, name)
	}
	for name, by := range deniedBy(s.DeniedBy) {
		for limit, n := range by {
			counter(d.policyDeniedBy, n, name, limit)
		}
	}
	ds := s.DroppedPolicies
	counter(d.droppedDecisions, ds.Allowed, "allowed")
	counter(d.droppedDecisions, ds.Denied, "denied")
	counter(d.droppedSources, ds.Local, "local")
	counter(d.droppedSources, ds.Remote, "remote")
	counter(d.droppedSources, ds.Cached, "cached")
	counter(d.droppedSources, ds.Busy, "busy")
	counter(d.droppedSources, ds.Fallback, "fallback")
	counter(d.droppedShadow, ds.ShadowDenied)
}

// constMetric returns a constant metric, or an invalid one (which the
// registry reports as a scrape error) if the labels do not fit desc; the
// Collector never panics.
func constMetric(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// stateLabel returns the state label's value for s: closed, open or
// half_open.
func stateLabel(s ratelease.BreakerState) string {
	return strings.ReplaceAll(string(s), "-", "_")
}

// policies returns m with its names made valid label values (labeled).
func policies(m map[string]ratelease.PolicyStats) map[string]ratelease.PolicyStats {
	return labeled(m, func(sum *ratelease.PolicyStats, ps ratelease.PolicyStats) {
		sum.Allowed += ps.Allowed
		sum.Denied += ps.Denied
		sum.Local += ps.Local
		sum.Remote += ps.Remote
		sum.Cached += ps.Cached
		sum.Fallback += ps.Fallback
		sum.Busy += ps.Busy
		sum.ShadowDenied += ps.ShadowDenied
	})
}

// deniedBy returns m (Stats.DeniedBy) with its policy names made valid
// label values (labeled), summed limit by limit.
func deniedBy(m map[string]map[string]uint64) map[string]map[string]uint64 {
	return labeled(m, func(sum *map[string]uint64, by map[string]uint64) {
		if *sum == nil {
			*sum = make(map[string]uint64, len(by))
		}
		for limit, n := range by {
			(*sum)[limit] += n
		}
	})
}

// labeled returns m, keyed by policy name, with its names made valid label
// values: a name that is not valid UTF-8 (NewPolicy allows any bytes but
// ':', braces and whitespace) has its invalid bytes escaped as \xNN, and
// the values of names that then meet are added up by add. m itself is
// returned when every name is valid.
func labeled[V any](m map[string]V, add func(sum *V, v V)) map[string]V {
	valid := true
	for name := range m {
		if !utf8.ValidString(name) {
			valid = false
			break
		}
	}
	if valid {
		return m
	}
	out := make(map[string]V, len(m))
	for name, v := range m {
		label := escape(name)
		sum := out[label]
		add(&sum, v)
		out[label] = sum
	}
	return out
}

// escape returns s with every byte that is not part of valid UTF-8
// written as \xNN.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
