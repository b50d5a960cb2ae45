package main

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo runs end to end on embedded servers and stays within the bound
// of regional pools (run returns errExceeded otherwise).
func TestRegionsRuns(t *testing.T) {
	err := run(setup{instances: 2, rate: 50, skew: 5, duration: time.Second, latency: 5 * time.Millisecond})
	if errors.Is(err, errExceeded) {
		t.Fatal("the worldwide bound was exceeded")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := run(setup{instances: 0, rate: 50, skew: 5, duration: time.Second}); err == nil {
		t.Fatal("run accepted zero instances")
	}
}

// Given addresses, as by -global and -regions, it uses those servers.
func TestRegionsAddresses(t *testing.T) {
	global := miniredis.RunT(t)
	regions := []string{miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr()}
	err := run(setup{global: global.Addr(), regions: regions, instances: 1, rate: 50, skew: 2, duration: time.Second, latency: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(global.Keys()) == 0 {
		t.Fatal("nothing in the global Redis")
	}
}

// The max-min split gives the small demands all they ask and the rest to
// the large one, and splits evenly when every demand is large.
func TestShares(t *testing.T) {
	for _, c := range []struct {
		rate          float64
		demands, want []float64
	}{
		{100, []float64{150, 25, 25}, []float64{50, 25, 25}},
		{90, []float64{100, 100, 100}, []float64{30, 30, 30}},
		{100, []float64{10, 20}, []float64{10, 20}},
	} {
		got := shares(c.rate, c.demands)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("shares(%v, %v) = %v, want %v", c.rate, c.demands, got, c.want)
				break
			}
		}
	}
}
