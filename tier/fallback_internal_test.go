package tier

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// Callers read the time, then wait for the fallback's lock: under load a
// caller may reach it with a time older than the last one's. The local
// limits must not count the time between the two twice. A randomized
// model of every such order (each call's time late by up to maxLag, calls
// served in the order they arrive): the fallback admits at most
// Burst + Rate·(span + maxLag) over the run, for every rate and burst.
func TestFallbackHoldsWhenCallersComeWithOlderTimes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 41))
	for round := range 200 {
		rate := 1 + rng.Int64N(2000)
		burst := 1 + rng.Int64N(rate)
		p, err := remote.NewPolicy("fb", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: rate, Period: time.Second, Burst: burst}})
		if err != nil {
			t.Fatal(err)
		}
		f := newFallback(FailLocal, 16, func(*remote.Policy, string) int64 { return 1 })
		maxLag := time.Duration(1+rng.Int64N(50)) * time.Millisecond
		start := time.Unix(1_000_000, 0)
		now := start
		var admitted int64
		for range 4000 {
			now = now.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
			seen := now.Add(-time.Duration(rng.Int64N(int64(maxLag))))
			d, err := f.decide(p, "k", 1, seen, door.ErrUnavailable)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		bound := float64(burst) + float64(rate)*(now.Sub(start)+maxLag).Seconds()
		if float64(admitted) > bound {
			t.Fatalf("round %d: rate %d/s burst %d, times late by up to %v: admitted %d over %v, bound %.0f",
				round, rate, burst, maxLag, admitted, now.Sub(start), bound)
		}
		// What AllowAtMost reads (avail) is read at the latest time too: a
		// caller with an older time is told what the limits hold now.
		later := f.avail(p, "k", now.Add(20*time.Millisecond))
		if got := f.avail(p, "k", now); later < burst && got != later {
			t.Fatalf("round %d: rate %d/s: %d units at a time 20ms older than one that read %d", round, rate, got, later)
		}
	}
}
