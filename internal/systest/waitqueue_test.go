package systest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// Exact mode's Wait without a herd: 20 goroutines wait on one key, in one
// instance, or 2 in each of 6 instances. A token bucket's Wait takes its
// units ahead of time, one call each, and sleeps until they conform (as
// x/time/rate's WaitN); the waiters of an instance queue, first come first
// served, and only the head asks Redis. At most 1.5 round trips per
// admitted unit (a herd, every waiter asking at each refill, made 7-14). Every waiter gets its turn (each admitted at
// least 0.8 of the mean), and together they take what the bucket lets
// them, within its bound.
func TestExactWaitQueues(t *testing.T) {
	srv := redistest.Start(t)
	now := redisClock(t, srv.Client(t))
	const rate, burst, runFor = 1000, 10, 2 * time.Second
	for _, c := range []struct{ instances, waiters int }{{1, 20}, {6, 2}} {
		t.Run(fmt.Sprintf("%dx%d", c.instances, c.waiters), func(t *testing.T) {
			p := policy(t, fmt.Sprintf("waitq%d", c.instances), ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
			ins := newInstances(t, c.instances, clientsTo(t, srv.Addr), ratelease.WithExact(), ratelease.WithRedisTimeout(2*time.Second))
			for _, in := range ins {
				if err := in.l.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			s := span{start: now()}
			ctx, cancel := context.WithTimeout(context.Background(), runFor)
			defer cancel()
			counts := make([]int64, c.instances*c.waiters)
			var wg sync.WaitGroup
			for g := range counts {
				in := ins[g%c.instances]
				wg.Go(func() {
					for {
						err := in.l.Wait(ctx, p, "q")
						if errors.Is(err, context.DeadlineExceeded) {
							return
						}
						if err != nil {
							in.fail(err)
							return
						}
						counts[g]++
					}
				})
			}
			wg.Wait()
			s.end = now()
			tot := sum(ins)
			for i, in := range ins {
				in.check(t, fmt.Sprintf("instance %d", i))
			}
			var admitted int64
			for _, n := range counts {
				admitted += n
			}
			perAdmitted := ratio(float64(tot.trips), float64(admitted))
			mean := float64(admitted) / float64(len(counts))
			t.Logf("admitted %d (per waiter %v) for %d round trips: %.3f per admitted; bound %.0f", admitted, counts, tot.trips, perAdmitted, bucket(rate, burst)(s))
			atMost(t, "exact Wait", float64(admitted), bucket(rate, burst)(s))
			atLeast(t, "exact Wait", float64(admitted), bucket(rate, burst)(s), 0.85)
			if perAdmitted > 1.5 {
				t.Errorf("%.3f round trips per admitted unit, want at most 1.5", perAdmitted)
			}
			if least := float64(slices.Min(counts)); least < 0.8*mean {
				t.Errorf("a waiter got %.0f, less than 0.8 of the mean %.1f: %v", least, mean, counts)
			}
		})
	}
}

// A waiter queued behind others leaves the queue when its context ends,
// and the turn still reaches those behind it; Close wakes every waiter,
// the queued ones too, with ErrClosed.
func TestExactWaitQueueEdges(t *testing.T) {
	srv := redistest.Start(t)
	p := policy(t, "waitq-edges", ratelease.Limit{Rate: 1, Period: time.Hour})
	in := newInstances(t, 1, clientsTo(t, srv.Addr), ratelease.WithExact(), ratelease.WithRedisTimeout(2*time.Second))[0]
	ctx := context.Background()
	if err := in.l.Wait(ctx, p, "k"); err != nil { // the hour's unit
		t.Fatal(err)
	}
	// The head sleeps for an hour; a second waiter queues behind it and
	// gives up; a third queues behind both.
	head := make(chan error, 1)
	go func() { head <- in.l.Wait(ctx, p, "k") }()
	short, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	time.Sleep(50 * time.Millisecond)
	go func() { second <- in.l.Wait(short, p, "k") }()
	third := make(chan error, 1)
	time.Sleep(50 * time.Millisecond)
	go func() { third <- in.l.Wait(ctx, p, "k") }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter whose context ended: %v, want context.Canceled", err)
	}
	if err := in.l.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"head": head, "third": third} {
		select {
		case err := <-ch:
			if !errors.Is(err, ratelease.ErrClosed) {
				t.Errorf("%s waiter: %v, want ErrClosed", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s waiter not woken by Close", name)
		}
	}
}
