package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/remote"
)

// TestLeaseRetryAfterIsExactModes drives members of a key at random (1, 2
// and 6 of them, random demands and batches, random steps of time, an
// exact caller now and then) for every algorithm that leases, each alone
// and beside a second limit, and checks every denial of a member against
// what exact mode says of the same state at the same Redis time (Peek):
//
//   - where the limits themselves deny the request, its RetryAfter,
//     ResetAfter and Decider are exact mode's (a used-up window: its end,
//     whatever the fair share);
//   - where they have room and the fair share denies, RetryAfter is this
//     member's own wait (> 0), Next is 0, and FairShare says so;
//   - Next, when set, is later than RetryAfter, and never past the end of
//     a window of the key's: a new window is shared anew.
//
// Seeded; set RATELEASE_SEED to replay a failure.
func TestLeaseRetryAfterIsExactModes(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("RATELEASE_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("RATELEASE_SEED=%d", seed)
	day := win(remote.CalendarWindow, 40, 24*time.Hour)
	day.Calendar = remote.Calendar{Unit: remote.CalendarDay, Location: time.UTC}
	limits := map[string][]remote.Limit{
		"token bucket":           {tb(100, 20, time.Second)},
		"fixed window":           {win(remote.FixedWindow, 40, time.Second)},
		"sliding window counter": {win(remote.SlidingWindowCounter, 40, time.Second)},
		"calendar day":           {day},
		"bucket and window":      {tb(50, 10, time.Second), win(remote.FixedWindow, 300, 10*time.Second)},
		"window and bucket":      {win(remote.FixedWindow, 30, time.Second), tb(1000, 100, time.Hour)},
	}
	for name, ls := range limits {
		for _, members := range []int{1, 2, 6} {
			t.Run(fmt.Sprintf("%s/%d", name, members), func(t *testing.T) {
				retryAgainstExact(t, rand.New(rand.NewPCG(seed, uint64(members))), mustPolicy(t, "p", ls...), members)
			})
		}
	}
}

func retryAgainstExact(t *testing.T, rng *rand.Rand, p *remote.Policy, members int) {
	f := newFake(t)
	ctx := context.Background()
	demands := make([]int64, members)
	for i := range demands {
		demands[i] = 10 + rng.Int64N(400)
	}
	denials, byLimits := 0, 0
	for step := range 600 {
		// (The host's clock first: an exact call names the calendar's window by it.)
		f.s.SetClock(&wallClock{Manual: clock.NewManual(f.Now()), now: f.Now()})
		switch r := rng.IntN(20); {
		case r < 4:
			f.Advance(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		case r == 4:
			f.Advance(time.Duration(rng.Int64N(int64(3 * time.Hour))))
		case r == 5:
			f.s.SetClock(&wallClock{Manual: clock.NewManual(f.Now()), now: f.Now()})
			acquire(t, f.s, p, "k", 1, 1+rng.Int64N(5), false) // an exact caller
			continue
		case r == 6:
			demands[rng.IntN(members)] = 10 + rng.Int64N(400)
		}
		// A calendar's windows are named by the host's clock: here Redis's.
		f.s.SetClock(&wallClock{Manual: clock.NewManual(f.Now()), now: f.Now()})
		m := rng.IntN(members)
		least := int64(1)
		if rng.IntN(3) == 0 {
			least = 2 + rng.Int64N(4)
		}
		req := remote.Request{Policy: p, Key: "k", Min: least, Max: least + rng.Int64N(30),
			Member: fmt.Sprintf("m%d", m), Demand: demands[m], Horizon: 100 * time.Millisecond}
		exact, err := f.s.Peek(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Granted > 0 {
			if exact.Granted == 0 && least == 1 {
				t.Fatalf("step %d: %s granted %+v where exact mode denies: %+v", step, req.Member, d, exact)
			}
			if end := windowEnd(t, f, p); end > 0 && d.Next > end {
				t.Fatalf("step %d: %s granted %+v, Next past the window's end in %v", step, req.Member, d, end)
			}
			continue
		}
		denials++
		if d.Next != 0 && d.Next <= d.RetryAfter {
			t.Fatalf("step %d: %s denied %+v: Next set yet not later than RetryAfter", step, req.Member, d)
		}
		if end := windowEnd(t, f, p); end > 0 && d.Next > end {
			t.Fatalf("step %d: %s denied %+v: Next past the window's end in %v", step, req.Member, d, end)
		}
		if least > 1 {
			// (Peek is exact mode's word for one unit: for more, only that
			// neither time passes the window's end.)
			if end := windowEnd(t, f, p); end > 0 && d.FairShare && d.RetryAfter > end {
				t.Fatalf("step %d: %s denied %d units by the fair share: %+v, past the window's end in %v", step, req.Member, least, d, end)
			}
			continue
		}
		if exact.Granted == 0 {
			byLimits++
			if d.RetryAfter != exact.RetryAfter || d.ResetAfter != exact.ResetAfter || d.Decider != exact.Decider || d.FairShare {
				t.Fatalf("step %d: %s (of %d members) denied %+v; exact mode at the same time: %+v: want its RetryAfter, ResetAfter and Decider, not FairShare",
					step, req.Member, members, d, exact)
			}
			continue
		}
		if end := windowEnd(t, f, p); end > 0 && d.RetryAfter > end {
			t.Fatalf("step %d: %s denied by the fair share alone: %+v, past the window's end in %v", step, req.Member, d, end)
		}
		if d.RetryAfter <= 0 || d.Next != 0 || !d.FairShare {
			t.Fatalf("step %d: %s denied by the fair share alone: %+v; want its own wait in RetryAfter, no Next, FairShare", step, req.Member, d)
		}
	}
	if byLimits == 0 {
		t.Fatalf("%d denials, none by the limits themselves: the check never ran", denials)
	}
}

// windowEnd is the time left of the shortest window among p's limits at
// the fake's time, to the microsecond above (Redis's), or 0 when p has
// none.
func windowEnd(t *testing.T, f *fake, p *remote.Policy) time.Duration {
	t.Helper()
	var end time.Duration
	now := f.Now()
	for _, l := range p.Limits() {
		var left time.Duration
		switch l.Algorithm {
		case remote.FixedWindow, remote.SlidingWindowCounter:
			left = l.Period - time.Duration(now.UnixNano()%int64(l.Period))
		case remote.CalendarWindow:
			_, end := remote.CalendarBounds(l.Calendar, now)
			left = end.Sub(now)
		default:
			continue
		}
		if end == 0 || left < end {
			end = left
		}
	}
	if end == 0 {
		return 0
	}
	return end.Round(time.Microsecond) + time.Microsecond
}

// ChargeFit on a key whose window is used up charges nothing and says when
// one unit fits again: the window's end, not 0 (its RetryAfter was read as
// a grant's, of which there was none).
func TestChargeFitNothingToTake(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", win(remote.FixedWindow, 5, time.Second))
	f.Advance(time.Second - time.Duration(f.Now().UnixNano()%int64(time.Second)) + 200*ms)
	acquire(t, f.s, p, "k", 5, 5, false)
	ds, errs := f.s.ChargeFit(context.Background(), []remote.Request{{Policy: p, Key: "k", Max: 3}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if d := ds[0]; d.Granted != 0 || d.RetryAfter != 800*ms || d.Next != 0 {
		t.Fatalf("ChargeFit(3) on a used-up window: %+v; want nothing taken, RetryAfter 800ms (the window's end)", d)
	}
}
