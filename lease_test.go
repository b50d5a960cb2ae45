package ratelease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

func leased(t *testing.T, c redis.UniversalClient, lc ratelease.LeaseConfig) *ratelease.Limiter {
	t.Helper()
	l, err := ratelease.New(c, ratelease.WithLease(lc), ratelease.WithRedisTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// One lease serves many requests from memory; units unused at Close go back
// to Redis.
func TestLeaseServesLocallyAndRefundsOnClose(t *testing.T) {
	mr := redistest.StartMini(t)
	c := mr.Client(t)
	l := leased(t, c, ratelease.LeaseConfig{Min: 50, Max: 50})
	p := policy(t, "p", ratelease.PerHour(100))
	ctx := context.Background()
	sources := map[ratelease.Source]int{}
	for i := 0; i < 30; i++ {
		res, err := l.Allow(ctx, p, "k")
		if err != nil || !res.Allowed {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
		sources[res.Source]++
	}
	if sources[ratelease.Remote] != 1 || sources[ratelease.Local] != 29 {
		t.Fatalf("sources %v, want 1 remote (the lease) and 29 local", sources)
	}
	s := l.Stats()
	if s.Local != 29 || s.Remote != 1 || s.Allowed != 30 || s.Leases != 1 || s.UnitsLeased != 50 {
		t.Fatalf("Stats() = %+v", s)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.UnitsRefunded != 20 {
		t.Fatalf("refunded %d at Close, want the 20 unused", s.UnitsRefunded)
	}
	// Exactly what was used is gone from Redis: 70 of 100 are left.
	exact, err := ratelease.New(c, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	if res, _ := exact.AllowN(ctx, p, "k", 70); !res.Allowed {
		t.Fatalf("after Close: %+v, want the 70 units not used", res)
	}
	if res, _ := exact.Allow(ctx, p, "k"); res.Allowed {
		t.Fatal("more than the unused units came back")
	}
}

// A denial is remembered until its RetryAfter: Redis is not asked again.
func TestLeaseCachesDenials(t *testing.T) {
	mr := redistest.StartMini(t)
	l := leased(t, mr.Client(t), ratelease.LeaseConfig{Min: 5, Max: 5})
	defer l.Close()
	p := policy(t, "p", ratelease.PerHour(5))
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if res, _ := l.Allow(ctx, p, "k"); !res.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	// The first denial comes from Redis, or from the cache if the low-water
	// prefetch already heard it.
	res, err := l.Allow(ctx, p, "k")
	if err != nil || res.Allowed || (res.Source != ratelease.Remote && res.Source != ratelease.Cached) || res.RetryAfter <= 0 {
		t.Fatalf("first denial: %+v, %v", res, err)
	}
	before := l.Stats().RoundTrips
	for i := 0; i < 10; i++ {
		res, _ = l.Allow(ctx, p, "k")
		if res.Allowed || res.Source != ratelease.Cached || res.RetryAfter <= 0 {
			t.Fatalf("repeated denial: %+v", res)
		}
	}
	if rt := l.Stats().RoundTrips; rt != before {
		t.Fatalf("cached denials made %d round trips", rt-before)
	}
}

// Policies with a sliding log or a leaky bucket stay exact under WithLease.
func TestLeaseLeavesExactPoliciesExact(t *testing.T) {
	mr := redistest.StartMini(t)
	l := leased(t, mr.Client(t), ratelease.LeaseConfig{})
	defer l.Close()
	p := policy(t, "p", ratelease.Limit{Rate: 10, Period: time.Minute, Algorithm: ratelease.SlidingWindowLog})
	for i := 0; i < 3; i++ {
		if res, _ := l.Allow(context.Background(), p, "k"); res.Source != ratelease.Remote {
			t.Fatalf("request %d: source %v, want Remote", i, res.Source)
		}
	}
}

func TestLeaseConfigErrors(t *testing.T) {
	mr := redistest.StartMini(t)
	for _, lc := range []ratelease.LeaseConfig{
		{Min: -1}, {Min: 10, Max: 5}, {LowWater: 1}, {LowWater: -0.5}, {TTL: -time.Second}, {Refresh: -1},
	} {
		if l, err := ratelease.New(mr.Client(t), ratelease.WithLease(lc)); !errors.Is(err, ratelease.ErrInvalidOption) {
			if l != nil {
				l.Close()
			}
			t.Errorf("WithLease(%+v): %v, want ErrInvalidOption", lc, err)
		}
	}
	if _, err := ratelease.New(mr.Client(t), ratelease.WithMaxKeys(0)); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Errorf("WithMaxKeys(0): %v", err)
	}
}

// The hard cap: six Limiters, each with its own client, on one real Redis,
// one key, token bucket 3000/s burst 300, skewed demand well above the
// limit. Whatever the leases do, what all of them admit together never
// exceeds Burst + Rate·T.
func TestLeaseHardCapAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	const rate, burst = 3000, 300
	p := policy(t, "cap", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	var ls []*ratelease.Limiter
	for i := 0; i < 6; i++ {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		ls = append(ls, leased(t, c, ratelease.LeaseConfig{}))
	}
	ctx := context.Background()
	var admitted, decisions atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(2 * time.Second)
	for i, l := range ls {
		// Skew: instance i runs i+1 goroutines, each pausing at random.
		for g := 0; g <= i; g++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 1))
				for time.Now().Before(stop) {
					res, err := l.Allow(ctx, p, "hot")
					if err != nil {
						t.Error(err)
						return
					}
					decisions.Add(1)
					if res.Allowed {
						admitted.Add(1)
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
				}
			}(uint64(i*10 + g))
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	var roundTrips uint64
	for _, l := range ls {
		roundTrips += l.Stats().RoundTrips
		_ = l.Close()
	}
	bound := float64(burst) + rate*elapsed.Seconds()
	got := float64(admitted.Load())
	t.Logf("admitted %.0f of bound %.0f (%.1f%%) in %v; %d decisions, %.4f round trips per decision",
		got, bound, 100*got/bound, elapsed, decisions.Load(), float64(roundTrips)/float64(decisions.Load()))
	if got > bound {
		t.Fatalf("admitted %.0f > Burst + Rate·T = %.0f", got, bound)
	}
}
