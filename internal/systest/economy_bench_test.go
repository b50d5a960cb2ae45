package systest_test

// Benchmarks of the economy of leasing (see economy_test.go): a key driven
// flat out in one process, next to x/time/rate, keys used once each,
// where leasing has nothing to amortize, and a fleet on many keys. They use
// ratelease's defaults on a real Redis (the first two on
// redistest.BenchAddr). To compare implementations side by side:
//
//	go test -run '^$' -bench 'FlatOut|SingleUseKeys' -benchmem -count 6 ./internal/systest > /tmp/x.txt
//	benchstat -col /impl /tmp/x.txt
//
// (benchstat puts both benchmarks in one table, their implementations side
// by side; filter with -filter '.name:FlatOut' for one at a time.)

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// benchRuns numbers the runs of a benchmark function, so that each run
// works on keys of its own.
var benchRuns atomic.Int64

// benchLimiter returns a Limiter with opts on a new client to addr, whose
// Redis traffic tc counts, and a function that closes both (once, however
// often it is called).
func benchLimiter(b *testing.B, addr string, opts ...ratelease.Option) (l *ratelease.Limiter, tc *redistest.Trips, closeBoth func()) {
	b.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	tc = &redistest.Trips{}
	client.AddHook(tc)
	l, err := ratelease.New(client, opts...)
	if err != nil {
		_ = client.Close()
		b.Fatal(err)
	}
	return l, tc, sync.OnceFunc(func() {
		_ = l.Close()
		_ = client.Close()
	})
}

// BenchmarkFlatOut drives one key as fast as one process can, with a limit
// that never binds (10^6/s, burst 10^9): what a hot key costs per decision
// with the default lease settings, sequentially and from b.RunParallel's
// goroutines, next to x/time/rate's Allow. ratelease also reports the
// Redis round trips per decision (trips/op).
func BenchmarkFlatOut(b *testing.B) {
	addr := redistest.BenchAddr(b)
	p, err := ratelease.NewPolicy("flatout", ratelease.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	l, tc, closeBoth := benchLimiter(b, addr)
	defer closeBoth()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	b.Run("impl=ratelease/seq", func(b *testing.B) {
		key := "flat-seq-" + run
		b.ReportAllocs()
		trips := tc.Trips.Load()
		for b.Loop() {
			if res, err := l.Allow(ctx, p, key); err != nil || !res.Allowed {
				b.Fatalf("%+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(tc.Trips.Load()-trips)/float64(b.N), "trips/op")
	})
	b.Run("impl=ratelease/par", func(b *testing.B) {
		key := "flat-par-" + run
		b.ReportAllocs()
		trips := tc.Trips.Load()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if res, err := l.Allow(ctx, p, key); err != nil || !res.Allowed {
					b.Errorf("%+v, %v", res, err)
					return
				}
			}
		})
		b.ReportMetric(float64(tc.Trips.Load()-trips)/float64(b.N), "trips/op")
	})
	b.Run("impl=xrate/seq", func(b *testing.B) {
		rl := rate.NewLimiter(1e6, 1e9)
		b.ReportAllocs()
		for b.Loop() {
			if !rl.Allow() {
				b.Fatal("denied")
			}
		}
	})
	b.Run("impl=xrate/par", func(b *testing.B) {
		rl := rate.NewLimiter(1e6, 1e9)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !rl.Allow() {
					b.Error("denied")
					return
				}
			}
		})
	})
}

// BenchmarkSingleUseKeys: 16 goroutines, each decision on a key of its
// own that no decision used before (uses=1: per-IP limits under a crawl,
// where every key is new), or on keys used a few times each, one after
// another (uses=2, uses=4), lease mode against exact mode. Each op is one
// decision; the keys are made in the loop, for both alike. What Close
// sends is counted in the cost, in commands and round trips, and in
// Redis's CPU (INFO cpu, all of its work) per decision.
func BenchmarkSingleUseKeys(b *testing.B) {
	addr := redistest.BenchAddr(b)
	p, err := ratelease.NewPolicy("single", ratelease.PerMinute(60))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	procs := runtime.GOMAXPROCS(0)
	for _, uses := range []int64{1, 2, 4} {
		for _, impl := range []string{"lease", "exact"} {
			b.Run(fmt.Sprintf("uses=%d/impl=%s", uses, impl), func(b *testing.B) {
				l, tc, closeBoth := benchLimiter(b, addr, modeOpts(impl == "exact")...)
				defer closeBoth()
				admin := redis.NewClient(&redis.Options{Addr: addr})
				defer admin.Close()
				cpu := func() float64 {
					return redistest.InfoField(b, admin, "cpu", "used_cpu_user") + redistest.InfoField(b, admin, "cpu", "used_cpu_sys")
				}
				cpu0 := cpu()
				prefix := fmt.Sprintf("single-%s-%s-%d:", impl, strconv.FormatInt(time.Now().UnixNano(), 36), benchRuns.Add(1))
				var next atomic.Int64
				b.SetParallelism((16 + procs - 1) / procs) // 16 goroutines
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := prefix + strconv.FormatInt((next.Add(1)-1)/uses, 36)
						if _, err := l.Allow(ctx, p, key); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				closeBoth() // what Close sends is part of the cost
				b.ReportMetric(float64(tc.Cmds.Load())/float64(b.N), "cmds/op")
				b.ReportMetric(float64(tc.Trips.Load())/float64(b.N), "trips/op")
				b.ReportMetric((cpu()-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
			})
		}
	}
}

// BenchmarkEconomyFleet is a fleet on many keys (docs/scaling.md): 10, 30
// and 100 instances in one process on one Redis, 1000 keys of 100/s each
// whose popularity follows Zipf's law (s = 1.1), a fixed total demand of
// 20,000 decisions a second spread evenly over the instances, 3 s (an op)
// in lease mode, then the same load in exact mode, for what an exact
// limiter admits; each run on a redis-server of its own. It reports
// decisions/s, the Redis commands a second the hook counts in each mode
// (a script is one command), round trips per decision in lease mode, of
// which the decisions no lease could serve (unservable/decision: a pair's
// (instance, key) first, or one more than a TTL after the pair's previous
// decision, when whatever that lease held has lapsed) and the rest
// (above-floor/decision), what leasing admitted over what exact mode
// admitted, units admitted past each key's own bound Burst + Rate·T, and
// the load offered over the load intended. When every instance count ran
// for its 3 s, it asserts that a decision does not get dearer as the fleet grows: round
// trips per decision at 100 instances at most 1.7x those at 10, and above
// the floor at most 1.2x. Run it with
//
//	go test -run '^$' -bench '^BenchmarkEconomyFleet$' -benchtime 1x ./internal/systest
func BenchmarkEconomyFleet(b *testing.B) {
	const (
		keys    = 1000
		perKey  = 100
		total   = 20_000.0
		runFor  = 3 * time.Second
		zipfS   = 1.1
		seedTag = 11
	)
	d := loadLength(runFor)
	p := policy(b, "zipf", ratelease.PerSecond(perKey))
	type result struct {
		totals
		secs       float64
		offered    int64
		perKey     []int64 // admitted per key
		unservable int64   // decisions no lease could serve (see above)
	}
	run := func(b *testing.B, n int, exact bool) result {
		srv := redistest.Start(b)
		ins := newInstances(b, n, clientsTo(b, srv.Addr), modeOpts(exact)...)
		perInstance := total / float64(n)
		goroutines := goroutinesFor(perInstance)
		perKeyAdm := make([]atomic.Int64, keys)
		var offered, unservable atomic.Int64
		ttl := ratelease.DefaultLeaseConfig().TTL.Nanoseconds()
		now := redisClock(b, srv.Client(b))
		load := span{start: now()}
		start := time.Now()
		var wg sync.WaitGroup
		for i, in := range ins {
			// The same key sequence in both modes: one Zipf source per
			// goroutine, seeded by instance and goroutine.
			zs := make([]*rand.Zipf, goroutines)
			for g := range zs {
				zs[g] = rand.NewZipf(rand.New(rand.NewPCG(seedTag, uint64(i*64+g))), zipfS, 1, keys-1)
			}
			last := make([]atomic.Int64, keys) // ns of each key's last decision here
			wg.Go(func() {
				offered.Add(pace(start, perInstance, d, goroutines, func(g int) {
					k := zs[g].Uint64()
					at := time.Now().UnixNano()
					if prev := last[k].Swap(at); prev == 0 || at-prev > ttl {
						unservable.Add(1)
					}
					if in.allowN(p, fmt.Sprintf("z%03d", k), 1) {
						perKeyAdm[k].Add(1)
					}
				}))
			})
		}
		wg.Wait()
		load.end = now()
		r := result{secs: load.seconds(), offered: offered.Load(), unservable: unservable.Load()}
		r.totals = sum(ins)
		for i, in := range ins {
			in.check(b, fmt.Sprintf("N=%d %s instance %d", n, modeName(exact), i))
		}
		closeAll(ins)
		for k := range perKeyAdm {
			r.perKey = append(r.perKey, perKeyAdm[k].Load())
		}
		return r
	}
	perDecision, aboveFloor := map[int]float64{}, map[int]float64{}
	for _, n := range []int{10, 30, 100} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			var lease, exact result
			for b.Loop() {
				lease, exact = run(b, n, false), run(b, n, true)
			}
			var over int64
			bound := float64(perKey) + perKey*lease.secs
			for _, a := range lease.perKey {
				over += max(0, a-int64(math.Floor(bound)))
			}
			perDecision[n] = ratio(lease.trips, lease.decisions)
			floor := ratio(lease.unservable, lease.decisions)
			aboveFloor[n] = perDecision[n] - floor
			b.ReportMetric(float64(lease.decisions)/lease.secs, "decisions/s")
			b.ReportMetric(float64(lease.cmds)/lease.secs, "lease-cmds/s")
			b.ReportMetric(float64(exact.cmds)/exact.secs, "exact-cmds/s")
			b.ReportMetric(perDecision[n], "trips/decision")
			b.ReportMetric(floor, "unservable/decision")
			b.ReportMetric(aboveFloor[n], "above-floor/decision")
			b.ReportMetric(ratio(lease.admitted, exact.admitted), "lease/exact")
			b.ReportMetric(float64(over), "units-past-bound")
			b.ReportMetric(float64(lease.offered)/intended(total, d), "lease-offered/intended")
			b.ReportMetric(float64(exact.offered)/intended(total, d), "exact-offered/intended")
			if lease.fallback+exact.fallback > 0 {
				b.Logf("N=%d: %d lease and %d exact decisions by fallback (Redis late)", n, lease.fallback, exact.fallback)
			}
		})
	}
	if len(perDecision) < 3 || *loadFor > 0 {
		return // a part of it ran (-bench), or shortened runs: a pair's first decisions weigh more
	}
	// No growth with N, but for a margin of 1.7x: at a fixed total demand
	// each (instance, key) pair's demand falls as N grows, and a pair that
	// sees less than a request per TTL pays a lease per request, as exact
	// mode does (the floor below; docs/scaling.md).
	if growth := ratio(perDecision[100], perDecision[10]); growth > 1.7 {
		b.Errorf("round trips per decision: %.4f at 100 instances, %.2fx the %.4f at 10; want at most 1.7x",
			perDecision[100], growth, perDecision[10])
	}
	// What grows is the floor: the decisions no lease could serve, which
	// cost any engine whose units lapse after TTL a call each. What the
	// engine adds above it must not grow with N.
	if g := aboveFloor[100] / aboveFloor[10]; aboveFloor[10] <= 0 || g > 1.2 {
		b.Errorf("round trips per decision above the floor: %.4f at 100 instances, %.2fx the %.4f at 10; want at most 1.2x",
			aboveFloor[100], g, aboveFloor[10])
	}
}
