package rateleaseotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/extra/rateleaseotel"
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

// allow makes n decisions of key under p with ctx, and fails on an error.
func allow(t *testing.T, ctx context.Context, l *ratelease.Limiter, p *ratelease.Policy, key string, n int) {
	t.Helper()
	for range n {
		if _, err := l.Allow(ctx, p, key); err != nil {
			t.Fatal(err)
		}
	}
}

// points are one instrument's data points: the value by attribute set,
// written "k=v,k=v" in key order.
type points map[string]int64

// collected is what one collection saw of each instrument, by name.
type collected struct {
	points map[string]points
	kind   map[string]string // "counter" (a cumulative monotonic sum) or "gauge"
	unit   map[string]string
}

// collect collects r's metrics of the package's scope.
func collect(t *testing.T, r sdkmetric.Reader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	c := collected{points: map[string]points{}, kind: map[string]string{}, unit: map[string]string{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != rateleaseotel.ScopeName {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			ps := points{}
			var dps []metricdata.DataPoint[int64]
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Fatalf("%s: a sum, not cumulative and monotonic: %+v", m.Name, d)
				}
				c.kind[m.Name], dps = "counter", d.DataPoints
			case metricdata.Gauge[int64]:
				c.kind[m.Name], dps = "gauge", d.DataPoints
			default:
				t.Fatalf("%s: data %T", m.Name, m.Data)
			}
			for _, dp := range dps {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.String())
				}
				ps[strings.Join(kv, ",")] = dp.Value
			}
			c.points[m.Name] = ps
			c.unit[m.Name] = m.Unit
		}
	}
	return c
}

// check fails unless c holds exactly want for each instrument in it.
func (c collected) check(t *testing.T, want map[string]points) {
	t.Helper()
	for name, w := range want {
		if got := c.points[name]; !maps.Equal(got, w) {
			t.Errorf("%s:\n got  %v\n want %v", name, got, w)
		}
	}
}

// Every instrument, with its exact points, after a known sequence of
// exact decisions: api (3 a minute) 3 allowed and 2 denied, login 1
// allowed, beta (1 a minute, in shadow mode) 1 allowed and 1 denied but
// admitted. After Close, the policies' counts are the dropped ones'.
func TestMetrics(t *testing.T) {
	l, _ := newLimiter(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := rateleaseotel.RegisterMetrics(l, rateleaseotel.WithMeterProvider(mp), rateleaseotel.WithLimiterName("edge"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	api := newPolicy(t, "api", ratelease.PerMinute(3))
	login := newPolicy(t, "login", ratelease.PerMinute(1))
	beta := newPolicy(t, "beta", ratelease.PerMinute(1)).Shadow()
	allow(t, ctx, l, api, "user:1", 5)
	allow(t, ctx, l, login, "user:1", 1)
	allow(t, ctx, l, beta, "user:1", 2)

	const e = "ratelease.limiter=edge"
	one := func(v int64) points { return points{e: v} }
	got := collect(t, reader)
	got.check(t, map[string]points{
		"ratelease.decisions": {e + ",ratelease.outcome=allowed": 5, e + ",ratelease.outcome=denied": 3},
		"ratelease.decisions.by_source": {e + ",ratelease.source=local": 0, e + ",ratelease.source=remote": 8,
			e + ",ratelease.source=busy": 0, e + ",ratelease.source=cached": 0, e + ",ratelease.source=fallback": 0},
		"ratelease.redis.round_trips":  one(8),
		"ratelease.redis.errors":       one(0),
		"ratelease.leases":             one(0),
		"ratelease.units.leased":       one(0),
		"ratelease.units.refunded":     one(0),
		"ratelease.units.expired":      one(0),
		"ratelease.units.used":         one(0),
		"ratelease.units.dropped":      one(0),
		"ratelease.units.held":         one(0),
		"ratelease.units.charged":      one(0),
		"ratelease.units.pooled":       one(0),
		"ratelease.global.round_trips": one(0),
		"ratelease.global.errors":      one(0),
		"ratelease.breaker.state": {"ratelease.breaker.state=closed," + e: 1, "ratelease.breaker.state=open," + e: 0,
			"ratelease.breaker.state=half_open," + e: 0},
		"ratelease.breaker.opens":    one(0),
		"ratelease.instances":        one(1),
		"ratelease.invalid_requests": one(0),
		"ratelease.keys":             one(0),
		"ratelease.policy.decisions": {
			e + ",ratelease.outcome=allowed,ratelease.policy=api": 3, e + ",ratelease.outcome=denied,ratelease.policy=api": 2,
			e + ",ratelease.outcome=allowed,ratelease.policy=login": 1, e + ",ratelease.outcome=denied,ratelease.policy=login": 0,
			e + ",ratelease.outcome=allowed,ratelease.policy=beta": 1, e + ",ratelease.outcome=denied,ratelease.policy=beta": 1,
		},
		"ratelease.policy.decisions.by_source": {
			e + ",ratelease.policy=api,ratelease.source=local": 0, e + ",ratelease.policy=api,ratelease.source=remote": 5,
			e + ",ratelease.policy=api,ratelease.source=busy": 0, e + ",ratelease.policy=api,ratelease.source=cached": 0, e + ",ratelease.policy=api,ratelease.source=fallback": 0,
			e + ",ratelease.policy=login,ratelease.source=local": 0, e + ",ratelease.policy=login,ratelease.source=remote": 1,
			e + ",ratelease.policy=login,ratelease.source=busy": 0, e + ",ratelease.policy=login,ratelease.source=cached": 0, e + ",ratelease.policy=login,ratelease.source=fallback": 0,
			e + ",ratelease.policy=beta,ratelease.source=local": 0, e + ",ratelease.policy=beta,ratelease.source=remote": 2,
			e + ",ratelease.policy=beta,ratelease.source=busy": 0, e + ",ratelease.policy=beta,ratelease.source=cached": 0, e + ",ratelease.policy=beta,ratelease.source=fallback": 0,
		},
		"ratelease.policy.shadow_denied": {e + ",ratelease.policy=api": 0, e + ",ratelease.policy=login": 0,
			e + ",ratelease.policy=beta": 1},
		"ratelease.policy.denied_by_limit": {
			"ratelease.limit=3 req/min (burst 3)," + e + ",ratelease.policy=api":   2,
			"ratelease.limit=1 req/min (burst 1)," + e + ",ratelease.policy=login": 0,
			"ratelease.limit=1 req/min (burst 1)," + e + ",ratelease.policy=beta":  1,
		},
		"ratelease.dropped_policy.decisions": {e + ",ratelease.outcome=allowed": 0, e + ",ratelease.outcome=denied": 0},
		"ratelease.dropped_policy.decisions.by_source": {e + ",ratelease.source=local": 0, e + ",ratelease.source=remote": 0,
			e + ",ratelease.source=busy": 0, e + ",ratelease.source=cached": 0, e + ",ratelease.source=fallback": 0},
		"ratelease.dropped_policy.shadow_denied": one(0),
	})
	if len(got.points) != 27 {
		t.Errorf("%d instruments, want 27: %v", len(got.points), slices.Sorted(maps.Keys(got.points)))
	}
	for name, kind := range got.kind {
		want := "counter"
		switch name {
		case "ratelease.breaker.state", "ratelease.instances", "ratelease.units.held", "ratelease.keys":
			want = "gauge"
		}
		if kind != want {
			t.Errorf("%s: a %s, want a %s", name, kind, want)
		}
	}
	if got.unit["ratelease.units.leased"] != "{unit}" || got.unit["ratelease.decisions"] != "{decision}" {
		t.Errorf("units %v", got.unit)
	}
	runtime.KeepAlive([]*ratelease.Policy{api, login, beta}) // a policy decided exactly is dropped once collected

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got = collect(t, reader)
	got.check(t, map[string]points{
		"ratelease.decisions":                {e + ",ratelease.outcome=allowed": 5, e + ",ratelease.outcome=denied": 3},
		"ratelease.dropped_policy.decisions": {e + ",ratelease.outcome=allowed": 5, e + ",ratelease.outcome=denied": 3},
		"ratelease.dropped_policy.decisions.by_source": {e + ",ratelease.source=local": 0, e + ",ratelease.source=remote": 8,
			e + ",ratelease.source=busy": 0, e + ",ratelease.source=cached": 0, e + ",ratelease.source=fallback": 0},
		"ratelease.dropped_policy.shadow_denied": one(1),
	})
	for _, name := range []string{"ratelease.policy.decisions", "ratelease.policy.decisions.by_source", "ratelease.policy.shadow_denied",
		"ratelease.policy.denied_by_limit"} {
		if len(got.points[name]) != 0 {
			t.Errorf("%s after Close: %v, want none", name, got.points[name])
		}
	}

	// Unregistered: nothing more is observed.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, reader); len(got.points["ratelease.decisions"]) != 0 {
		t.Fatalf("after Unregister: %v", got.points)
	}
}

// An outage: 5 failed calls open the breaker, and the failure mode decides.
func TestMetricsOutage(t *testing.T) {
	l, mr := newLimiter(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := rateleaseotel.RegisterMetrics(l, rateleaseotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	api := newPolicy(t, "api", ratelease.PerMinute(100))
	mr.SetError("ERR down")
	allow(t, context.Background(), l, api, "user:1", 6)
	collect(t, reader).check(t, map[string]points{
		"ratelease.breaker.state": {"ratelease.breaker.state=closed": 0, "ratelease.breaker.state=open": 1,
			"ratelease.breaker.state=half_open": 0},
		"ratelease.breaker.opens":     {"": 1},
		"ratelease.redis.errors":      {"": 5},
		"ratelease.redis.round_trips": {"": 5},
		"ratelease.decisions.by_source": {"ratelease.source=local": 0, "ratelease.source=remote": 0,
			"ratelease.source=busy": 0, "ratelease.source=cached": 0, "ratelease.source=fallback": 6},
		"ratelease.policy.decisions": {"ratelease.outcome=allowed,ratelease.policy=api": 6,
			"ratelease.outcome=denied,ratelease.policy=api": 0},
	})
	runtime.KeepAlive(api)
}

// In lease mode: one lease of 5 units serves 3 decisions; Close refunds
// the 2 left.
func TestMetricsLease(t *testing.T) {
	l, _ := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := rateleaseotel.RegisterMetrics(l, rateleaseotel.WithMeterProvider(mp), rateleaseotel.WithAttributes(attribute.String("region", "eu")))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	allow(t, context.Background(), l, newPolicy(t, "api", ratelease.PerHour(10)), "user:1", 3)
	const r = "region=eu"
	collect(t, reader).check(t, map[string]points{
		"ratelease.leases":            {r: 1},
		"ratelease.units.leased":      {r: 5},
		"ratelease.units.refunded":    {r: 0},
		"ratelease.redis.round_trips": {r: 1},
		"ratelease.decisions.by_source": {"ratelease.source=local," + r: 2, "ratelease.source=remote," + r: 1,
			"ratelease.source=busy," + r: 0, "ratelease.source=cached," + r: 0, "ratelease.source=fallback," + r: 0},
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	collect(t, reader).check(t, map[string]points{
		"ratelease.units.refunded":    {r: 2},
		"ratelease.units.expired":     {r: 0},
		"ratelease.units.used":        {r: 3},
		"ratelease.units.held":        {r: 0},
		"ratelease.redis.round_trips": {r: 2},
	})
}

// spanView is what a test checks of a span.
type spanView struct {
	name   string
	kind   trace.SpanKind
	attrs  map[string]string
	status codes.Code
	parent trace.SpanID
	events []string
}

func view(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{name: s.Name(), kind: s.SpanKind(), attrs: map[string]string{}, status: s.Status().Code, parent: s.Parent().SpanID()}
	for _, a := range s.Attributes() {
		v.attrs[string(a.Key)] = a.Value.String()
	}
	for _, e := range s.Events() {
		v.events = append(v.events, e.Name)
	}
	return v
}

func newTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder, ratelease.RedisHook) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	hook, err := rateleaseotel.NewRedisHook(rateleaseotel.WithTracerProvider(tp), rateleaseotel.WithLimiterName("edge"))
	if err != nil {
		t.Fatal(err)
	}
	return tp, sr, hook
}

// Each exact decision is a span, child of the request's, with its
// outcome; a failed one records its error; the operators' calls too.
func TestSpansExact(t *testing.T) {
	tp, sr, hook := newTracing(t)
	l, mr := newLimiter(t, ratelease.WithRedisHook(hook))
	p := newPolicy(t, "api", ratelease.PerMinute(2))
	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	allow(t, ctx, l, p, "user:1", 3)
	if err := l.Refund(ctx, p, "user:1", 1); err != nil {
		t.Fatal(err)
	}
	mr.SetError("ERR boom")
	allow(t, ctx, l, p, "user:1", 1) // the failure mode decides
	request.End()

	decide := func(outcome, granted string) spanView {
		return spanView{name: "ratelease.decide", kind: trace.SpanKindClient, parent: request.SpanContext().SpanID(),
			attrs: map[string]string{"db.system.name": "redis", "ratelease.redis.op": "decide", "ratelease.redis.keys": "1",
				"ratelease.limiter": "edge", "ratelease.redis.failed": "0", "ratelease.units.granted": granted,
				"ratelease.outcome": outcome}}
	}
	failed := decide("", "0")
	delete(failed.attrs, "ratelease.outcome")
	failed.attrs["ratelease.redis.failed"] = "1"
	failed.status, failed.events = codes.Error, []string{"exception"}
	want := []spanView{
		decide("allowed", "1"), decide("allowed", "1"), decide("denied", "0"),
		{name: "ratelease.refund", kind: trace.SpanKindClient, parent: request.SpanContext().SpanID(),
			attrs: map[string]string{"db.system.name": "redis", "ratelease.redis.op": "refund", "ratelease.redis.keys": "1",
				"ratelease.limiter": "edge", "ratelease.redis.failed": "0"}},
		failed,
	}
	var got []spanView
	for _, s := range sr.Ended() {
		if s.Name() != "request" {
			got = append(got, view(s))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d spans, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Errorf("span %d:\n got  %+v\n want %+v", i, got[i], want[i])
		}
	}
	last := sr.Ended()[len(sr.Ended())-2] // the failed decide, before the request
	if !strings.Contains(last.Status().Description, "boom") {
		t.Errorf("failed span's status: %+v", last.Status())
	}
}

// A lease is a root span (it is made in the background, for any number of
// requests) with the units it was granted; Close's refund is one too.
func TestSpansLease(t *testing.T) {
	_, sr, hook := newTracing(t)
	l, _ := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}), ratelease.WithRedisHook(hook))
	allow(t, context.Background(), l, newPolicy(t, "api", ratelease.PerHour(10)), "user:1", 3)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var got []spanView
	for _, s := range sr.Ended() {
		got = append(got, view(s))
	}
	attrs := func(op string) map[string]string {
		return map[string]string{"db.system.name": "redis", "ratelease.redis.op": op, "ratelease.redis.keys": "1",
			"ratelease.limiter": "edge", "ratelease.redis.failed": "0"}
	}
	lease := spanView{name: "ratelease.lease", kind: trace.SpanKindClient, attrs: attrs("lease")}
	lease.attrs["ratelease.units.granted"] = "5"
	want := []spanView{lease, {name: "ratelease.refund", kind: trace.SpanKindClient, attrs: attrs("refund")}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("spans:\n got  %+v\n want %+v", got, want)
	}
}

// Bad input is an error wrapping ErrInvalidOption.
func TestOptionErrors(t *testing.T) {
	l, _ := newLimiter(t)
	if _, err := rateleaseotel.RegisterMetrics(nil); !errors.Is(err, rateleaseotel.ErrInvalidOption) {
		t.Errorf("nil limiter: %v", err)
	}
	for name, opts := range map[string][]rateleaseotel.Option{
		"nil option":          {nil},
		"nil meter provider":  {rateleaseotel.WithMeterProvider(nil)},
		"nil tracer provider": {rateleaseotel.WithTracerProvider(nil)},
	} {
		if reg, err := rateleaseotel.RegisterMetrics(l, opts...); reg != nil || !errors.Is(err, rateleaseotel.ErrInvalidOption) {
			t.Errorf("RegisterMetrics, %s: %v, %v", name, reg, err)
		}
		if hook, err := rateleaseotel.NewRedisHook(opts...); hook != nil || !errors.Is(err, rateleaseotel.ErrInvalidOption) {
			t.Errorf("NewRedisHook, %s: %v", name, err)
		}
	}
}

// Calls refused for invalid input, keys held in lease mode, and a policy
// of 2/s and 3/min that denies by one limit, then by the other.
func TestMetricsInvalidKeysDeniedBy(t *testing.T) {
	clk := clock.NewManual(epoch)
	l, mr := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 1, Max: 1, TTL: time.Hour}), ratelease.WithClock(clk))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := rateleaseotel.RegisterMetrics(l, rateleaseotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	ctx := context.Background()
	p := newPolicy(t, "two", ratelease.PerSecond(2), ratelease.PerMinute(3))
	if _, err := l.Allow(ctx, p, ""); !errors.Is(err, ratelease.ErrInvalidKey) {
		t.Fatal(err)
	}
	if err := l.WaitN(ctx, p, "k", 0); !errors.Is(err, ratelease.ErrInvalidN) {
		t.Fatal(err)
	}
	allow(t, ctx, l, p, "k", 4) // 2 allowed, 2 denied by the second's
	mr.SetTime(epoch.Add(time.Second))
	clk.Set(epoch.Add(time.Second))
	allow(t, ctx, l, p, "k", 2)     // 1 allowed, 1 denied by the minute's
	allow(t, ctx, l, p, "other", 1) // a key used once keeps no entry: not among the keys
	collect(t, reader).check(t, map[string]points{
		"ratelease.invalid_requests": {"": 2},
		"ratelease.keys":             {"": 1},
		"ratelease.policy.denied_by_limit": {
			"ratelease.limit=2 req/s (burst 2),ratelease.policy=two":   2,
			"ratelease.limit=3 req/min (burst 3),ratelease.policy=two": 1,
		},
		"ratelease.policy.decisions": {"ratelease.outcome=allowed,ratelease.policy=two": 4,
			"ratelease.outcome=denied,ratelease.policy=two": 3},
	})
	runtime.KeepAlive(p)
}
