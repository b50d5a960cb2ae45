package rateleaseprom

import (
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelease/ratelease"
)

// A scrape reads Stats once, however many metrics it reports.
func TestOneStatsPerScrape(t *testing.T) {
	calls := 0
	c := &Collector{d: newDescs(nil), stats: func() ratelease.Stats {
		calls++
		return ratelease.Stats{Allowed: 7, Breaker: ratelease.BreakerHalfOpen, Instances: 3,
			Policies: map[string]ratelease.PolicyStats{"a": {Allowed: 4}, "b": {Allowed: 3}}}
	}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	const want = `
# HELP ratelease_breaker_state 1 for the circuit breaker's current state (closed, open, half_open), 0 for the others; with a Redis Cluster, the worst of the masters' breakers.
# TYPE ratelease_breaker_state gauge
ratelease_breaker_state{state="closed"} 0
ratelease_breaker_state{state="half_open"} 1
ratelease_breaker_state{state="open"} 0
# HELP ratelease_instances The most instances that shared a key this instance leased in the last minute, as Redis counted them (1 in exact mode).
# TYPE ratelease_instances gauge
ratelease_instances 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelease_breaker_state", "ratelease_instances"); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("one scrape read Stats %d times, want 1", calls)
	}
}

// Names that are not valid UTF-8 are escaped; two that meet are summed.
func TestPolicies(t *testing.T) {
	valid := map[string]ratelease.PolicyStats{"api": {Allowed: 1}}
	if got := policies(valid); len(got) != 1 || got["api"].Allowed != 1 {
		t.Fatalf("valid names: %v", got)
	}
	got := policies(map[string]ratelease.PolicyStats{
		"a\xff":    {Allowed: 1, Denied: 2, Local: 3, Remote: 4, Cached: 5, Fallback: 6, ShadowDenied: 7},
		`a\xff`:    {Allowed: 10, Denied: 20, Local: 30, Remote: 40, Cached: 50, Fallback: 60, ShadowDenied: 70},
		"b\xc3":    {Allowed: 1},
		"ok\u00e9": {Denied: 1},
	})
	want := map[string]ratelease.PolicyStats{
		`a\xff`:    {Allowed: 11, Denied: 22, Local: 33, Remote: 44, Cached: 55, Fallback: 66, ShadowDenied: 77},
		`b\xc3`:    {Allowed: 1},
		"ok\u00e9": {Denied: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("%q: %+v, want %+v", k, got[k], v)
		}
	}
}

// The denials by limit of names that are not valid UTF-8 are escaped, and
// two names that meet are summed, limit by limit.
func TestDeniedBy(t *testing.T) {
	valid := map[string]map[string]uint64{"api": {"1 req/s (burst 1)": 1}}
	if got := deniedBy(valid); !reflect.DeepEqual(got, valid) {
		t.Fatalf("valid names: %v", got)
	}
	got := deniedBy(map[string]map[string]uint64{
		"a\xff": {"1 req/s (burst 1)": 1, "9 req/h (burst 9)": 1},
		`a\xff`: {"1 req/s (burst 1)": 10},
		"ok":    {"1 req/s (burst 1)": 0},
	})
	want := map[string]map[string]uint64{
		`a\xff`: {"1 req/s (burst 1)": 11, "9 req/h (burst 9)": 1},
		"ok":    {"1 req/s (burst 1)": 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestStateLabel(t *testing.T) {
	for s, want := range map[ratelease.BreakerState]string{ratelease.BreakerClosed: "closed",
		ratelease.BreakerOpen: "open", ratelease.BreakerHalfOpen: "half_open"} {
		if got := stateLabel(s); got != want {
			t.Errorf("%v: %q, want %q", s, got, want)
		}
	}
}
