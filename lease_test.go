package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
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
		if err != nil || !res.Allowed || res.Granted != 1 {
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

// The accuracy harness: six Limiters, each with its own client, on one real
// Redis, one key, 3000 units per second, skewed demand far above the limit
// for four seconds. What all of them admit together is held to the bound
// the algorithm promises, and to at least 97% of it where the algorithm can
// reach it under such load; leased algorithms must also make at most 0.01
// round trips per decision.
func TestLeaseAccuracyAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	const rate, burst, runFor = 3000, 300, 4 * time.Second
	for _, c := range []struct {
		alg ratelease.Algorithm
		// bound is the most the algorithm may admit between Redis times
		// start and end (µs); floor the least it must.
		bound, floor func(start, end int64) float64
		leased       bool
		// wait: the load calls Wait, not Allow.
		wait bool
	}{
		{ratelease.TokenBucket, tbBound(rate, burst), tbBound(rate, burst), true, false},
		// Every window touched, fully used: windows start on multiples of
		// the period in Redis time. The floor leaves out a last window that
		// opened less than 500ms before the end: a lease taken as it opens
		// is used at its instance's pace (as slow as 5000/s for the instance
		// with one goroutine), and the run may end first.
		{ratelease.FixedWindow, windows(rate), windowsOpenFor(rate, 500_000), true, false},
		// The counter's estimate keeps each window at most Rate; under
		// constant load it admits Rate per period after the first window.
		{ratelease.SlidingWindowCounter, windows(rate), longRun(rate), true, false},
		{ratelease.SlidingWindowLog, windows(rate), longRun(rate), false, false},
		// A leaky bucket's Allow admits only into an empty queue, so what it
		// admits depends on when requests happen to arrive; its Wait queues
		// and must keep the output at Rate.
		{ratelease.LeakyBucket, tbBound(rate, 1), longRun(rate), false, true},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			l := ratelease.Limit{Algorithm: c.alg, Rate: rate, Period: time.Second}
			if c.alg == ratelease.TokenBucket || c.alg == ratelease.LeakyBucket {
				l.Burst = burst
			}
			p := policy(t, "acc", l)
			var ls []*ratelease.Limiter
			for i := 0; i < 6; i++ {
				cl := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = cl.Close() })
				ls = append(ls, leased(t, cl, ratelease.LeaseConfig{}))
			}
			start := redisMicros(t, srv)
			admitted, decisions := skewedLoad(t, ls, p, runFor, c.wait)
			end := redisMicros(t, srv)
			var roundTrips uint64
			for _, l := range ls {
				roundTrips += l.Stats().RoundTrips
				_ = l.Close()
			}
			bound, floor := c.bound(start, end), 0.97*c.floor(start, end)
			perDecision := float64(roundTrips) / float64(decisions)
			t.Logf("admitted %d: %.2f%% of the bound %.0f, floor %.0f; %d decisions, %.4f round trips per decision",
				admitted, 100*float64(admitted)/bound, bound, floor, decisions, perDecision)
			if float64(admitted) > bound {
				t.Errorf("admitted %d > bound %.0f", admitted, bound)
			}
			if float64(admitted) < floor {
				t.Errorf("admitted %d < 97%% of %.0f", admitted, c.floor(start, end))
			}
			if c.leased && perDecision > 0.01 {
				t.Errorf("%.4f round trips per decision, want at most 0.01", perDecision)
			}
		})
	}
}

// tbBound is a bucket's bound over a run: Burst + Rate·T, plus 0.5% for the
// time between the Redis clock readings and the first and last decisions.
func tbBound(rate, burst float64) func(start, end int64) float64 {
	return func(start, end int64) float64 { return 1.005 * (burst + rate*float64(end-start)/1e6) }
}

// windows is Rate per one-second window touched between start and end.
func windows(rate float64) func(start, end int64) float64 {
	return func(start, end int64) float64 { return rate * float64(end/1e6-start/1e6+1) }
}

// windowsOpenFor is Rate per one-second window that opened at least open µs
// before end.
func windowsOpenFor(rate float64, open int64) func(start, end int64) float64 {
	return func(start, end int64) float64 { return rate * float64((end-open)/1e6-start/1e6+1) }
}

// longRun is Rate·T: what a limit that spreads its units evenly admits.
func longRun(rate float64) func(start, end int64) float64 {
	return func(start, end int64) float64 { return rate * float64(end-start) / 1e6 }
}

// redisMicros reads Redis's clock, in µs.
func redisMicros(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	now, err := srv.Client(t).Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// skewedLoad runs Allow (or Wait) on one key of p through every Limiter
// for d: Limiter i from i+1 goroutines, each pausing now and then at random.
// It returns the requests admitted and the decisions made.
func skewedLoad(t *testing.T, ls []*ratelease.Limiter, p *ratelease.Policy, d time.Duration, wait bool) (admitted, decisions int64) {
	t.Helper()
	adm, decisions := skewedLoadKeys(t, ls, p, []string{"hot"}, d, wait)
	return adm[0], decisions
}

// skewedLoadKeys is skewedLoad on several keys: each goroutine takes them
// in turn. It returns the requests admitted per key.
func skewedLoadKeys(t *testing.T, ls []*ratelease.Limiter, p *ratelease.Policy, keys []string, d time.Duration, wait bool) (admitted []int64, decisions int64) {
	t.Helper()
	adm := make([]atomic.Int64, len(keys))
	var dec atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), stop)
	defer cancel()
	for i, l := range ls {
		for g := 0; g <= i; g++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 1))
				for n := 0; time.Now().Before(stop); n++ {
					k := n % len(keys)
					var ok bool
					if wait {
						err := l.Wait(ctx, p, keys[k])
						if errors.Is(err, context.DeadlineExceeded) {
							return
						}
						ok = err == nil
					} else {
						res, err := l.Allow(ctx, p, keys[k])
						if err != nil {
							if ctx.Err() != nil {
								return
							}
							t.Error(err)
							return
						}
						ok = res.Allowed
					}
					dec.Add(1)
					if ok {
						adm[k].Add(1)
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
				}
			}(uint64(i*10 + g))
		}
	}
	wg.Wait()
	for i := range adm {
		admitted = append(admitted, adm[i].Load())
	}
	return admitted, dec.Load()
}

// The window bound, on simulated time: two Limiters on one Redis whose
// clocks (the Limiters' and Redis's TIME) move together a millisecond at a
// time, under demand that switches at random between idle, steady and
// bursts. In every window of length w, what both admitted together is at
// most Burst + Rate·(w + TTL): leased units left unused expire after TTL,
// so they can add at most Rate·TTL to what the bucket itself allows.
func TestLeaseWindowBound(t *testing.T) {
	const (
		rate, burst = 1000, 100
		// A TTL short next to what a lease holds (at least Min, the whole
		// burst): units outliving it would show at once.
		ttl   = 20 * time.Millisecond
		steps = 4000 // ms
	)
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	p := policy(t, "win", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	var ls []*ratelease.Limiter
	for i := 0; i < 2; i++ {
		l, err := ratelease.New(mr.Client(t), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second),
			ratelease.WithLease(ratelease.LeaseConfig{Min: burst, Max: 500, TTL: ttl}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	perStep := make([]int, steps+1) // admitted at each ms
	demand, phaseEnd := 0.0, 0
	for ms := 0; ms <= steps; ms++ {
		if ms >= phaseEnd {
			// Per instance per ms: idle, under the limit, at it, far over it.
			demand = []float64{0, 0.2, 0.5, 5}[rng.IntN(4)]
			phaseEnd = ms + 50 + rng.IntN(350)
		}
		for _, l := range ls {
			n := int(demand)
			if rng.Float64() < demand-float64(n) {
				n++
			}
			for r := 0; r < n; r++ {
				res, err := l.Allow(context.Background(), p, "k")
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					perStep[ms]++
				}
			}
		}
		mr.Advance(time.Millisecond)
		clk.Advance(time.Millisecond)
	}
	worstExcess := math.Inf(-1) // the most any window went past Burst + Rate·w
	for _, w := range []int{0, 1, 10, 50, 100, 200, 500, 1000, 2000} {
		bound := burst + rate*(float64(w)/1000+ttl.Seconds())
		sum, most := 0, 0
		for ms := 0; ms <= steps; ms++ { // windows [ms-w, ms]
			sum += perStep[ms]
			if ms-w-1 >= 0 {
				sum -= perStep[ms-w-1]
			}
			most = max(most, sum)
		}
		t.Logf("w=%4dms: at most %4d admitted, bound %6.0f", w, most, bound)
		if float64(most) > bound {
			t.Errorf("window %dms admitted %d > Burst + Rate·(w + TTL) = %.0f", w, most, bound)
		}
		worstExcess = max(worstExcess, float64(most)-(burst+rate*float64(w)/1000))
	}
	t.Logf("the most any window went past Burst + Rate·w: %.0f (allowed: Rate·TTL = %.0f)", worstExcess, rate*ttl.Seconds())
}

// The TTL term of the window bound is real, and no more: a lease taken at
// time 0 and used just before it lapses adds to what the bucket grants at
// that moment, by less than Rate·TTL.
func TestLeaseTTLOvershoot(t *testing.T) {
	const rate, burst, ttl = 1000, 100, 20 * time.Millisecond
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	p := policy(t, "ttl", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	l, err := ratelease.New(mr.Client(t), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second),
		ratelease.WithLease(ratelease.LeaseConfig{Min: 50, Max: 50, TTL: ttl, Refresh: time.Millisecond, LowWater: 0.01}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	allowN := func(k int) (admitted int) {
		for i := 0; i < k; i++ {
			if res, err := l.Allow(ctx, p, "k"); err != nil {
				t.Fatal(err)
			} else if res.Allowed {
				admitted++
			}
		}
		return admitted
	}
	if got := allowN(1); got != 1 { // leases 50, keeps 49
		t.Fatalf("first request: admitted %d", got)
	}
	step := ttl - time.Millisecond
	mr.Advance(step)
	clk.Advance(step)
	// At 19ms: the 49 held, and what the bucket has: 50 left + 19 refilled.
	got := allowN(1000)
	excess := got - burst // past Burst + Rate·w for a window of length 0
	t.Logf("admitted %d at once at %v: %d past Burst, allowed Rate·TTL = %.0f", got, step, excess, rate*ttl.Seconds())
	if excess <= 0 || float64(excess) > rate*ttl.Seconds() {
		t.Fatalf("admitted %d at once: want more than Burst (%d), by at most Rate·TTL", got, burst)
	}
}

// Fairness: four equal instances, each over its share of the limit, get
// equal parts of it, by Jain's index (Σx)² / (n·Σx²). Two loads: flooding a
// small bucket (each lease is a small batch, soon spent), and twice the
// limit paced over a bucket as deep as its rate (batches last long enough
// for an instance that holds units to be tempted to ask again before its
// turn). The paced load hands out some 80 batches of 125 in 4 s, so chance
// alone moves its index: 0.96–1.0 measured, 0.9 asserted. An instance that
// polls Redis while it holds units wins most batches (0.71–0.82).
func TestLeaseFairShare(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		name  string
		limit ratelease.Limit
		every time.Duration // 0: flood, with a 20µs pause
		min   float64       // the least Jain index
	}{
		{"flooded, burst 200", ratelease.Limit{Rate: 2000, Period: time.Second, Burst: 200}, 0, 0.95},
		{"paced 2x, burst 2000", ratelease.PerSecond(2000), time.Millisecond, 0.9},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := policy(t, fmt.Sprintf("fair%d", c.limit.Burst), c.limit)
			const n = 4
			admitted := make([]atomic.Int64, n)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				cl := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = cl.Close() })
				l := leased(t, cl, ratelease.LeaseConfig{})
				defer l.Close()
				for g := 0; g < 2; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						next := time.Now()
						for ctx.Err() == nil {
							res, err := l.Allow(ctx, p, "shared")
							if err == nil && res.Allowed {
								admitted[i].Add(1)
							}
							if c.every == 0 {
								time.Sleep(20 * time.Microsecond) // each instance: some 50k requests/s at most
								continue
							}
							next = next.Add(2 * c.every) // two goroutines: one request per every
							time.Sleep(time.Until(next))
						}
					}()
				}
			}
			wg.Wait()
			var sum, squares float64
			counts := make([]int64, n)
			for i := range admitted {
				counts[i] = admitted[i].Load()
				x := float64(counts[i])
				sum += x
				squares += x * x
			}
			jain := sum * sum / (n * squares)
			t.Logf("admitted per instance %v: Jain index %.3f", counts, jain)
			if jain < c.min {
				t.Fatalf("Jain index %.3f < %.2f (admitted %v)", jain, c.min, counts)
			}
		})
	}
}

// pacedLoad asks for perSecond decisions per second through each Limiter,
// evenly spaced, for d, and returns the requests admitted.
func pacedLoad(t *testing.T, ls []*ratelease.Limiter, p *ratelease.Policy, d time.Duration, perSecond int) int64 {
	t.Helper()
	var adm atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := time.Second / time.Duration(perSecond)
			for next := time.Now(); next.Before(stop); next = next.Add(every) {
				time.Sleep(time.Until(next))
				if res, err := l.Allow(context.Background(), p, "hot"); err != nil {
					t.Error(err)
					return
				} else if res.Allowed {
					adm.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return adm.Load()
}
