package ratelease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// An estimate admitted, then settled: the work cost 8 units where 3 were
// admitted, so 5 more are charged past a limit of 4 per second (burst 4),
// at fixed times. Each algorithm owes and pays off its debt its own way.
func TestChargePerAlgorithm(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		alg         ratelease.Algorithm
		debt        int
		retry, full time.Duration // after the charge: until one unit fits, until full
	}{
		// 8 units in a bucket of 4 refilling 4/s: one fits once 5 have
		// refilled (1.25 s), all of it at 2 s.
		{ratelease.TokenBucket, 4, 1250 * ms, 2000 * ms},
		// 8 counted in a window of 4: forgiven when it ends.
		{ratelease.FixedWindow, 4, 1000 * ms, 1000 * ms},
		// 8 counted now weigh on the next window: one fits there once
		// their weight is 3 (8·(1 - e) <= 3: e = 0.625).
		{ratelease.SlidingWindowCounter, 4, 1625 * ms, 2000 * ms},
		// A log takes at most its rate a call: 3 + 4 entries, 3 owed; the
		// fourth oldest leaves at 1 s.
		{ratelease.SlidingWindowLog, 3, 1000 * ms, 1000 * ms},
		// A queue of 8 slots drains at 4/s; one more is admitted into an
		// empty queue.
		{ratelease.LeakyBucket, 4, 2000 * ms, 2000 * ms},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 4, Period: time.Second, Algorithm: c.alg})
			if res, err := e.l.AllowN(ctx, p, "k", 3); err != nil || !res.Allowed {
				t.Fatalf("the estimate: %+v, %v", res, err)
			}
			res, err := e.l.Charge(ctx, p, "k", 5)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Allowed || res.Granted != 5 || res.Debt != c.debt || res.Remaining != 0 ||
				res.RetryAfter != c.retry || res.ResetAfter != c.full || res.Source != ratelease.SourceRemote {
				t.Fatalf("Charge(5): %+v; want 5 granted, debt %d, remaining 0, retry %v, reset %v",
					res, c.debt, c.retry, c.full)
			}
			// In debt: denied until one unit fits, then admitted.
			e.advance(c.retry - ms)
			if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed {
				t.Fatalf("%v after the charge, before its RetryAfter: admitted %+v", c.retry-ms, res)
			}
			e.advance(ms)
			if res, err := e.l.Allow(ctx, p, "k"); err != nil || !res.Allowed {
				t.Fatalf("at the charge's RetryAfter: %+v, %v", res, err)
			}
		})
	}
}

// A charge that leaves room owes nothing, and says what is left; a charge
// within the estimate's settlement is a Refund instead (no debt).
func TestChargeWithinTheLimit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.Limit{Rate: 10, Period: time.Second})
	res, err := e.l.Charge(ctx, p, "k", 4)
	if err != nil || res.Debt != 0 || res.Remaining != 6 || res.RetryAfter != 0 || res.Granted != 4 {
		t.Fatalf("Charge(4) of 10: %+v, %v; want 6 remaining, no debt", res, err)
	}
	// Two limits: the one where a unit fits last is named, with its
	// debt: 10/s owes 15 and frees one in 1.6 s, 20/min owes 5 and
	// frees one in 18 s.
	p2 := policy(t, "p2", ratelease.Limit{Rate: 10, Period: time.Second}, ratelease.Limit{Rate: 20, Period: time.Minute})
	res, err = e.l.Charge(ctx, p2, "k", 25)
	if err != nil || res.Debt != 5 || res.Limit != p2.Limits()[1] || res.RetryAfter != 18*time.Second {
		t.Fatalf("Charge(25) of 10/s and 20/min: %+v, %v; want the minute's debt of 5, one unit in 18s", res, err)
	}
}

// Bad input to Charge is an error that names it, and charges nothing.
func TestChargeBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerSecond(10))
	for _, n := range []int{0, -1, ratelease.MaxCharge + 1} {
		if _, err := e.l.Charge(ctx, p, "k", n); !errors.Is(err, ratelease.ErrInvalidN) {
			t.Errorf("Charge(%d): %v, want ErrInvalidN", n, err)
		}
	}
	if _, err := e.l.Charge(ctx, p, "", 1); !errors.Is(err, ratelease.ErrInvalidKey) {
		t.Errorf("Charge with no key: %v, want ErrInvalidKey", err)
	}
	if res, _ := e.l.AllowN(ctx, p, "k", 10); !res.Allowed {
		t.Fatalf("a refused Charge charged: %+v", res)
	}
	// The most it takes, past a limit far smaller: a bucket's debt stops
	// at 2^53 - 1 in units of a period (1 s: 10^6 µs), less its capacity
	// of 10, rounded up.
	res, err := e.l.Charge(ctx, p, "big", ratelease.MaxCharge)
	if want := ((1 << 53) - 1 - 10*1_000_000 + 999_999) / 1_000_000; err != nil || res.Debt != want {
		t.Fatalf("Charge(MaxCharge): %+v, %v; want a debt of %d", res, err, want)
	}
	if res, _ := e.l.Allow(ctx, p, "big"); res.Allowed {
		t.Fatal("admitted in a debt of MaxCharge")
	}
}

// In lease mode a charge goes to Redis at once: the units this instance
// holds stay usable (they were charged when leased), and the next lease,
// this instance's or another's, meets the debt.
func TestChargeInLeaseMode(t *testing.T) {
	mr := redistest.StartMini(t)
	c := mr.Client(t)
	l := leased(t, c, ratelease.LeaseConfig{Min: 5, Max: 5})
	defer l.Close()
	p := policy(t, "p", ratelease.PerHour(20))
	ctx := context.Background()
	if res, _ := l.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatal(res) // leases 5, uses 1
	}
	res, err := l.Charge(ctx, p, "k", 30)
	// Redis: 5 leased + 30 = 35 of 20: 15 owed.
	if err != nil || res.Debt != 15 || res.Source != ratelease.SourceRemote {
		t.Fatalf("Charge(30): %+v, %v; want a debt of 15", res, err)
	}
	for i := 0; i < 4; i++ {
		if res, _ := l.Allow(ctx, p, "k"); !res.Allowed || res.Source != ratelease.SourceLocal {
			t.Fatalf("held unit %d: %+v, want it used", i, res)
		}
	}
	if res, _ := l.Allow(ctx, p, "k"); res.Allowed {
		t.Fatalf("past the held units, in debt: %+v", res)
	}
	exact, err := ratelease.New(c, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	if res, _ := exact.Allow(ctx, p, "k"); res.Allowed {
		t.Fatalf("another instance, in debt: %+v", res)
	}
}

// When Redis cannot take a charge, the error says so, whatever the
// failure mode: nothing is kept to charge later.
func TestChargeWhileRedisIsDown(t *testing.T) {
	for _, mode := range []ratelease.FailureMode{ratelease.FailLocal, ratelease.FailOpen, ratelease.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, ratelease.WithFailureMode(mode), ratelease.WithRedisTimeout(200*time.Millisecond))
			p := policy(t, "p", ratelease.PerSecond(10))
			e.mr.Close()
			if _, err := e.l.Charge(context.Background(), p, "k", 5); !errors.Is(err, ratelease.ErrUnavailable) {
				t.Fatalf("Charge with Redis down: %v, want ErrUnavailable", err)
			}
		})
	}
}
