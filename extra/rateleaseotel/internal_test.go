package rateleaseotel

import (
	"context"
	"math"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelease/ratelease"
)

// A collection reads Stats once, however many instruments it observes.
func TestOneStatsPerCollection(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	calls := 0
	reg, err := register(config{meters: mp}, func() ratelease.Stats {
		calls++
		return ratelease.Stats{Allowed: math.MaxUint64, Policies: map[string]ratelease.PolicyStats{"a": {}, "b": {}},
			DeniedBy: map[string]map[string]uint64{"a": {"1 req/s (burst 1)": 0}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	for i := 1; i <= 2; i++ {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		if calls != i {
			t.Fatalf("%d collections read Stats %d times", i, calls)
		}
		if n := len(rm.ScopeMetrics[0].Metrics); n != 27 {
			t.Fatalf("%d instruments", n)
		}
		for _, m := range rm.ScopeMetrics[0].Metrics {
			if m.Name != "ratelease.decisions" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := dp.Attributes.Value(OutcomeKey); v.AsString() == "allowed" && dp.Value != math.MaxInt64 {
					t.Fatalf("a count past MaxInt64 is %d, want MaxInt64", dp.Value)
				}
			}
		}
	}
}

func TestStateValue(t *testing.T) {
	for s, want := range map[ratelease.BreakerState]string{ratelease.BreakerClosed: "closed",
		ratelease.BreakerOpen: "open", ratelease.BreakerHalfOpen: "half_open"} {
		if got := stateValue(s); got != want {
			t.Errorf("%v: %q, want %q", s, got, want)
		}
	}
}
