package ratelease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
)

// Close wakes every Wait in progress: each returns ErrClosed at once, not
// after the RetryAfter it sleeps for (an hour here), in exact and lease
// mode, for a policy that leases and one that does not (a leaky bucket
// queues instead). goleak (TestMain) checks that no goroutine is left.
func TestCloseWakesWaits(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []ratelease.Option
	}{
		{"exact", nil},
		{"lease", []ratelease.Option{ratelease.WithLease(ratelease.LeaseConfig{})}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.opts...)
			ctx := context.Background()
			hour := policy(t, "hour", ratelease.PerHour(1))
			leaky := policy(t, "leaky", ratelease.Limit{Rate: 1, Period: time.Hour, Burst: 3, Algorithm: ratelease.LeakyBucket})
			for _, p := range []*ratelease.Policy{hour, leaky} {
				if err := e.l.Wait(ctx, p, "k"); err != nil { // the key's hour is used
					t.Fatal(err)
				}
			}
			done := make(chan error, 2)
			go func() { done <- e.l.Wait(ctx, hour, "k") }()
			go func() { done <- e.l.Wait(ctx, leaky, "k") }() // queued an hour out
			e.waitStarted(t, 2)
			start := time.Now()
			if err := e.l.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				select {
				case err := <-done:
					if !errors.Is(err, ratelease.ErrClosed) {
						t.Fatalf("Wait woken by Close: %v, want ErrClosed", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("Close did not wake a Wait")
				}
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the Waits returned %v after Close", d)
			}
			if err := e.l.Wait(ctx, hour, "k"); !errors.Is(err, ratelease.ErrClosed) {
				t.Fatalf("Wait after Close: %v", err)
			}
			if e.clock.Timers() != 0 {
				t.Fatalf("%d timers left behind", e.clock.Timers())
			}
		})
	}
}
