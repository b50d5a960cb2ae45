package rateleaseprom_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/extra/rateleaseprom"
)

// A policy of 2/s and 3/min denies by one limit, then by the other: each
// limit's denials are a series of its own, labelled as Limit.String
// writes it; a blocked key's denial is in the policy's denials, in no
// limit's.
func TestCollectDeniedByLimit(t *testing.T) {
	clk := clock.NewManual(epoch)
	l, mr := newLimiter(t, ratelease.WithClock(clk))
	c := newCollector(t, l)
	ctx := context.Background()
	p := newPolicy(t, "two", ratelease.PerSecond(2), ratelease.PerMinute(3))
	allow(t, l, p, "k", 4) // 2 allowed, 2 denied by the second's
	mr.SetTime(epoch.Add(time.Second))
	clk.Set(epoch.Add(time.Second))
	allow(t, l, p, "k", 2) // 1 allowed, 1 denied by the minute's
	if err := l.Block(ctx, p, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	allow(t, l, p, "k", 1) // denied: blocked
	const want = `
# HELP ratelease_policy_denied_by_limit_total Denials by policy and the limit that decided them (as Limit.String writes it), by Redis or repeated locally, for the policies the limiter holds; a blocked key's denials and the failure mode's are in no limit's.
# TYPE ratelease_policy_denied_by_limit_total counter
ratelease_policy_denied_by_limit_total{limit="2 req/s (burst 2)",policy="two"} 2
ratelease_policy_denied_by_limit_total{limit="3 req/min (burst 3)",policy="two"} 1
# HELP ratelease_policy_decisions_total Decisions by policy and outcome (allowed, denied), for the policies the limiter holds.
# TYPE ratelease_policy_decisions_total counter
ratelease_policy_decisions_total{outcome="allowed",policy="two"} 3
ratelease_policy_decisions_total{outcome="denied",policy="two"} 4
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ratelease_policy_denied_by_limit_total", "ratelease_policy_decisions_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
	runtime.KeepAlive(p)
}

// Calls refused for invalid input count, each once; a valid call does not.
func TestCollectInvalid(t *testing.T) {
	l, _ := newLimiter(t)
	c := newCollector(t, l)
	ctx := context.Background()
	p := newPolicy(t, "api", ratelease.PerMinute(3))
	if _, err := l.Allow(ctx, p, ""); !errors.Is(err, ratelease.ErrInvalidKey) {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, p, "k", 4); !errors.Is(err, ratelease.ErrExceedsCapacity) {
		t.Fatal(err)
	}
	if err := l.Refund(ctx, nil, "k", 1); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Fatal(err)
	}
	allow(t, l, p, "k", 1)
	const want = `
# HELP ratelease_invalid_requests_total Calls refused for invalid input (invalid policy, key or n, or n above the policy's capacity); they are not decisions.
# TYPE ratelease_invalid_requests_total counter
ratelease_invalid_requests_total 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "ratelease_invalid_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// ratelease_keys is the keys the local key store holds: one per key leased,
// none after Close.
func TestCollectKeys(t *testing.T) {
	l, _ := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}))
	c := newCollector(t, l)
	p := newPolicy(t, "api", ratelease.PerHour(100))
	for i := range 3 {
		allow(t, l, p, fmt.Sprint("user:", i), 2)
	}
	const head = `
# HELP ratelease_keys Keys held in the limiter's local key store now, with their leased units or cached denials (0 in exact mode).
# TYPE ratelease_keys gauge
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(head+"ratelease_keys 3\n"), "ratelease_keys"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(head+"ratelease_keys 0\n"), "ratelease_keys"); err != nil {
		t.Fatal(err)
	}
}

// calls counts the Redis round trips a hook is told of, by op, as they
// end.
type calls struct {
	mu  sync.Mutex
	ops map[string]uint64
}

func (cs *calls) hook(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
	return ctx, func(ratelease.RedisOutcome) {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.ops == nil {
			cs.ops = map[string]uint64{}
		}
		cs.ops[call.Op]++
	}
}

func (cs *calls) snapshot() map[string]uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	m := make(map[string]uint64, len(cs.ops))
	for op, n := range cs.ops {
		m[op] = n
	}
	return m
}

// histograms returns the samples of ratelease_redis_call_duration_seconds
// that reg gathers, by op, and checks each: its labels, its buckets, a
// positive sum.
func histograms(t *testing.T, reg *prometheus.Registry, labels ...string) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "ratelease_redis_call_duration_seconds" {
			continue
		}
		if f.GetType().String() != "HISTOGRAM" {
			t.Fatalf("type %v", f.GetType())
		}
		for _, m := range f.GetMetric() {
			var op string
			var names []string
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName()+"="+lp.GetValue())
				if lp.GetName() == "op" {
					op = lp.GetValue()
				}
			}
			if want := append(slices.Clone(labels), "op="+op); !slices.Equal(names, want) {
				t.Errorf("labels %v, want %v", names, want)
			}
			h := m.GetHistogram()
			var bounds []float64
			for _, b := range h.GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			if len(bounds) != 13 || bounds[0] != 0.0001 || bounds[12] != 1 {
				t.Errorf("op %s: buckets %v, want 100µs to 1s", op, bounds)
			}
			if h.GetSampleCount() == 0 || h.GetSampleSum() <= 0 {
				t.Errorf("op %s: %d samples, sum %v", op, h.GetSampleCount(), h.GetSampleSum())
			}
			got[op] = h.GetSampleCount()
		}
	}
	return got
}

// Every Redis round trip of the Limiter is timed once, under its op: the
// histogram's counts are the round trips another hook was told of, which
// TimeRedisCalls passed each on to.
func TestRedisCallDuration(t *testing.T) {
	var seen calls
	timing, report := rateleaseprom.TimeRedisCalls(seen.hook)
	l, _ := newLimiter(t, timing)
	c := newCollector(t, l, report, rateleaseprom.WithLimiterName("edge"))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	ctx := context.Background()
	p := newPolicy(t, "api", ratelease.PerMinute(2))
	allow(t, l, p, "k", 3)
	if _, err := l.Peek(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Block(ctx, p, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unblock(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"decide": 3, "peek": 1, "block": 1, "unblock": 1, "reset": 1, "ping": 1}
	if got, saw := histograms(t, reg, "limiter=edge"), seen.snapshot(); !maps.Equal(got, want) || !maps.Equal(saw, want) {
		t.Fatalf("histogram counts %v, the hook saw %v, want %v", got, saw, want)
	}
	// The round trips' count agrees with the Limiter's own, which leaves
	// Ping's out.
	if rt := l.Stats().RoundTrips; rt != 7 {
		t.Fatalf("%d round trips in Stats", rt)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v, %v", problems, err)
	}
	runtime.KeepAlive(p)
}

// In lease mode the leases and the refunds made in the background are
// timed too.
func TestRedisCallDurationLeases(t *testing.T) {
	var seen calls
	timing, report := rateleaseprom.TimeRedisCalls(seen.hook)
	l, _ := newLimiter(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}), timing)
	c := newCollector(t, l, report)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	p := newPolicy(t, "api", ratelease.PerHour(100))
	for i := range 3 {
		allow(t, l, p, fmt.Sprint("user:", i), 2)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, saw := histograms(t, reg), seen.snapshot()
	if !maps.Equal(got, saw) || got["lease"] == 0 || got["refund"] == 0 {
		t.Fatalf("histogram counts %v, the hook saw %v; want leases and refunds", got, saw)
	}
	var n uint64
	for _, v := range got {
		n += v
	}
	if rt := l.Stats().RoundTrips; rt != n {
		t.Fatalf("%d round trips timed, %d in Stats", n, rt)
	}
}

// The hooks given to TimeRedisCalls see each round trip in their order,
// the context each returns passed to the next, and end in the reverse
// order.
func TestTimeRedisCallsChainsHooks(t *testing.T) {
	type key struct{}
	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	first := func(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		record("first starts")
		return context.WithValue(ctx, key{}, "first"), func(ratelease.RedisOutcome) { record("first ends") }
	}
	second := func(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		record("second starts after " + fmt.Sprint(ctx.Value(key{})))
		return nil, func(o ratelease.RedisOutcome) { record(fmt.Sprint("second ends, granted ", o.Granted)) }
	}
	timing, report := rateleaseprom.TimeRedisCalls(first, second)
	l, _ := newLimiter(t, timing)
	newCollector(t, l, report)
	allow(t, l, newPolicy(t, "api", ratelease.PerMinute(2)), "k", 1)
	want := []string{"first starts", "second starts after first", "second ends, granted 1", "first ends"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Fatalf("%q, want %q", order, want)
	}
}

// The two halves cannot be wired wrong quietly: a nil hook fails
// ratelease.New, and a second Collector is refused the report that one
// has (one that New refused for another reason has not taken it).
func TestTimeRedisCallsMisuse(t *testing.T) {
	timing, _ := rateleaseprom.TimeRedisCalls(nil)
	if _, err := ratelease.New(newClient(t), timing); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Fatalf("a nil hook: %v, want ratelease.ErrInvalidOption", err)
	}

	timing, report := rateleaseprom.TimeRedisCalls()
	l, _ := newLimiter(t, timing)
	if _, err := rateleaseprom.New(l, report, rateleaseprom.WithConstLabels(prometheus.Labels{"op": "x"})); !errors.Is(err, rateleaseprom.ErrInvalidOption) {
		t.Fatalf("the histogram's own label as a constant one: %v, want ErrInvalidOption", err)
	}
	newCollector(t, l, report)
	if _, err := rateleaseprom.New(l, report); !errors.Is(err, rateleaseprom.ErrInvalidOption) {
		t.Fatalf("a second Collector of one report: %v, want ErrInvalidOption", err)
	}
}

// newClient returns a client of a fresh miniredis.
func newClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
