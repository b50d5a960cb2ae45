package tier

import (
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/remote"
)

// A refill of a windowed worldwide key is put off to the next window when
// it would set out less than two round trips before the window's end (its
// units would lapse as they land), by a wait that has it reach the global
// Redis as the next window opens; the end is carried a whole number of
// periods on; nothing is put off for a bucket, a calendar, a window of
// under four round trips, or a window not known.
func TestRefillLateInAWindowWaitsForTheNext(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var clk *clock.Manual // (a Manual clock runs forward only: one per algorithm)
	r := &regions{}
	const rtt = 100 * time.Millisecond
	mk := func(a remote.Algorithm, period time.Duration) *remote.Policy {
		p, err := remote.NewPolicy("d", []remote.Limit{{Algorithm: a, Rate: 100, Period: period, Burst: 100}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	end := t0.Add(500 * time.Millisecond).UnixNano()
	for _, a := range []remote.Algorithm{remote.FixedWindow, remote.SlidingWindowCounter} {
		g := mk(a, time.Second)
		clk = clock.NewManual(t0)
		r.clock = clk
		for _, c := range []struct {
			at     time.Duration // after t0
			doomed bool
		}{
			{0, false}, {299 * time.Millisecond, false}, {301 * time.Millisecond, true}, {499 * time.Millisecond, true},
			{600 * time.Millisecond, false}, {1299 * time.Millisecond, false}, {1350 * time.Millisecond, true},
			{5400 * time.Millisecond, true}, {5600 * time.Millisecond, false},
		} {
			clk.Set(t0.Add(c.at))
			wait, doomed := r.doomed(g, known{end: end}, rtt)
			if doomed != c.doomed {
				t.Errorf("%v, %v after t0 (window ends at 500ms, a period on): doomed %v, want %v", a, c.at, doomed, c.doomed)
				continue
			}
			if !doomed {
				continue
			}
			// Set out after wait, the call reaches the global Redis half a
			// round trip later: as the next window opens, and aim after (or
			// at once, when even that is late).
			arrives := c.at + wait + rtt/2
			next := (c.at/time.Second)*time.Second + 500*time.Millisecond
			if c.at%time.Second > 500*time.Millisecond {
				next += time.Second
			}
			late := next-c.at < rtt/2-aim
			if d := arrives - next; !late && (d < 0 || d > aim+time.Millisecond) || late && wait != time.Millisecond {
				t.Errorf("%v, %v after t0: waits %v, reaches the global Redis %v after the window's end, want within [0, %v]", a, c.at, wait, d, aim)
			}
		}
	}
	r.clock = clock.NewManual(t0.Add(450 * time.Millisecond))
	for name, g := range map[string]*remote.Policy{
		"a token bucket":   mk(remote.TokenBucket, time.Second),
		"a short window":   mk(remote.FixedWindow, 300*time.Millisecond),
		"a short counter":  mk(remote.SlidingWindowCounter, 399*time.Millisecond),
		"a calendar month": calendarPolicy(t),
	} {
		if _, doomed := r.doomed(g, known{end: end}, rtt); doomed {
			t.Errorf("%s: refill put off", name)
		}
	}
	if _, doomed := r.doomed(mk(remote.FixedWindow, time.Second), known{}, rtt); doomed {
		t.Error("a window whose end is not known: refill put off")
	}
}

func calendarPolicy(t *testing.T) *remote.Policy {
	t.Helper()
	cal := remote.Calendar{Unit: remote.CalendarMonth, Location: time.UTC}
	p, err := remote.NewPolicy("c", []remote.Limit{{Algorithm: remote.CalendarWindow, Rate: 100, Period: cal.Nominal(), Burst: 100, Calendar: cal}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
