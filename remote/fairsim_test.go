package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// Five members with demands 375, 375, 750, 1500 and 3000 per second on a
// bucket of 3000/s (burst 3000), each asking for what it wants over a
// horizon of 750ms whenever it runs out and its last answer lets it, on
// simulated time: over 6s each gets at least 0.9 of its max-min fair share
// (375, 375, 750, 750, 750 per second, plus its part of the burst), and the
// bucket gives out what it holds.
func TestFairShareSimulated(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(3000, 3000, time.Second))
	demands := []int64{375, 375, 750, 1500, 3000}
	fair := []float64{375, 375, 750, 750, 750}
	type member struct {
		next    time.Duration // when it asks next, since the start
		held    float64       // units held, used at the member's demand
		granted int64
	}
	ms := make([]member, len(demands))
	const step, runFor = time.Millisecond, 6 * time.Second
	for now := time.Duration(0); now < runFor; now += step {
		for i := range ms {
			m := &ms[i]
			// It uses its units at its demand.
			m.held = max(0, m.held-float64(demands[i])*step.Seconds())
			if m.held >= 1 || now < m.next {
				continue
			}
			d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1,
				Max: demands[i] * 3 / 4, Member: string(rune('a' + i)), Demand: demands[i], Horizon: 750 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			m.held += float64(d.Granted)
			m.granted += d.Granted
			m.next = now + d.RetryAfter
		}
		f.Advance(step)
	}
	var total int64
	for i, m := range ms {
		rate := float64(m.granted) / runFor.Seconds()
		total += m.granted
		t.Logf("member %d (demand %d/s): %.0f/s, fair %.0f/s", i, demands[i], rate, fair[i])
		if rate < 0.9*fair[i] {
			t.Errorf("member %d: %.0f/s, less than 0.9 of its fair share %.0f/s", i, rate, fair[i])
		}
	}
	if bound := 3000 + 3000*runFor.Seconds(); float64(total) > bound || float64(total) < 0.97*bound {
		t.Errorf("granted %d in all, bound %.0f", total, bound)
	}
}
