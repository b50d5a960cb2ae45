package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var short = scenario{Rate: 1000, Period: time.Second, Burst: 100, Instances: 3, Profile: "bursty", Load: 1.5, Duration: 3 * time.Second, Seed: 1}

// Each configuration keeps within the guarantee, Burst + Rate·(w + TTL),
// and a longer Refresh makes bigger leases and fewer Redis calls.
func TestRunMeasures(t *testing.T) {
	demand := short.demand()
	exact := short.exact(demand)
	var results []result
	for i, refresh := range []time.Duration{25 * time.Millisecond, 250 * time.Millisecond} {
		b, err := newSimulated()
		if err != nil {
			t.Fatal(err)
		}
		r, err := run(short, ratelease.LeaseConfig{Refresh: refresh, TTL: time.Second}, b, demand, exact, "t"+string(rune('a'+i)))
		b.close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.Overshoot > r.OvershootBound {
			t.Errorf("refresh %v: overshoot %.0f past the bound Rate·TTL = %.0f", refresh, r.Overshoot, r.OvershootBound)
		}
		if r.Served <= 0.5 || r.Served > 1.05 {
			t.Errorf("refresh %v: served %.3f of the exact limiter", refresh, r.Served)
		}
		if r.CallsPerSec <= 0 || r.MeanLease < 1 || r.P99 <= 0 {
			t.Errorf("refresh %v: nothing measured: %+v", refresh, r)
		}
		results = append(results, r)
	}
	if a, b := results[0], results[1]; b.MeanLease <= a.MeanLease || b.CallsPerSec >= a.CallsPerSec {
		t.Errorf("a longer Refresh: mean lease %.1f → %.1f, calls/s %.1f → %.1f; want bigger leases, fewer calls",
			a.MeanLease, b.MeanLease, a.CallsPerSec, b.CallsPerSec)
	}
}

// The exact reference admits what a token bucket admits: the burst at
// once, then the rate.
func TestExactReference(t *testing.T) {
	s := scenario{Rate: 1000, Period: time.Second, Burst: 100, Instances: 2, Profile: "steady", Load: 3, Duration: 2 * time.Second, Seed: 1}
	got := sum(s.exact(s.demand()))
	want := 100 + 1000*2 - 1 // refill starts after the first step
	if got < want-2 || got > want+2 {
		t.Fatalf("exact token bucket admitted %d, want about %d", got, want)
	}
}

// The whole tool: a table with a row per configuration, a recommendation,
// and a plot in each format.
func TestTune(t *testing.T) {
	for _, ext := range []string{"svg", "png"} {
		path := filepath.Join(t.TempDir(), "plot."+ext)
		var out bytes.Buffer
		s := short
		s.Profile, s.Load, s.Burst = "steady", 0.8, 0
		c := criteria{MaxOvershoot: 0.1, MinServed: 0.9, MaxP99: time.Second}
		if err := tune(&out, s, c, "50ms,250ms", "1s", 1000, "", path); err != nil {
			t.Fatal(err)
		}
		t.Log(out.String())
		if n := strings.Count(out.String(), " 1s  "); n < 2 {
			t.Errorf("want a row per configuration:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "recommended: ratelease.WithLease(ratelease.LeaseConfig{Max: 1000, Refresh: 250ms, TTL: 1s})") {
			t.Errorf("want the bigger lease recommended at steady demand under the limit:\n%s", out.String())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if magic := map[string]string{"svg": "<svg", "png": "\x89PNG"}[ext]; !bytes.Contains(b[:min(len(b), 200)], []byte(magic)) || len(b) < 1000 {
			t.Errorf("%s plot: %d bytes, not a %s", ext, len(b), ext)
		}
	}
}

func TestBadFlags(t *testing.T) {
	ok := short
	for name, tc := range map[string]struct {
		s               scenario
		refresh, ttl, p string
	}{
		"profile":  {s: scenario{Rate: 1, Period: time.Second, Instances: 1, Profile: "spiky", Load: 1, Duration: time.Second}, refresh: "1s", ttl: "1s"},
		"rate":     {s: scenario{Rate: 0, Period: time.Second, Instances: 1, Profile: "steady", Load: 1, Duration: time.Second}, refresh: "1s", ttl: "1s"},
		"refresh":  {s: ok, refresh: "soon", ttl: "1s"},
		"ttl":      {s: ok, refresh: "1s", ttl: "-1s"},
		"plotname": {s: ok, refresh: "1s", ttl: "1s", p: "plot.gif"},
	} {
		var out bytes.Buffer
		err := tune(&out, tc.s, criteria{}, tc.refresh, tc.ttl, 1000, "", tc.p)
		if !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want errUsage", name, err)
		}
		if out.Len() > 0 {
			t.Errorf("%s: ran before the error:\n%s", name, out.String())
		}
	}
}

// Of near-equal Redis costs the tighter guarantee wins; what misses a
// criterion is never recommended.
func TestRecommend(t *testing.T) {
	r := func(ttl time.Duration, calls, served float64) result {
		return result{Lease: ratelease.LeaseConfig{TTL: ttl}, CallsPerSec: calls, Served: served, P99: time.Microsecond}
	}
	c := criteria{MaxOvershoot: 0.1, MinServed: 0.97, MaxP99: time.Millisecond}
	got, ok := recommend(short, c, []result{
		r(250*time.Millisecond, 10, 0.9), // fewest calls, but serves too little
		r(5*time.Second, 19.5, 0.99),
		r(time.Second, 20.1, 0.99),
		r(time.Second, 30, 0.99),
	})
	if !ok || got.Lease.TTL != time.Second || got.CallsPerSec != 20.1 {
		t.Fatalf("recommended %+v (%v), want TTL 1s at 20.1 calls/s", got, ok)
	}
	if _, ok := recommend(short, c, []result{r(time.Second, 1, 0.5)}); ok {
		t.Fatal("recommended a configuration that serves half the demand")
	}
}
