package tier

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// A refill of a windowed worldwide key is put off to the next window when
// it would set out too late in the window for its units to be of use (two
// round trips before its end ahead of need, a round trip and a half for a
// decision waiting), but not when set out now it would reach the global
// Redis after the window turned anyway; the wait has it reach the global
// Redis as the next window opens, where it is not put off again. The end
// is carried a whole number of periods on. Nothing is put off for a
// bucket, a calendar, windows of two lengths, a window of under four
// round trips, or a window whose end is not known.
func TestRefillLateInAWindowWaitsForTheNext(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	const rtt = 100 * time.Millisecond
	mk := func(ls ...remote.Limit) *remote.Policy {
		p, err := remote.NewPolicy("d", ls)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	lim := func(a remote.Algorithm, period time.Duration) remote.Limit {
		return remote.Limit{Algorithm: a, Rate: 100, Period: period, Burst: 100}
	}
	at := func(d time.Duration) *regions { return &regions{clock: clock.NewManual(t0.Add(d))} }
	// The window ends 500ms after t0, and every second on.
	end := known{end: t0.Add(500 * time.Millisecond).UnixNano()}
	for _, g := range []*remote.Policy{
		mk(lim(remote.FixedWindow, time.Second)),
		mk(lim(remote.SlidingWindowCounter, time.Second)),
		mk(lim(remote.TokenBucket, 100*time.Millisecond), lim(remote.FixedWindow, time.Second)),
		mk(lim(remote.FixedWindow, time.Second), lim(remote.SlidingWindowCounter, time.Second)),
	} {
		for _, c := range []struct {
			at      time.Duration // after t0
			need    int64
			doomed  bool
			comment string
		}{
			{0, 0, false, "early in the window"},
			{299 * time.Millisecond, 0, false, "201ms left"},
			{301 * time.Millisecond, 0, true, "199ms left"},
			{301 * time.Millisecond, 1, false, "199ms left, for a decision"},
			{380 * time.Millisecond, 1, true, "120ms left, for a decision"},
			{455 * time.Millisecond, 0, true, "45ms left"},
			{460 * time.Millisecond, 0, false, "40ms left: set out now, it reaches the global Redis as the window turns"},
			{499 * time.Millisecond, 0, false, "1ms left"},
			{600 * time.Millisecond, 0, false, "the window turned"},
			{1299 * time.Millisecond, 0, false, "a window on, 201ms left"},
			{1350 * time.Millisecond, 0, true, "a window on, 150ms left"},
			{5400 * time.Millisecond, 0, true, "five windows on, 100ms left"},
		} {
			wait, doomed := at(c.at).doomed(g, end, rtt, c.need)
			if doomed != c.doomed {
				t.Errorf("%v, %v after t0 (%s): doomed %v, want %v", g.Limits(), c.at, c.comment, doomed, c.doomed)
				continue
			}
			if !doomed {
				continue
			}
			// Set out after wait, the call reaches the global Redis half a
			// round trip later: as the next window opens, and aim after;
			// and it is not put off again then.
			next := c.at.Truncate(time.Second) + 500*time.Millisecond
			if d := c.at + wait + rtt/2 - next; d < 0 || d > aim {
				t.Errorf("%v, %v after t0: waits %v, reaches the global Redis %v after the window's end, want within [0, %v]", g.Limits(), c.at, wait, d, aim)
			}
			if _, again := at(c.at+wait).doomed(g, end, rtt, c.need); again {
				t.Errorf("%v, %v after t0: put off again after its wait of %v", g.Limits(), c.at, wait)
			}
		}
	}
	cal := remote.Calendar{Unit: remote.CalendarMonth, Location: time.UTC}
	for name, g := range map[string]*remote.Policy{
		"a token bucket":             mk(lim(remote.TokenBucket, time.Second)),
		"a short window":             mk(lim(remote.FixedWindow, 300*time.Millisecond)),
		"a short counter":            mk(lim(remote.SlidingWindowCounter, 399*time.Millisecond)),
		"a calendar month":           mk(remote.Limit{Algorithm: remote.CalendarWindow, Rate: 100, Period: cal.Nominal(), Burst: 100, Calendar: cal}),
		"windows of two lengths":     mk(lim(remote.FixedWindow, time.Second), lim(remote.FixedWindow, time.Minute)),
		"a window beside a calendar": mk(lim(remote.FixedWindow, time.Second), remote.Limit{Algorithm: remote.CalendarWindow, Rate: 100, Period: cal.Nominal(), Burst: 100, Calendar: cal}),
	} {
		if _, doomed := at(450*time.Millisecond).doomed(g, end, rtt, 0); doomed {
			t.Errorf("%s: refill put off", name)
		}
	}
	if _, doomed := at(450*time.Millisecond).doomed(mk(lim(remote.FixedWindow, time.Second)), known{}, rtt, 0); doomed {
		t.Error("a window whose end is not known: refill put off")
	}
}

// A decision whose pool ran dry late in a window, and whose refill is put
// off to the next (doomed), is not made again, and is told when the
// refill's units may land: when the refill sets out and a global round
// trip more, not a millisecond (its callers would poll the region's Redis
// until then).
func TestRefillPutOffSaysWhenItLands(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	const rtt = 100 * time.Millisecond
	g, err := remote.NewPolicy("d", []remote.Limit{{Algorithm: remote.FixedWindow, Rate: 100, Period: time.Second, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	p := g.Pooled()
	for _, at := range []time.Duration{380 * time.Millisecond, 450 * time.Millisecond} { // after t0: 120ms and 50ms left
		clk := clock.NewManual(t0.Add(at))
		m := redistest.StartMini(t)
		mk := func(prefix string) *door.Door {
			return door.New(door.Config{Store: remote.NewStore(m.Client(t), prefix), Clock: clk, Timeout: time.Second})
		}
		r := newRegions("t", mk("g"), clk, false)
		r.local = mk("l")
		r.rtt.Store(int64(rtt))
		r.known.Add(pool{p, "k"}, known{end: t0.Add(500 * time.Millisecond).UnixNano()})
		wait, doomed := r.doomed(g, known{end: t0.Add(500 * time.Millisecond).UnixNano()}, rtt, 1)
		again, retry := r.Refill(context.Background(), p, "k", 1)
		r.close(context.Background())
		if !doomed || again || retry != wait+rtt {
			t.Errorf("%v after t0: doomed %v (wait %v); Refill again %v, retry %v; want no second try, retry %v", at, doomed, wait, again, retry, wait+rtt)
		}
	}
}
