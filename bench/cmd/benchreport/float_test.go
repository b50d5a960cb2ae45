package main

import (
	"math"
	"testing"

	"github.com/ratelease/ratelease/bench"
)

func TestFloatCeiling(t *testing.T) {
	cfg := bench.AccuracyConfig{Rate: 100, Burst: 100, Demand: 2, Shares: []float64{0.5, 0.5}}
	// Shares 100 and 100 of 200 wanted: fair 50 each, (Σ√f)² = 200. Ten
	// calls a second over a bound of 500: 1 − 200/(10·500) = 0.96.
	got := floatCeilings(cfg, []bench.AccuracyResult{{RoundTrips: 40, Seconds: 4, Bound: 500}, {}})
	if math.Abs(got[0]-0.96) > 1e-9 || got[1] != 0 {
		t.Fatalf("floatCeilings = %v, want [0.96 0]", got)
	}
}
