package systest_test

// Benchmarks of the economy of leasing (see economy_test.go): a key driven
// flat out in one process, next to x/time/rate, and keys used once each,
// where leasing has nothing to amortize. Both use ratelease's defaults on a
// real Redis (redistest.BenchAddr). To compare implementations side by side:
//
//	go test -run '^$' -bench 'FlatOut|SingleUseKeys' -benchmem -count 6 ./internal/systest > /tmp/x.txt
//	benchstat -col /impl /tmp/x.txt
//
// (benchstat puts both benchmarks in one table, their implementations side
// by side; filter with -filter '.name:FlatOut' for one at a time.)

import (
	"context"
	"fmt"
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
// another (uses=4), lease mode against exact mode. Each op is one
// decision; the keys are made in the loop, for both alike. What Close
// sends is counted in the cost.
func BenchmarkSingleUseKeys(b *testing.B) {
	addr := redistest.BenchAddr(b)
	p, err := ratelease.NewPolicy("single", ratelease.PerMinute(60))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	procs := runtime.GOMAXPROCS(0)
	for _, uses := range []int64{1, 4} {
		for _, impl := range []string{"lease", "exact"} {
			b.Run(fmt.Sprintf("uses=%d/impl=%s", uses, impl), func(b *testing.B) {
				l, tc, closeBoth := benchLimiter(b, addr, modeOpts(impl == "exact")...)
				defer closeBoth()
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
			})
		}
	}
}
