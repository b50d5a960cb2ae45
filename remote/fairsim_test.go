package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// Members of one key that together want more than its rate, on simulated
// time: each uses what it holds at its demand and asks for a horizon's worth
// whenever it runs out and its last answer lets it (RetryAfter), each asking
// first in turn. Over 6s each gets at least 0.9 of its max-min fair share
// (before its part of the burst, which goes to whoever wants it), and the
// bucket gives out at least 0.97 of what it makes (Burst + Rate·T), never
// more. "late and noisy": each member asks up to 3ms late and reports a
// demand up to 5% off its own, as a real instance measuring its demand on a
// loaded machine does.
//
// With a burst of a tenth of a second (the benchmark's accuracy workload),
// the capacity sets the batches: together they hold half of it, so that it
// does not fill up and overflow while the members come back for them. And
// a member alone at a burst of a hundredth of a second must not wait for
// a batch the burst cannot hold.
func TestFairShareSimulated(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	for _, c := range []struct {
		rate, burst   int64
		horizon       time.Duration
		demands, fair []float64
		perUnit       float64 // the most calls a unit granted, 0: not checked
		// beside, when set, is a second limit of the policy, of a lower
		// long-run rate but room for the whole run: the per-second limit
		// is still the one shared.
		beside *remote.Limit
	}{
		{3000, 3000, 750 * ms, []float64{375, 375, 750, 1500, 3000}, []float64{375, 375, 750, 750, 750}, 0, nil},
		{600, 600, 100 * ms, []float64{100, 100, 200, 400, 800}, []float64{100, 100, 133.3, 133.3, 133.3}, 0, nil},
		// The capacity sets the batches: together they hold half of it
		// (PART in fairshare.lua), so a unit costs members/(0.5·burst) =
		// 0.04 calls: from a bucket every member waits for a whole batch
		// (only a window's members below twice their share wait for a
		// part of one, EXCESS).
		{2000, 200, 1125 * ms, []float64{200, 400, 1000, 2400}, []float64{200, 400, 700, 700}, 0.04, nil},
		{2000, 20, 1125 * ms, []float64{4000}, []float64{2000}, 0, nil},
		{3000, 3000, 750 * ms, []float64{375, 375, 750, 1500, 3000}, []float64{375, 375, 750, 750, 750}, 0,
			&remote.Limit{Algorithm: remote.TokenBucket, Rate: 100_000, Burst: 100_000, Period: 24 * time.Hour}},
		{600, 600, 100 * ms, []float64{100, 100, 200, 400, 800}, []float64{100, 100, 133.3, 133.3, 133.3}, 0,
			&remote.Limit{Algorithm: remote.FixedWindow, Rate: 100_000, Burst: 100_000, Period: 24 * time.Hour}},
	} {
		for _, jitter := range []bool{false, true} {
			name := fmt.Sprintf("rate=%d,burst=%d,members=%d/%s", c.rate, c.burst, len(c.demands),
				map[bool]string{false: "on time", true: "late and noisy"}[jitter])
			limits := []remote.Limit{tb(c.rate, c.burst, time.Second)}
			if c.beside != nil {
				name += "/beside " + c.beside.Algorithm.String() + " per day"
				limits = append(limits, *c.beside)
			}
			t.Run(name, func(t *testing.T) {
				fairShareSimulated(t, c.rate, c.burst, c.horizon, c.demands, c.fair, c.perUnit, jitter, limits...)
			})
		}
	}
}

func fairShareSimulated(t *testing.T, rate, burst int64, horizon time.Duration, demands, fair []float64, perUnit float64, jitter bool, limits ...remote.Limit) {
	f := newFake(t)
	rng := rand.New(rand.NewPCG(1, 2))
	p := mustPolicy(t, "p", limits...)
	type member struct {
		next    time.Duration // when it asks next, since the start
		held    float64       // units held, used at the member's demand
		granted int64
		calls   int
	}
	ms := make([]member, len(demands))
	const step, runFor = time.Millisecond, 6 * time.Second
	for now, turn := time.Duration(0), 0; now < runFor; now, turn = now+step, turn+1 {
		for j := range ms {
			i := (turn + j) % len(ms)
			m := &ms[i]
			// It uses its units at its demand.
			m.held = max(0, m.held-demands[i]*step.Seconds())
			if m.held >= 1 || now < m.next {
				continue
			}
			demand := demands[i]
			if jitter {
				demand *= 0.95 + 0.1*rng.Float64()
			}
			d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1,
				Max: int64(demand * horizon.Seconds()), Member: string(rune('a' + i)), Demand: int64(demand), Horizon: horizon})
			if err != nil {
				t.Fatal(err)
			}
			m.calls++
			m.held += float64(d.Granted)
			m.granted += d.Granted
			m.next = now + d.RetryAfter + d.Next // (one of them is 0)
			if jitter {
				m.next += time.Duration(rng.IntN(4)) * step
			}
		}
		f.Advance(step)
	}
	var total int64
	calls := 0
	for _, m := range ms {
		calls += m.calls
	}
	for i, m := range ms {
		got := float64(m.granted) / runFor.Seconds()
		total += m.granted
		t.Logf("member %d (demand %.0f/s): %.0f/s, fair %.0f/s, %d calls", i, demands[i], got, fair[i], m.calls)
		if got < 0.9*fair[i] {
			t.Errorf("member %d: %.0f/s, less than 0.9 of its fair share %.0f/s", i, got, fair[i])
		}
	}
	bound := float64(burst) + float64(rate)*runFor.Seconds()
	t.Logf("granted %d in all, %.3f of the bound %.0f; %d calls, %.4f a unit granted", total, float64(total)/bound, bound, calls, float64(calls)/float64(total))
	if float64(total) > bound || float64(total) < 0.97*bound {
		t.Errorf("granted %d in all, bound %.0f", total, bound)
	}
	if got := float64(calls) / float64(total); perUnit > 0 && got > perUnit {
		t.Errorf("%d calls for %d units granted: %.4f a unit, more than %.4f", calls, total, got, perUnit)
	}
}

// Six members flood a fixed window of 3000/s, their leases coming back at
// different speeds (the first every millisecond, the sixth every six):
// once the members are known (from the second window: in the first, the
// first to ask is alone, and its lease is as large as it asks), each gets
// at least 0.9 of its fair share, and the windows are used whole. A
// window's room comes whole when it opens: each member's part of it is
// its share of the window, whole from the start, and the others' parts
// are kept from it until the window's second half.
func TestFairShareWindowFlood(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	f := newFake(t)
	const rate, members = 3000, 6
	const step, runFor, horizon = time.Millisecond, 4 * time.Second, 1125 * time.Millisecond
	p := mustPolicy(t, "p", win(remote.FixedWindow, rate, time.Second))
	// Start on a window's edge of the fake's clock, so that the run
	// touches runFor's windows only.
	f.Advance(time.Second - time.Duration(redistest.Epoch.UnixMicro()%1e6)*time.Microsecond)
	granted := make([]int64, members)
	var all int64
	next := make([]time.Duration, members)
	for now := time.Duration(0); now < runFor; now += step {
		for i := range granted {
			if now < next[i] {
				continue
			}
			d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1,
				Max: rate, Member: string(rune('a' + i)), Demand: 1_000_000, Horizon: horizon})
			if err != nil {
				t.Fatal(err)
			}
			if now >= time.Second { // the members are known
				granted[i] += d.Granted // used at once: a flood
			}
			all += d.Granted
			next[i] = now + d.RetryAfter + d.Next + time.Duration(i+1)*step
		}
		f.Advance(step)
	}
	var total int64
	for _, g := range granted {
		total += g
	}
	bound := float64(rate) * runFor.Seconds()
	t.Logf("granted %v after the first window, %d in all: %.3f of the windows' %.0f", granted, all, float64(all)/bound, bound)
	for i, g := range granted {
		if fair := float64(total) / members; float64(g) < 0.9*fair {
			t.Errorf("member %d got %d, less than 0.9 of its fair share %.0f", i, g, fair)
		}
	}
	if float64(all) > bound || float64(all) < 0.97*bound {
		t.Errorf("granted %d in all, want between 0.97 and 1 of %.0f", all, bound)
	}
}

// Six members flood a window with requests of n = 187 units each (AllowN
// with a sixteenth of the limit), their leases coming back at different
// speeds (member i asks again i+1 ms after its answer allows, as a member
// on a busier machine does). A lease's grant comes in whole multiples of
// n, so no remainder below n waits unused until its window ends, and the
// leases take at least least of what requests of n units each, one call
// apiece, take (exact mode's way) of the same windows. Simulated time and
// a fixed order make every run the same, so least needs no room for
// chance. On a fixed window the leases take as much as exact mode does;
// on a sliding window counter they take less, and least sits just under
// what they take: its room comes as the last window's weight fades and
// goes out in the members' batches, as a bucket's does (docs/leasing.md),
// where exact mode's requests take it n at a time as it comes.
func TestLeaseGrantsWholeRequests(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	for _, c := range []struct {
		alg   remote.Algorithm
		least float64
	}{{remote.FixedWindow, 0.96}, {remote.SlidingWindowCounter, 0.95}} {
		t.Run(c.alg.String(), func(t *testing.T) {
			t.Parallel() // each on a miniredis of its own
			lease := windowFloodOfN(t, c.alg, false)
			exact := windowFloodOfN(t, c.alg, true)
			t.Logf("lease mode's calls took %d units, exact mode's %d: %.3f", lease, exact, float64(lease)/float64(exact))
			if float64(lease) < c.least*float64(exact) {
				t.Errorf("leases took %d, less than %.2f of %d", lease, c.least, exact)
			}
		})
	}
}

// windowFloodOfN runs the flood of TestLeaseGrantsWholeRequests on a fresh
// Redis: with leases (member, demand, min n, max 4n), or one call of n
// units per request (exact); it returns the units granted in all.
func windowFloodOfN(t *testing.T, alg remote.Algorithm, exact bool) int64 {
	f := newFake(t)
	const rate, members, n = 3000, 6, 187
	const step, runFor, horizon = time.Millisecond, 4 * time.Second, 1125 * time.Millisecond
	p := mustPolicy(t, "p", win(alg, rate, time.Second))
	f.Advance(time.Second - time.Duration(redistest.Epoch.UnixMicro()%1e6)*time.Microsecond)
	var total int64
	held := make([]int64, members) // granted, not used yet: used n at a time
	next := make([]time.Duration, members)
	for now := time.Duration(0); now < runFor; now += step {
		for i := range held {
			if held[i] >= n {
				held[i] -= n
				total += n
			}
			if now < next[i] || held[i] >= n {
				continue
			}
			req := remote.Request{Policy: p, Key: "k", Min: n, Max: 4 * n, Member: string(rune('a' + i)), Demand: 1_000_000, Horizon: horizon}
			if exact {
				req = remote.Request{Policy: p, Key: "k", Min: n, Max: n}
			}
			d, err := f.s.Acquire(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Granted%n != 0 {
				t.Fatalf("member %d granted %d, not a multiple of %d", i, d.Granted, n)
			}
			held[i] += d.Granted
			next[i] = now + d.RetryAfter + d.Next + time.Duration(i+1)*step
		}
		f.Advance(step)
	}
	return total
}

// A quota window that refills far slower than a horizon (50 units per 240
// hours), flooded by two members: its spare is not charged into debt, which
// no bucket would repay for days and would lock each member out for hours,
// so the members take all 50 between them.
func TestFairShareSlowWindowIsTakenWhole(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", win(remote.FixedWindow, 50, 240*time.Hour))
	var total int64
	next := make([]time.Duration, 2)
	for now := time.Duration(0); now < time.Second; now += time.Millisecond {
		for i := range next {
			if now < next[i] {
				continue
			}
			d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1, Max: 10,
				Member: string(rune('a' + i)), Demand: 1_000_000, Horizon: 1125 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			total += d.Granted
			next[i] = now + d.RetryAfter + d.Next
		}
		f.Advance(time.Millisecond)
	}
	if total != 50 {
		t.Fatalf("granted %d of the window's 50", total)
	}
}
