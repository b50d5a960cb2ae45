package ratelease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
)

// settleModes are the modes Settle is tested in: exact, and lease mode
// with leases of 8.
var settleModes = []struct {
	name string
	opts []ratelease.Option
}{
	{"exact", nil},
	{"lease", []ratelease.Option{ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8})}},
}

// An estimate admitted at 00:00:59 of a 10-a-minute fixed window (in
// lease mode, from units held) and settled at 00:01:01, its work having used nothing, gives the new minute
// nothing: with the new minute used up, the next request is still denied.
// Refund, which names no admission, gives the units to the new minute,
// and 4 more are admitted in it.
func TestSettleGivesBackOnlyToTheAdmittingWindow(t *testing.T) {
	for _, m := range settleModes {
		t.Run(m.name, func(t *testing.T) {
			for _, settle := range []string{"Settle", "Refund"} {
				e := newEnv(t, m.opts...)
				ctx := context.Background()
				p := policy(t, "w", ratelease.Limit{Rate: 10, Period: time.Minute, Algorithm: ratelease.FixedWindow})
				e.advance(time.Minute - time.Duration(e.mr.Now().UnixNano())%time.Minute - time.Second)
				// In lease mode (leases of 8, set by hand: the first use
				// leases), the estimate is taken from the units held.
				for range 2 {
					if _, err := e.l.Allow(ctx, p, "k"); err != nil {
						t.Fatal(err)
					}
				}
				est, err := e.l.AllowN(ctx, p, "k", 4)
				if err != nil || !est.Allowed || m.name == "lease" && est.Source != ratelease.SourceLocal {
					t.Fatalf("the estimate: %+v, %v", est, err)
				}
				e.advance(2 * time.Second) // the next minute
				admitted := 0
				for i := 0; i < 20; i++ {
					if res, err := e.l.Allow(ctx, p, "k"); err != nil {
						t.Fatal(err)
					} else if res.Allowed {
						admitted++
					}
				}
				if admitted != 10 {
					t.Fatalf("the new minute admitted %d, want 10", admitted)
				}
				if settle == "Settle" {
					if _, err := e.l.Settle(ctx, p, "k", est, 0); err != nil {
						t.Fatal(err)
					}
				} else if err := e.l.Refund(ctx, p, "k", 4); err != nil {
					t.Fatal(err)
				}
				after := 0
				for i := 0; i < 10; i++ {
					if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed {
						after++
					}
				}
				if want := map[string]int{"Settle": 0, "Refund": 4}[settle]; after != want {
					t.Fatalf("after %s of the last minute's 4: %d admitted in the new minute, want %d", settle, after, want)
				}
			}
		})
	}
}

// Settled within its window, an admission gives back what its work did
// not use; a work that cost more is charged the excess, now, as Charge
// charges it; a settlement that matches makes no call.
func TestSettleWithinTheWindow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "w", ratelease.Limit{Rate: 10, Period: time.Hour, Algorithm: ratelease.FixedWindow})
	est, err := e.l.AllowN(ctx, p, "k", 4)
	if err != nil || !est.Allowed {
		t.Fatalf("the estimate: %+v, %v", est, err)
	}
	if res, err := e.l.Settle(ctx, p, "k", est, 1); err != nil || res != (ratelease.Result{}) {
		t.Fatalf("Settle(4 admitted, 1 used): %+v, %v", res, err)
	}
	if res, err := e.l.Peek(ctx, p, "k"); err != nil || res.Remaining != 9 {
		t.Fatalf("after the settlement: %+v, %v; want 9 left (1 used)", res, err)
	}
	est, _ = e.l.AllowN(ctx, p, "k", 3) // 4 used
	res, err := e.l.Settle(ctx, p, "k", est, 10)
	if err != nil || !res.Allowed || res.Granted != 7 || res.Debt != 1 {
		t.Fatalf("Settle(3 admitted, 10 used): %+v, %v; want 7 charged, a debt of 1", res, err)
	}
	if res, err := e.l.Settle(ctx, p, "k", res, 7); err != nil || res != (ratelease.Result{}) {
		t.Fatalf("Settle of a charge, as charged: %+v, %v", res, err)
	}
	for _, used := range []int{-1, ratelease.MaxCharge + 1} {
		if _, err := e.l.Settle(ctx, p, "k", est, used); !errors.Is(err, ratelease.ErrInvalidN) {
			t.Errorf("Settle(used %d): %v, want ErrInvalidN", used, err)
		}
	}
}

// A token bucket takes back only what could not have overflowed it since
// the admission: 4 admitted of 10, the bucket full again 30 s later and
// then emptied, a settlement of nothing used gives nothing back (Refund
// gives the 4 back to the emptied bucket).
func TestSettleTokenBucketAfterItRefilled(t *testing.T) {
	for _, settle := range []string{"Settle", "Refund"} {
		e := newEnv(t)
		ctx := context.Background()
		p := policy(t, "b", ratelease.PerMinute(10))
		est, err := e.l.AllowN(ctx, p, "k", 4)
		if err != nil || !est.Allowed {
			t.Fatalf("the estimate: %+v, %v", est, err)
		}
		e.advance(30 * time.Second) // full again
		if res, err := e.l.AllowN(ctx, p, "k", 10); err != nil || !res.Allowed {
			t.Fatalf("the full bucket: %+v, %v", res, err)
		}
		if settle == "Settle" {
			if _, err := e.l.Settle(ctx, p, "k", est, 0); err != nil {
				t.Fatal(err)
			}
		} else if err := e.l.Refund(ctx, p, "k", 4); err != nil {
			t.Fatal(err)
		}
		res, err := e.l.Peek(ctx, p, "k")
		if want := map[string]int{"Settle": 0, "Refund": 4}[settle]; err != nil || res.Remaining != want {
			t.Fatalf("after %s: %+v, %v; want %d left", settle, res, err, want)
		}
	}
}

// Settled long after, in a later window (the next one or the one after,
// and in its last hour too, where a calendar window's call names the
// window after it), an admission gives that window nothing: its units
// were another window's. Calendar days, weeks and months in zones with
// DST, a 45-minute offset and a skipped day, from random moments, in both
// modes; Refund, which names no admission, still gives them to the window
// it is called in.
func TestSettleLongAfterGivesNothingToALaterWindow(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Asia/Kathmandu", "Pacific/Apia", "Australia/Lord_Howe"}
	rng := rand.New(rand.NewPCG(7, 41))
	for _, m := range settleModes {
		for _, zone := range zones {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			kinds := []struct {
				name  string
				limit ratelease.Limit
				next  func(time.Time) time.Time // the start of the window after u's
			}{
				{"day", ratelease.PerCalendarDay(10, loc), func(u time.Time) time.Time {
					y, mo, d := u.Date()
					return time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
				}},
				{"week", ratelease.PerCalendarWeek(10, loc, time.Monday), func(u time.Time) time.Time {
					y, mo, d := u.Date()
					return time.Date(y, mo, d+(8-int(u.Weekday()))%7+map[bool]int{true: 7}[u.Weekday() == time.Monday], 0, 0, 0, 0, loc)
				}},
				{"month", ratelease.PerCalendarMonth(10, loc), func(u time.Time) time.Time {
					y, mo, _ := u.Date()
					return time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
				}},
			}
			for _, k := range kinds {
				t.Run(m.name+"/"+zone+"/"+k.name, func(t *testing.T) {
					start := time.Date(2011, 12, 25, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
					e := newEnvAt(t, start, m.opts...)
					ctx := context.Background()
					p := policy(t, "q", k.limit)
					est, err := e.l.AllowN(ctx, p, "k", 4)
					if err != nil || !est.Allowed {
						t.Fatalf("the estimate at %v: %+v, %v", start.In(loc), est, err)
					}
					// Into a later window: the next or the one after, its
					// last hour half the time.
					w := k.next(start.In(loc))
					if rng.IntN(2) == 0 {
						w = k.next(w)
					}
					end := k.next(w)
					u := w.Add(time.Duration(rng.Int64N(int64(end.Sub(w) - time.Minute))))
					if rng.IntN(2) == 0 {
						u = end.Add(-time.Duration(1 + rng.Int64N(int64(time.Hour))))
					}
					e.at(t, u)
					for {
						res, err := e.l.AllowN(ctx, p, "k", 1)
						if err != nil {
							t.Fatal(err)
						}
						if !res.Allowed {
							break
						}
					}
					if _, err := e.l.Settle(ctx, p, "k", est, 0); err != nil {
						t.Fatal(err)
					}
					if res, err := e.l.Allow(ctx, p, "k"); err != nil || res.Allowed {
						t.Fatalf("admitted at %v, settled at %v (window %v to %v): the later window got its units back: %+v, %v",
							start.In(loc), u.In(loc), w, end, res, err)
					}
					if err := e.l.Refund(ctx, p, "k", 1); err != nil {
						t.Fatal(err)
					}
					if res, err := e.l.Allow(ctx, p, "k"); err != nil || !res.Allowed {
						t.Fatalf("after a Refund at %v: %+v, %v", u.In(loc), res, err)
					}
				})
			}
		}
	}
}

// An AllowAtMost that takes units held from a window's lease and asks
// Redis for the rest, which Redis places in the next window, is dated
// by its local units: settled unused, it gives the next window nothing
// of the units the earlier one admitted (at most the ones the next
// window admitted, here none).
func TestSettleAllowAtMostAcrossAWindowsEnd(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 6, 1, 23, 59, 0, 0, time.UTC)
	e := newEnvAt(t, start, ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8, TTL: 2 * time.Minute, LowWater: 0.01}))
	p := policy(t, "q", ratelease.PerCalendarDay(10, nil))
	if r, err := e.l.Allow(ctx, p, "k"); err != nil || !r.Allowed { // leases 8 of day 1: 7 held
		t.Fatal(r, err)
	}
	e.mr.Advance(90 * time.Second)           // Redis: 00:00:30 of day 2
	e.clock.Set(start.Add(59 * time.Second)) // the host: 23:59:59 of day 1
	res, err := e.l.AllowAtMost(ctx, p, "k", 10)
	if err != nil || !res.Allowed || res.Granted != 10 {
		t.Fatal(res, err)
	}
	e.clock.Set(e.mr.Now())
	used := 3 // day 2's units of res
	for i := 0; i < 20; i++ {
		if r, _ := e.l.Allow(ctx, p, "k"); r.Allowed {
			used++
		}
	}
	if _, err := e.l.Settle(ctx, p, "k", res, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if r, _ := e.l.Allow(ctx, p, "k"); r.Allowed {
			used++
		}
	}
	if used > 10 {
		t.Fatalf("day 2 admitted %d units of work; want at most its 10", used)
	}
}

// A Charge past a sliding window log's rate takes its rate of the log (a
// member a unit); settled with a cost at or above that rate, it gives the
// log nothing back, where it once gave back every member and admitted a
// whole rate more at once. Below the rate, what the work left goes back.
func TestSettleChargePastALogsRate(t *testing.T) {
	for _, c := range []struct {
		used, want int // the work's cost; admitted right after settling
	}{{40, 0}, {10, 0}, {7, 3}, {0, 10}} {
		e := newEnv(t)
		ctx := context.Background()
		p := policy(t, "log", ratelease.Limit{Rate: 10, Period: time.Second, Algorithm: ratelease.SlidingWindowLog})
		res, err := e.l.Charge(ctx, p, "k", 50)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.l.Settle(ctx, p, "k", res, c.used); err != nil {
			t.Fatal(err)
		}
		got := 0
		for i := 0; i < 20; i++ {
			if r, err := e.l.Allow(ctx, p, "k"); err != nil {
				t.Fatal(err)
			} else if r.Allowed {
				got++
			}
		}
		if got != c.want {
			t.Errorf("a charge of 50 settled at %d: %d admitted right after, want %d", c.used, got, c.want)
		}
	}
}
