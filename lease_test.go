package ratelease_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
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
	if sources[ratelease.SourceRemote] != 1 || sources[ratelease.SourceLocal] != 29 {
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
	if err != nil || res.Allowed || (res.Source != ratelease.SourceRemote && res.Source != ratelease.SourceCached) || res.RetryAfter <= 0 {
		t.Fatalf("first denial: %+v, %v", res, err)
	}
	before := l.Stats().RoundTrips
	for i := 0; i < 10; i++ {
		res, _ = l.Allow(ctx, p, "k")
		if res.Allowed || res.Source != ratelease.SourceCached || res.RetryAfter <= 0 {
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
		if res, _ := l.Allow(context.Background(), p, "k"); res.Source != ratelease.SourceRemote {
			t.Fatalf("request %d: source %v, want Remote", i, res.Source)
		}
	}
}

func TestLeaseConfigErrors(t *testing.T) {
	mr := redistest.StartMini(t)
	for _, lc := range []ratelease.LeaseConfig{
		{Min: -1}, {Min: 10, Max: 5}, {LowWater: 1}, {LowWater: -0.5}, {LowWater: math.NaN()}, {TTL: -time.Second}, {Refresh: -1},
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

// A denial answered from the cache must report the Remaining that Redis
// reported with the denial it repeats, not 0 while units are free. On an
// in-memory Redis whose time stands still (so nothing refills and the
// cached denial cannot lapse): a fixed window of 10, of which an exact
// Limiter takes 7; a leasing Limiter asks for 5 and Redis denies it, with
// 3 remaining; asked again, the leasing Limiter denies from its cache (or
// asks Redis again) and must say 3 remaining. Once the leasing Limiter is
// closed (any units it took are given back), an exact Limiter checks that
// Redis does hold exactly 3.
func TestEconomyCachedDenialRemaining(t *testing.T) {
	mr := redistest.StartMini(t)
	// The leasing Limiter's clock stands still with Redis's: its cached
	// denial lasts as long as the test needs it.
	clk := clock.NewManual(mr.Now())
	ctx := context.Background()
	p := policy(t, "cached", ratelease.Limit{Rate: 10, Period: time.Second, Algorithm: ratelease.FixedWindow})
	newOn := func(opt ratelease.Option) *ratelease.Limiter {
		l, err := ratelease.New(mr.Client(t), opt, ratelease.WithRedisTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	exact, lease := newOn(ratelease.WithExact()), newOn(ratelease.WithClock(clk))

	if res, err := exact.AllowN(ctx, p, "k", 7); err != nil || !res.Allowed || res.Remaining != 3 {
		t.Fatalf("exact AllowN(7) on a fresh window of 10: %+v, %v; want admitted with 3 remaining", res, err)
	}
	first, err := lease.AllowN(ctx, p, "k", 5)
	if err != nil || first.Allowed {
		t.Fatalf("leasing AllowN(5) with 3 left: %+v, %v; want denied", first, err)
	}
	second, err := lease.AllowN(ctx, p, "k", 5)
	if err != nil || second.Allowed {
		t.Fatalf("leasing AllowN(5) again: %+v, %v; want denied", second, err)
	}
	t.Logf("cached denial: first denial source %v remaining %d; repeated denial source %v remaining %d (target: 3, what Redis holds)",
		first.Source, first.Remaining, second.Source, second.Remaining)
	if first.Remaining != 3 {
		t.Errorf("the first denial (source %v) reports %d remaining; Redis holds 3", first.Source, first.Remaining)
	}
	if second.Remaining != 3 {
		t.Errorf("the repeated denial (source %v) reports %d remaining; Redis said 3 with the denial it repeats", second.Source, second.Remaining)
	}
	// What Redis holds: 3, neither more nor less (a denied AllowN takes nothing).
	_ = lease.Close() // gives back any units it holds
	if res, err := exact.AllowN(ctx, p, "k", 4); err != nil || res.Allowed {
		t.Fatalf("exact AllowN(4) after: %+v, %v; want denied", res, err)
	}
	if res, err := exact.AllowN(ctx, p, "k", 3); err != nil || !res.Allowed {
		t.Fatalf("exact AllowN(3) after: %+v, %v; want admitted", res, err)
	}
}

// Several limits at once (100/s, 3000/min, 100000/h; a calendar day's
// quota), three instances flooding: the fair share divides the limit that
// binds (the per-second one, while the others have room), so each
// instance gets a third, as with the per-second limit alone, and most
// grants come from leases. (Dividing the limit of the least long-run
// rate, roomy, left the per-second one to whoever asked first: one
// instance got 98%.) Simulated time: 20ms steps, two requests an instance
// a step.
func TestLeaseFairShareOfSeveralLimits(t *testing.T) {
	for _, limits := range [][]ratelease.Limit{
		{ratelease.PerSecond(100), ratelease.PerMinute(3000), ratelease.PerHour(100000)},
		{ratelease.PerSecond(100), ratelease.PerCalendarDay(100000, nil)},
	} {
		t.Run(limits[len(limits)-1].String(), func(t *testing.T) {
			e := newLeaseEnv(t)
			p := policy(t, "several", limits...)
			ls := []*ratelease.Limiter{e.limiter(t), e.limiter(t), e.limiter(t)}
			var got [3]int
			sources := map[ratelease.Source]int{}
			const steps = 3000 // 60 s
			for s := 0; s < steps; s++ {
				for i, l := range ls {
					for r := 0; r < 2; r++ {
						res, err := l.Allow(context.Background(), p, "k")
						if err != nil {
							t.Fatal(err)
						}
						if res.Allowed {
							got[i]++
							sources[res.Source]++
						}
					}
				}
				e.advance(20 * time.Millisecond)
			}
			total := got[0] + got[1] + got[2]
			t.Logf("admitted by instance %v, sources %v", got, sources)
			if bound := 100 + 100*steps/50; total > bound || float64(total) < 0.97*float64(bound) {
				t.Errorf("admitted %d in all; want at most and nearly %d", total, bound)
			}
			for i, n := range got {
				if float64(n) < 0.9*float64(total)/3 {
					t.Errorf("instance %d admitted %d of %d: less than 0.9 of a third", i, n, total)
				}
			}
			if 2*sources[ratelease.SourceLocal] < total {
				t.Errorf("sources %v: want most grants from leases", sources)
			}
		})
	}
}

// Lease-mode instances that meet part-way through a long window (a
// calendar day, an hour, a minute: a fleet's restart, a scale-out) still
// lease it: three of them wanting 100 requests a second each, 1200 of the
// window's 3000 over 4s, admit all of it with few Redis calls, however
// long the window's rest. (A window's room counted short over all of its
// rest, where it is not shared by parts, made every lease a unit or two.)
// Simulated time.
func TestLongWindowJoinedLate(t *testing.T) {
	for _, c := range []struct {
		name string
		l    ratelease.Limit
	}{
		{"calendar day", ratelease.PerCalendarDay(3000, nil)},
		{"hour", ratelease.Limit{Rate: 3000, Period: time.Hour, Algorithm: ratelease.FixedWindow}},
		{"minute", ratelease.Limit{Rate: 3000, Period: time.Minute, Algorithm: ratelease.FixedWindow}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mr := redistest.StartMini(t)
			mr.Advance(10*time.Hour + 7*time.Minute + 3*time.Second)
			clk := clock.NewManual(mr.Now())
			p := policy(t, "q", c.l)
			var ls []*ratelease.Limiter
			for range 3 {
				l, err := ratelease.New(mr.Client(t), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				ls = append(ls, l)
			}
			allowed := 0
			for range 200 { // 4s: 2 requests per 20ms each
				for _, l := range ls {
					for range 2 {
						res, err := l.Allow(context.Background(), p, "k")
						if err != nil {
							t.Fatal(err)
						}
						if res.Allowed {
							allowed++
						}
					}
				}
				time.Sleep(time.Millisecond) // the leases in flight land
				mr.Advance(20 * time.Millisecond)
				clk.Set(mr.Now())
			}
			var remote uint64
			for _, l := range ls {
				remote += l.Stats().Remote
			}
			if allowed != 1200 || remote > 60 {
				t.Fatalf("admitted %d of 1200 wanted, %d decisions by Redis; want all, and at most 60 (a lease serves 20 or more)", allowed, remote)
			}
			t.Logf("admitted %d, %d decisions by Redis", allowed, remote)
		})
	}
}

// Demand that pauses: one instance at ten times a token bucket's rate,
// then idle for longer than the bucket takes to fill, in turn. Exact mode
// takes every unit as it comes; lease mode waits for a batch, and the
// units that came meanwhile wait in the bucket: without more, a pause
// that fills the bucket loses them. They are leased when the batch is due
// instead (Leaser.due), and held for the demand's return: lease mode
// admits about what exact mode does, on random spans, in simulated time.
func TestLeaseKeepsWhatComesWhileDemandPauses(t *testing.T) {
	const rate, burst = 100, 10 // the bucket fills in 100ms
	p := policy(t, "pause", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	run := func(mode ratelease.Option, seed uint64) (admitted int) {
		mr := redistest.StartMini(t)
		clk := clock.NewManual(mr.Now())
		l, err := ratelease.New(mr.Client(t), mode, ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		rng := rand.New(rand.NewPCG(seed, 11))
		on, end := 0, 0 // on: 1 while the demand is on
		for ms := 0; ms < 2000; ms++ {
			if ms >= end {
				on, end = 1-on, ms+50+rng.IntN(350)
			}
			for range 10 * rate / 1000 * on {
				if res, err := l.Allow(context.Background(), p, "k"); err != nil {
					t.Fatal(err)
				} else if res.Allowed {
					admitted++
				}
			}
			mr.Advance(time.Millisecond)
			clk.Advance(time.Millisecond)
			if on == 0 {
				// (A lease due now goes out in the background: let it land.)
				time.Sleep(200 * time.Microsecond)
			}
		}
		return admitted
	}
	for seed := range uint64(2) {
		exact, lease := run(ratelease.WithExact(), seed), run(ratelease.WithLease(ratelease.LeaseConfig{}), seed)
		t.Logf("seed %d: lease mode admitted %d, exact mode %d: %.3f", seed, lease, exact, float64(lease)/float64(exact))
		if float64(lease) < 0.97*float64(exact) {
			t.Errorf("seed %d: lease mode admitted %d, less than 0.97 of exact mode's %d", seed, lease, exact)
		}
	}
}
