package remote

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
)

// Charge on a real Redis: each algorithm charged past its limit owes the
// rest, exactly, and denies until it has freed it; charged within its
// limit it owes nothing. (Hours: no window ends during the test.)
func TestChargeOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := NewStore(c, "charge")
	ctx := context.Background()
	for a := Algorithm(0); a < Pool; a++ { // (a pool's costs go to its global key)
		t.Run(a.String(), func(t *testing.T) {
			l := Limit{Algorithm: a, Rate: 10, Period: time.Hour, Burst: 10}
			if a == CalendarWindow {
				l.Calendar = Calendar{Unit: CalendarMonth, Location: time.UTC}
				l.Period = l.Calendar.Nominal()
			}
			p, err := NewPolicy("p", []Limit{l})
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Charge(ctx, p, "within", 4)
			if err != nil || d.Granted != 4 || d.Debt != 0 {
				t.Fatalf("Charge(4) of 10: %+v, %v", d, err)
			}
			// A leaky bucket admits into an empty queue only: 4 slots of
			// 6 minutes each to drain.
			if a == LeakyBucket && (d.Remaining != 0 || d.RetryAfter != 24*time.Minute) ||
				a != LeakyBucket && (d.Remaining != 6 || d.RetryAfter != 0) {
				t.Fatalf("Charge(4) of 10: %+v", d)
			}
			// 3 admitted, then 9 more: 12 of 10 (a log takes 9, its rate).
			if got, err := s.Acquire(ctx, Request{Policy: p, Key: "past", Min: 3, Max: 3}); err != nil || got.Granted != 3 {
				t.Fatalf("Acquire(3): %+v, %v", got, err)
			}
			d, err = s.Charge(ctx, p, "past", 9)
			if err != nil || d.Granted != 9 || d.Debt != 2 || d.RetryAfter <= 0 || d.Remaining != 0 {
				t.Fatalf("Charge(9) after 3 of 10: %+v, %v; want a debt of 2", d, err)
			}
			if got, err := s.Acquire(ctx, Request{Policy: p, Key: "past", Min: 1, Max: 1}); err != nil || got.Granted != 0 {
				t.Fatalf("Acquire(1) in debt: %+v, %v; want denied", got, err)
			}
		})
	}
}

// ChargeFit on a real Redis whose script cache was flushed (a restarted
// server): each limit of a policy is charged what it has room for, up to
// its own capacity, for every algorithm beside a 4-unit token bucket, and
// none goes into debt.
func TestChargeFitOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := NewStore(c, "fit")
	ctx := context.Background()
	var rs []Request
	for a := Algorithm(0); a < Pool; a++ { // (a pool's costs go to its global key)
		l := Limit{Algorithm: a, Rate: 10, Period: time.Hour, Burst: 10}
		if a == CalendarWindow {
			l.Calendar = Calendar{Unit: CalendarMonth, Location: time.UTC}
			l.Period = l.Calendar.Nominal()
		}
		p, err := NewPolicy(fmt.Sprint("fit", int(a)), []Limit{{Algorithm: TokenBucket, Rate: 4, Period: 2 * time.Hour, Burst: 4}, l})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil {
			t.Fatal(err)
		}
		rs = append(rs, Request{Policy: p, Key: "k", Max: 20})
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ds, errs := s.ChargeFit(ctx, rs)
	for i, r := range rs {
		a := Algorithm(i)
		// 1 acquired, then 20 charged: the bucket takes its 3 left, the
		// other limit its 9 (a leaky bucket admits into an empty queue
		// only: its 1 is still queued, so it takes none).
		want := int64(9)
		if a == LeakyBucket {
			want = 3
		}
		if errs[i] != nil || ds[i].Granted != want || ds[i].Debt != 0 {
			t.Errorf("%v: ChargeFit(20) after 1: %+v, %v; want %d taken, no debt", a, ds[i], errs[i], want)
		}
		if d, err := s.Peek(ctx, r.Policy, "k"); err != nil || d.Granted != 0 {
			t.Errorf("%v: after ChargeFit: %+v, %v; want nothing left", a, d, err)
		}
	}
}
