package remote

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// Charge on a real Redis: each algorithm charged past its limit owes the
// rest, exactly, and denies until it has freed it; charged within its
// limit it owes nothing. (Hours: no window ends during the test.)
func TestChargeOnRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s := NewStore(c, "charge")
	ctx := context.Background()
	for a := Algorithm(0); a < numAlgorithms; a++ {
		t.Run(a.String(), func(t *testing.T) {
			l := Limit{Algorithm: a, Rate: 10, Period: time.Hour, Burst: 10}
			if a == CalendarWindow {
				l.Calendar = Calendar{Unit: Month, Location: time.UTC}
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
