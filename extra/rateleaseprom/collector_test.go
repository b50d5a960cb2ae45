package rateleaseprom_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/extra/rateleaseprom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// epoch is aligned to the hour, so that every window starts at it.
var epoch = time.Unix(1_699_999_200, 0)

// newLimiter returns a Limiter on a fresh miniredis whose time stands
// still at epoch, as does the Limiter's clock, with opts after WithExact.
func newLimiter(t *testing.T, opts ...ratelease.Option) (*ratelease.Limiter, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(epoch)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l, err := ratelease.New(client, append([]ratelease.Option{ratelease.WithExact(),
		ratelease.WithClock(clock.NewManual(epoch)), ratelease.WithRedisTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, mr
}

func newPolicy(t *testing.T, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newCollector(t *testing.T, l *ratelease.Limiter, opts ...rateleaseprom.Option) *rateleaseprom.Collector {
	t.Helper()
	c, err := rateleaseprom.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// allow makes n decisions of key under p, and fails on an error.
func allow(t *testing.T, l *ratelease.Limiter, p *ratelease.Policy, key string, n int) {
	t.Helper()
	for range n {
		if _, err := l.Allow(context.Background(), p, key); err != nil {
			t.Fatal(err)
		}
	}
}

// lint fails on any problem promlint finds in c's metrics.
func lint(t *testing.T, c prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// exactExposition is every metric after exactSequence, with the label
// limiter="edge".
const exactExposition = `
# HELP ratelease_breaker_opens_total Times a circuit breaker opened.
# TYPE ratelease_breaker_opens_total counter
ratelease_breaker_opens_total{limiter="edge"} 0
# HELP ratelease_breaker_state 1 for the circuit breaker's current state (closed, open, half_open), 0 for the others; with a Redis Cluster, the worst of the masters' breakers.
# TYPE ratelease_breaker_state gauge
ratelease_breaker_state{limiter="edge",state="closed"} 1
ratelease_breaker_state{limiter="edge",state="half_open"} 0
ratelease_breaker_state{limiter="edge",state="open"} 0
# HELP ratelease_decisions_by_source_total Decisions of the limiter by source: local (a leased allowance), remote (one Redis call), cached (a denial repeated locally), fallback (the failure mode), busy (denied: Redis busy).
# TYPE ratelease_decisions_by_source_total counter
ratelease_decisions_by_source_total{limiter="edge",source="busy"} 0
ratelease_decisions_by_source_total{limiter="edge",source="cached"} 0
ratelease_decisions_by_source_total{limiter="edge",source="fallback"} 0
ratelease_decisions_by_source_total{limiter="edge",source="local"} 0
ratelease_decisions_by_source_total{limiter="edge",source="remote"} 8
# HELP ratelease_decisions_total Decisions of the limiter by outcome (allowed, denied), each attempt of a Wait included.
# TYPE ratelease_decisions_total counter
ratelease_decisions_total{limiter="edge",outcome="allowed"} 5
ratelease_decisions_total{limiter="edge",outcome="denied"} 3
# HELP ratelease_dropped_policy_decisions_by_source_total Decisions by source of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_decisions_by_source_total counter
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="busy"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="cached"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="fallback"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="local"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="remote"} 0
# HELP ratelease_dropped_policy_decisions_total Decisions by outcome of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_decisions_total counter
ratelease_dropped_policy_decisions_total{limiter="edge",outcome="allowed"} 0
ratelease_dropped_policy_decisions_total{limiter="edge",outcome="denied"} 0
# HELP ratelease_dropped_policy_shadow_denied_total Shadow-mode denials of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_shadow_denied_total counter
ratelease_dropped_policy_shadow_denied_total{limiter="edge"} 0
# HELP ratelease_global_errors_total Calls to the global Redis that failed.
# TYPE ratelease_global_errors_total counter
ratelease_global_errors_total{limiter="edge"} 0
# HELP ratelease_global_round_trips_total Round trips to the global Redis of worldwide policies (WithGlobal).
# TYPE ratelease_global_round_trips_total counter
ratelease_global_round_trips_total{limiter="edge"} 0
# HELP ratelease_instances The most instances that shared a key this instance leased in the last minute, as Redis counted them (1 in exact mode).
# TYPE ratelease_instances gauge
ratelease_instances{limiter="edge"} 1
# HELP ratelease_invalid_requests_total Calls refused for invalid input (invalid policy, key or n, or n above the policy's capacity); they are not decisions.
# TYPE ratelease_invalid_requests_total counter
ratelease_invalid_requests_total{limiter="edge"} 0
# HELP ratelease_keys Keys held in the limiter's local key store now, with their leased units or cached denials (0 in exact mode).
# TYPE ratelease_keys gauge
ratelease_keys{limiter="edge"} 0
# HELP ratelease_leases_total Leases that Redis answered.
# TYPE ratelease_leases_total counter
ratelease_leases_total{limiter="edge"} 0
# HELP ratelease_policy_decisions_by_source_total Decisions by policy and source (local, remote, cached, fallback, busy), for the policies the limiter holds.
# TYPE ratelease_policy_decisions_by_source_total counter
ratelease_policy_decisions_by_source_total{limiter="edge",policy="api",source="busy"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="api",source="cached"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="api",source="fallback"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="api",source="local"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="api",source="remote"} 5
ratelease_policy_decisions_by_source_total{limiter="edge",policy="beta",source="busy"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="beta",source="cached"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="beta",source="fallback"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="beta",source="local"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="beta",source="remote"} 2
ratelease_policy_decisions_by_source_total{limiter="edge",policy="login",source="busy"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="login",source="cached"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="login",source="fallback"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="login",source="local"} 0
ratelease_policy_decisions_by_source_total{limiter="edge",policy="login",source="remote"} 1
# HELP ratelease_policy_decisions_total Decisions by policy and outcome (allowed, denied), for the policies the limiter holds.
# TYPE ratelease_policy_decisions_total counter
ratelease_policy_decisions_total{limiter="edge",outcome="allowed",policy="api"} 3
ratelease_policy_decisions_total{limiter="edge",outcome="allowed",policy="beta"} 1
ratelease_policy_decisions_total{limiter="edge",outcome="allowed",policy="login"} 1
ratelease_policy_decisions_total{limiter="edge",outcome="denied",policy="api"} 2
ratelease_policy_decisions_total{limiter="edge",outcome="denied",policy="beta"} 1
ratelease_policy_decisions_total{limiter="edge",outcome="denied",policy="login"} 0
# HELP ratelease_policy_denied_by_limit_total Denials by policy and the limit that decided them (as Limit.String writes it), by Redis or repeated locally, for the policies the limiter holds; a blocked key's denials and the failure mode's are in no limit's.
# TYPE ratelease_policy_denied_by_limit_total counter
ratelease_policy_denied_by_limit_total{limit="3 req/min (burst 3)",limiter="edge",policy="api"} 2
ratelease_policy_denied_by_limit_total{limit="1 req/min (burst 1)",limiter="edge",policy="beta"} 1
ratelease_policy_denied_by_limit_total{limit="1 req/min (burst 1)",limiter="edge",policy="login"} 0
# HELP ratelease_policy_shadow_denied_total Would-be denials admitted because the policy is in shadow mode (counted in the denied outcome as well).
# TYPE ratelease_policy_shadow_denied_total counter
ratelease_policy_shadow_denied_total{limiter="edge",policy="api"} 0
ratelease_policy_shadow_denied_total{limiter="edge",policy="beta"} 1
ratelease_policy_shadow_denied_total{limiter="edge",policy="login"} 0
# HELP ratelease_redis_errors_total Redis calls that failed.
# TYPE ratelease_redis_errors_total counter
ratelease_redis_errors_total{limiter="edge"} 0
# HELP ratelease_redis_round_trips_total Redis round trips (a pipeline of leases and refunds counts one).
# TYPE ratelease_redis_round_trips_total counter
ratelease_redis_round_trips_total{limiter="edge"} 8
# HELP ratelease_units_charged_total Units admitted during Redis outages (FailLocal, FailOpen) and charged to Redis once it was back.
# TYPE ratelease_units_charged_total counter
ratelease_units_charged_total{limiter="edge"} 0
# HELP ratelease_units_dropped_total Leased units neither used nor given back (lapsed past a refund's worth, forgotten by a reset, or in a refund Redis did not take).
# TYPE ratelease_units_dropped_total counter
ratelease_units_dropped_total{limiter="edge"} 0
# HELP ratelease_units_expired_total Leased units that lapsed unused (refunded, or dropped when a refund could no longer change anything).
# TYPE ratelease_units_expired_total counter
ratelease_units_expired_total{limiter="edge"} 0
# HELP ratelease_units_held Leased units held now: in allowances, set aside, or on their way back. units_leased_total = units_used_total + units_refunded_total + units_dropped_total + units_held, with no lease in flight.
# TYPE ratelease_units_held gauge
ratelease_units_held{limiter="edge"} 0
# HELP ratelease_units_leased_total Units that leases were granted.
# TYPE ratelease_units_leased_total counter
ratelease_units_leased_total{limiter="edge"} 0
# HELP ratelease_units_pooled_total Units this instance's refills put in its region's pools of worldwide policies.
# TYPE ratelease_units_pooled_total counter
ratelease_units_pooled_total{limiter="edge"} 0
# HELP ratelease_units_refunded_total Leased units given back to Redis (on expiry, eviction and close).
# TYPE ratelease_units_refunded_total counter
ratelease_units_refunded_total{limiter="edge"} 0
# HELP ratelease_units_used_total Leased units that admitted requests took.
# TYPE ratelease_units_used_total counter
ratelease_units_used_total{limiter="edge"} 0
`

// exactSequence makes 8 decisions in exact mode: api (3 a minute) 3
// allowed and 2 denied, login 1 allowed, beta (1 a minute, in shadow
// mode) 1 allowed and 1 denied but admitted. It returns the policies.
func exactSequence(t *testing.T, l *ratelease.Limiter) []*ratelease.Policy {
	api := newPolicy(t, "api", ratelease.PerMinute(3))
	login := newPolicy(t, "login", ratelease.PerMinute(1))
	beta := newPolicy(t, "beta", ratelease.PerMinute(1)).Shadow()
	allow(t, l, api, "user:1", 5)
	allow(t, l, login, "user:1", 1)
	allow(t, l, beta, "user:1", 2)
	return []*ratelease.Policy{api, login, beta}
}

// Every metric, with its exact value, after a known sequence of exact
// decisions; the metrics pass promlint.
func TestCollectExact(t *testing.T) {
	l, _ := newLimiter(t)
	c := newCollector(t, l, rateleaseprom.WithLimiterName("edge"))
	ps := exactSequence(t, l)
	if err := testutil.CollectAndCompare(c, strings.NewReader(exactExposition)); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
	// 27 metrics, 20 of them one series each and 7 labelled: 2 outcomes,
	// 5 sources, 3 states; per policy 2 + 5 + 1 series, and one for each
	// of its limits.
	if n := testutil.CollectAndCount(c); n != 2+5+17+3+3*(2+5+1+1)+2+5+1 {
		t.Fatalf("%d series", n)
	}
	// A policy decided exactly is dropped once the program no longer
	// refers to it: these are held until here.
	runtime.KeepAlive(ps)

	// Close drops every policy: their counts move to the dropped series,
	// and the policies' series go.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	const dropped = `
# HELP ratelease_dropped_policy_decisions_by_source_total Decisions by source of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_decisions_by_source_total counter
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="busy"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="cached"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="fallback"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="local"} 0
ratelease_dropped_policy_decisions_by_source_total{limiter="edge",source="remote"} 8
# HELP ratelease_dropped_policy_decisions_total Decisions by outcome of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_decisions_total counter
ratelease_dropped_policy_decisions_total{limiter="edge",outcome="allowed"} 5
ratelease_dropped_policy_decisions_total{limiter="edge",outcome="denied"} 3
# HELP ratelease_dropped_policy_shadow_denied_total Shadow-mode denials of the policies the limiter no longer holds.
# TYPE ratelease_dropped_policy_shadow_denied_total counter
ratelease_dropped_policy_shadow_denied_total{limiter="edge"} 1
# HELP ratelease_decisions_total Decisions of the limiter by outcome (allowed, denied), each attempt of a Wait included.
# TYPE ratelease_decisions_total counter
ratelease_decisions_total{limiter="edge",outcome="allowed"} 5
ratelease_decisions_total{limiter="edge",outcome="denied"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(dropped),
		"ratelease_dropped_policy_decisions_by_source_total", "ratelease_dropped_policy_decisions_total",
		"ratelease_dropped_policy_shadow_denied_total", "ratelease_decisions_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "ratelease_policy_decisions_total", "ratelease_policy_decisions_by_source_total",
		"ratelease_policy_shadow_denied_total", "ratelease_policy_denied_by_limit_total"); n != 0 {
		t.Fatalf("%d policy series after Close, want 0", n)
	}
}

// A Redis that fails: 5 failed calls open the breaker, and every decision
// comes from the failure mode.
func TestCollectOutage(t *testing.T) {
	l, mr := newLimiter(t)
	c := newCollector(t, l)
	api := newPolicy(t, "api", ratelease.PerMinute(100))
	mr.SetError("ERR down")
	allow(t, l, api, "user:1", 6)
	const want = `
# HELP ratelease_breaker_opens_total Times a circuit breaker opened.
# TYPE ratelease_breaker_opens_total counter
ratelease_breaker_opens_total 1
# HELP ratelease_breaker_state 1 for the circuit breaker's current state (closed, open, half_open), 0 for the others; with a Redis Cluster, the worst of the masters' breakers.
# TYPE ratelease_breaker_state gauge
ratelease_breaker_state{state="closed"} 0
ratelease_breaker_state{state="half_open"} 0
ratelease_breaker_state{state="open"} 1
# HELP ratelease_decisions_by_source_total Decisions of the limiter by source: local (a leased allowance), remote (one Redis call), cached (a denial repeated locally), fallback (the failure mode), busy (denied: Redis busy).
# TYPE ratelease_decisions_by_source_total counter
ratelease_decisions_by_source_total{source="busy"} 0
ratelease_decisions_by_source_total{source="cached"} 0
ratelease_decisions_by_source_total{source="fallback"} 6
ratelease_decisions_by_source_total{source="local"} 0
ratelease_decisions_by_source_total{source="remote"} 0
# HELP ratelease_redis_errors_total Redis calls that failed.
# TYPE ratelease_redis_errors_total counter
ratelease_redis_errors_total 5
# HELP ratelease_redis_round_trips_total Redis round trips (a pipeline of leases and refunds counts one).
# TYPE ratelease_redis_round_trips_total counter
ratelease_redis_round_trips_total 5
# HELP ratelease_policy_decisions_by_source_total Decisions by policy and source (local, remote, cached, fallback, busy), for the policies the limiter holds.
# TYPE ratelease_policy_decisions_by_source_total counter
ratelease_policy_decisions_by_source_total{policy="api",source="busy"} 0
ratelease_policy_decisions_by_source_total{policy="api",source="cached"} 0
ratelease_policy_decisions_by_source_total{policy="api",source="fallback"} 6
ratelease_policy_decisions_by_source_total{policy="api",source="local"} 0
ratelease_policy_decisions_by_source_total{policy="api",source="remote"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelease_breaker_opens_total", "ratelease_breaker_state",
		"ratelease_decisions_by_source_total", "ratelease_redis_errors_total", "ratelease_redis_round_trips_total",
		"ratelease_policy_decisions_by_source_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
	runtime.KeepAlive(api) // its series are there while it is
}

// In lease mode: a lease of 5 units serves 3 decisions (1 remote, 2
// leased hits); Close refunds the 2 units left, and they count as refunded,
// not expired (they had not lapsed).
func TestCollectLease(t *testing.T) {
	l, _ := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}))
	c := newCollector(t, l)
	api := newPolicy(t, "api", ratelease.PerHour(10))
	allow(t, l, api, "user:1", 3)
	names := []string{"ratelease_leases_total", "ratelease_units_leased_total", "ratelease_units_refunded_total",
		"ratelease_units_expired_total", "ratelease_redis_round_trips_total", "ratelease_decisions_by_source_total",
		"ratelease_units_used_total", "ratelease_units_dropped_total", "ratelease_units_held"}
	const head = `
# HELP ratelease_decisions_by_source_total Decisions of the limiter by source: local (a leased allowance), remote (one Redis call), cached (a denial repeated locally), fallback (the failure mode), busy (denied: Redis busy).
# TYPE ratelease_decisions_by_source_total counter
ratelease_decisions_by_source_total{source="busy"} 0
ratelease_decisions_by_source_total{source="cached"} 0
ratelease_decisions_by_source_total{source="fallback"} 0
ratelease_decisions_by_source_total{source="local"} 2
ratelease_decisions_by_source_total{source="remote"} 1
# HELP ratelease_leases_total Leases that Redis answered.
# TYPE ratelease_leases_total counter
ratelease_leases_total 1
# HELP ratelease_units_leased_total Units that leases were granted.
# TYPE ratelease_units_leased_total counter
ratelease_units_leased_total 5
# HELP ratelease_units_expired_total Leased units that lapsed unused (refunded, or dropped when a refund could no longer change anything).
# TYPE ratelease_units_expired_total counter
ratelease_units_expired_total 0
# HELP ratelease_units_dropped_total Leased units neither used nor given back (lapsed past a refund's worth, forgotten by a reset, or in a refund Redis did not take).
# TYPE ratelease_units_dropped_total counter
ratelease_units_dropped_total 0
# HELP ratelease_units_used_total Leased units that admitted requests took.
# TYPE ratelease_units_used_total counter
ratelease_units_used_total 3
`
	before := head + `# HELP ratelease_units_held Leased units held now: in allowances, set aside, or on their way back. units_leased_total = units_used_total + units_refunded_total + units_dropped_total + units_held, with no lease in flight.
# TYPE ratelease_units_held gauge
ratelease_units_held 2
# HELP ratelease_redis_round_trips_total Redis round trips (a pipeline of leases and refunds counts one).
# TYPE ratelease_redis_round_trips_total counter
ratelease_redis_round_trips_total 1
# HELP ratelease_units_refunded_total Leased units given back to Redis (on expiry, eviction and close).
# TYPE ratelease_units_refunded_total counter
ratelease_units_refunded_total 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(before), names...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	after := head + `# HELP ratelease_redis_round_trips_total Redis round trips (a pipeline of leases and refunds counts one).
# TYPE ratelease_redis_round_trips_total counter
ratelease_redis_round_trips_total 2
# HELP ratelease_units_refunded_total Leased units given back to Redis (on expiry, eviction and close).
# TYPE ratelease_units_refunded_total counter
ratelease_units_refunded_total 2
# HELP ratelease_units_held Leased units held now: in allowances, set aside, or on their way back. units_leased_total = units_used_total + units_refunded_total + units_dropped_total + units_held, with no lease in flight.
# TYPE ratelease_units_held gauge
ratelease_units_held 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(after), names...); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
}

// Several Limiters share a registry when each collector has a name of its
// own; two without names collide.
func TestSeveralLimiters(t *testing.T) {
	a, _ := newLimiter(t)
	b, _ := newLimiter(t)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newCollector(t, a, rateleaseprom.WithLimiterName("a"))); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(newCollector(t, b, rateleaseprom.WithLimiterName("b"))); err != nil {
		t.Fatal(err)
	}
	allow(t, a, newPolicy(t, "api", ratelease.PerMinute(3)), "k", 2)
	const want = `
# HELP ratelease_decisions_total Decisions of the limiter by outcome (allowed, denied), each attempt of a Wait included.
# TYPE ratelease_decisions_total counter
ratelease_decisions_total{limiter="a",outcome="allowed"} 2
ratelease_decisions_total{limiter="a",outcome="denied"} 0
ratelease_decisions_total{limiter="b",outcome="allowed"} 0
ratelease_decisions_total{limiter="b",outcome="denied"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelease_decisions_total"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v, %v", problems, err)
	}

	other := prometheus.NewRegistry()
	if err := other.Register(newCollector(t, a)); err != nil {
		t.Fatal(err)
	}
	var dup prometheus.AlreadyRegisteredError
	if err := other.Register(newCollector(t, b)); !errors.As(err, &dup) {
		t.Fatalf("a second unnamed collector: %v, want AlreadyRegisteredError", err)
	}
}

// Bad input is an error wrapping ErrInvalidOption, never a panic.
func TestNewErrors(t *testing.T) {
	l, _ := newLimiter(t)
	for name, f := range map[string]func() (*rateleaseprom.Collector, error){
		"nil limiter": func() (*rateleaseprom.Collector, error) { return rateleaseprom.New(nil) },
		"nil option":  func() (*rateleaseprom.Collector, error) { return rateleaseprom.New(l, nil) },
		"a metric's own label": func() (*rateleaseprom.Collector, error) {
			return rateleaseprom.New(l, rateleaseprom.WithConstLabels(prometheus.Labels{"policy": "x"}))
		},
		"reserved label name": func() (*rateleaseprom.Collector, error) {
			return rateleaseprom.New(l, rateleaseprom.WithConstLabels(prometheus.Labels{"__name__": "x"}))
		},
		"invalid label value": func() (*rateleaseprom.Collector, error) {
			return rateleaseprom.New(l, rateleaseprom.WithLimiterName("a\xff"))
		},
	} {
		if c, err := f(); c != nil || !errors.Is(err, rateleaseprom.ErrInvalidOption) {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, c, err)
		}
	}
	c := newCollector(t, l, rateleaseprom.WithConstLabels(prometheus.Labels{"region": "eu", "zone": "a"}),
		rateleaseprom.WithLimiterName("edge"))
	const want = `
# HELP ratelease_instances The most instances that shared a key this instance leased in the last minute, as Redis counted them (1 in exact mode).
# TYPE ratelease_instances gauge
ratelease_instances{limiter="edge",region="eu",zone="a"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelease_instances"); err != nil {
		t.Fatal(err)
	}
}

// A policy name that is not valid UTF-8 is reported with its bytes
// escaped; the scrape does not fail.
func TestInvalidUTF8PolicyName(t *testing.T) {
	l, _ := newLimiter(t)
	c := newCollector(t, l)
	p := newPolicy(t, "bad\xffname", ratelease.PerMinute(3))
	allow(t, l, p, "k", 1)
	const want = `
# HELP ratelease_policy_shadow_denied_total Would-be denials admitted because the policy is in shadow mode (counted in the denied outcome as well).
# TYPE ratelease_policy_shadow_denied_total counter
ratelease_policy_shadow_denied_total{policy="bad\\xffname"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelease_policy_shadow_denied_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
	runtime.KeepAlive(p) // its series are there while it is
}
