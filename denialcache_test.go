package ratelease_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

// twoModes is a leasing Limiter (default LeaseConfig, TTL 1.5s) and an
// exact one (another instance, no member of the key) on one miniredis,
// the leasing Limiter's clock moving with Redis's TIME. The tests below
// hold DESIGN.md's "Over-limit keys are cached locally for their
// RetryAfter or the lease TTL, whichever is shorter" and leasing.md's "nor
// past the end of a window of the key's" (a denial backoff that broke
// both was tried, and dropped).
type twoModes struct {
	mr           *redistest.Mini
	clk          *clock.Manual
	lease, exact *ratelease.Limiter
}

func newTwoModes(t *testing.T) *twoModes {
	t.Helper()
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	lease, err := ratelease.New(mr.Client(t), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Close() })
	exact, err := ratelease.New(mr.Client(t), ratelease.WithExact(), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exact.Close() })
	return &twoModes{mr: mr, clk: clk, lease: lease, exact: exact}
}

// sleeping returns once a timer more than base waits on the leasing
// Limiter's clock (a Wait sleeps), or done has a value, or a second of
// real time passed.
func (e *twoModes) sleeping(base int, done chan error) {
	for deadline := time.Now().Add(time.Second); e.clk.Timers() <= base && len(done) == 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
}

func (e *twoModes) advance(d time.Duration) {
	e.mr.Advance(d)
	e.clk.Set(e.mr.Now())
}

// leasing.md item 9: a cached denial holds "never longer than TTL nor past
// the end of a window of the key's ... a new window is shared anew".
// A fixed window of 4 a second; an exact Limiter (another instance) takes
// each window's 4 units at its start for 3 windows, so that the leasing
// instance, asking every 250ms, is denied in a row; then the other
// instance stops. From the first window nobody drains, the leasing
// instance must be admitted each of its 4 requests, as exact mode would
// admit them (nobody else asks).
func TestCachedDenialEndsWithItsWindow(t *testing.T) {
	e := newTwoModes(t)
	ctx := context.Background()
	p := policy(t, "bw", ratelease.Limit{Algorithm: ratelease.FixedWindow, Rate: 4, Period: time.Second})
	const step = 10 * time.Millisecond
	const drained = 3 // windows the other instance takes
	perWindow := make([]int, 7)
	for ms := 0; ms < 7000; ms += int(step / time.Millisecond) {
		w, off := ms/1000, ms%1000
		if w < drained && off == 10 {
			if _, err := e.exact.AllowAtMost(ctx, p, "k", 4); err != nil {
				t.Fatal(err)
			}
		}
		if off%250 == 50 {
			res, err := e.lease.Allow(ctx, p, "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				perWindow[w]++
			} else if w >= drained {
				t.Logf("window %d +%dms: denied (source %v, RetryAfter %v, FairShare %v, Remaining %d)",
					w, off, res.Source, res.RetryAfter, res.FairShare, res.Remaining)
			}
		}
		e.advance(step)
	}
	t.Logf("admitted per window: %v", perWindow)
	for w := drained; w < len(perWindow); w++ {
		if perWindow[w] != 4 {
			t.Errorf("window %d, nobody else asking: %d of 4 admitted; a cached denial held past the end of the window it was made in", w, perWindow[w])
		}
	}
}

// DESIGN.md: "Over-limit keys are cached locally for their RetryAfter or
// the lease TTL, whichever is shorter", and Wait "sleeps ... for each
// denial's RetryAfter". A token bucket of 10 a second (burst 1) that
// another instance empties every 10ms while this one asks every 200ms:
// denied in a row. The other instance stops; a Wait then should return by
// the next unit (100ms), as exact mode's would, not sleep out a denial
// cached past its RetryAfter.
func TestWaitAfterDeniedInARowReturnsByTheNextUnit(t *testing.T) {
	e := newTwoModes(t)
	ctx := context.Background()
	p := policy(t, "bb", ratelease.Limit{Rate: 10, Period: time.Second, Burst: 1})
	const step = 10 * time.Millisecond
	denials := 0
	for ms := 0; ms < 3000; ms += 10 {
		if _, err := e.exact.AllowAtMost(ctx, p, "k", 1); err != nil {
			t.Fatal(err)
		}
		if ms%200 == 50 {
			res, err := e.lease.Allow(ctx, p, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed {
				denials++
			}
		}
		e.advance(step)
	}
	if denials == 0 {
		t.Fatal("the other instance did not keep the key empty")
	}
	// The other instance stops. A Wait, its clock driven 1ms at a time
	// once it sleeps on it.
	base := e.clk.Timers()
	done := make(chan error, 1)
	go func() { done <- e.lease.Wait(ctx, p, "k") }()
	var waited time.Duration
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Wait returned after %v of simulated time", waited)
			if waited > 150*time.Millisecond {
				t.Errorf("Wait slept %v on a key that made a unit every 100ms and nobody else took: a denial cached past its RetryAfter", waited)
			}
			return
		default:
		}
		if waited > 5*time.Second {
			t.Fatal("Wait did not return in 5s of simulated time")
		}
		e.sleeping(base, done)
		e.advance(time.Millisecond)
		waited += time.Millisecond
	}
}

// Result.FairShare "reports a denial in lease mode by this instance's
// fair share of the key while the limits had room: other instances hold
// or are owed it". A key that only this leasing instance and an exact one
// (which is no member) use has no fair share to hold anybody to: no
// denial may say FairShare. A fixed window of 4 a second that the exact
// instance uses up at each window's start; the leasing one asks every
// 250ms.
func TestDeniedInARowIsNoFairShare(t *testing.T) {
	e := newTwoModes(t)
	ctx := context.Background()
	p := policy(t, "bf", ratelease.Limit{Algorithm: ratelease.FixedWindow, Rate: 4, Period: time.Second})
	for ms := 0; ms < 5000; ms += 10 {
		if ms%1000 == 10 {
			if _, err := e.exact.AllowAtMost(ctx, p, "k", 4); err != nil {
				t.Fatal(err)
			}
		}
		if ms%250 == 50 {
			res, err := e.lease.Allow(ctx, p, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed && res.FairShare {
				t.Fatalf("at %dms: denied with FairShare (source %v, RetryAfter %v) on a key with no other member", ms, res.Source, res.RetryAfter)
			}
		}
		e.advance(10 * time.Millisecond)
	}
}

// A Wait whose context has a deadline gives up at once when the deadline
// comes before the denial's RetryAfter. A key denied in a row (as above),
// then left alone: its next unit is at most 100ms away, and a Wait with
// 400ms of deadline must get it, as exact mode's would, not give up at
// once because the denial was cached past its RetryAfter.
func TestWaitWithDeadlineAfterDeniedInARow(t *testing.T) {
	e := newTwoModes(t)
	ctx := context.Background()
	p := policy(t, "bd", ratelease.Limit{Rate: 10, Period: time.Second, Burst: 1})
	for ms := 0; ms < 3000; ms += 10 {
		if _, err := e.exact.AllowAtMost(ctx, p, "k", 1); err != nil {
			t.Fatal(err)
		}
		if ms%200 == 50 {
			if _, err := e.lease.Allow(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
		}
		e.advance(10 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	base := e.clk.Timers()
	done := make(chan error, 1)
	go func() { done <- e.lease.Wait(wctx, p, "k") }()
	for waited := time.Duration(0); ; waited += time.Millisecond {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait with 400ms of deadline, the next unit at most 100ms away and nobody else asking: %v after %v simulated", err, waited)
			}
			return
		default:
		}
		if waited > 2*time.Second {
			t.Fatal("Wait did not return")
		}
		e.sleeping(base, done)
		if waited < 200*time.Millisecond {
			e.advance(time.Millisecond)
		}
	}
}

// admittedBy runs len(perSec) instances (leasing, or exact) on one key of lim on
// simulated time (5ms steps, 20s), each asking at random at perSec
// requests a second, the same requests in both modes, and returns what
// they admitted together.
func admittedBy(t *testing.T, lease bool, lim ratelease.Limit, perSec []float64) int {
	t.Helper()
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	var ls []*ratelease.Limiter
	for range perSec {
		opts := []ratelease.Option{ratelease.WithClock(clk), ratelease.WithRedisTimeout(5 * time.Second)}
		if !lease {
			opts = append(opts, ratelease.WithExact())
		}
		l, err := ratelease.New(mr.Client(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	p := policy(t, "acc", lim)
	r := rand.New(rand.NewPCG(1, 2))
	const step = 5 * time.Millisecond
	admitted := 0
	for range int(20 * time.Second / step) {
		for i, l := range ls {
			if r.Float64() < perSec[i]*step.Seconds() {
				res, err := l.Allow(context.Background(), p, "k")
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
			}
		}
		mr.Advance(step)
		clk.Set(mr.Now())
	}
	return admitted
}

// A lone instance on a key it alone keeps over its limit (denied in a row
// by its own use, small leases of the empty key going as exact decisions)
// gets back to leasing and admits what exact mode admits.
func TestLoneInstanceAdmitsAsExact(t *testing.T) {
	for _, c := range []struct {
		lim    ratelease.Limit
		perSec []float64
	}{
		{ratelease.PerSecond(3), []float64{5}},
		{ratelease.Limit{Rate: 3, Period: time.Second, Burst: 1}, []float64{5}},
		{ratelease.Limit{Rate: 3, Period: time.Second, Algorithm: ratelease.FixedWindow}, []float64{5}},
		{ratelease.Limit{Rate: 3, Period: time.Second, Algorithm: ratelease.SlidingWindowCounter}, []float64{5}},
		{ratelease.Limit{Rate: 10, Period: time.Second, Burst: 1}, []float64{30}},
	} {
		exact, lease := admittedBy(t, false, c.lim, c.perSec), admittedBy(t, true, c.lim, c.perSec)
		if float64(lease) < 0.97*float64(exact) {
			t.Errorf("%v %d/%v burst %d, one instance at %v/s: lease mode admitted %d, exact mode %d",
				c.lim.Algorithm, c.lim.Rate, c.lim.Period, c.lim.Burst, c.perSec, lease, exact)
		}
	}
}
