package systest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// BenchmarkMemoryPerKey is the Redis memory one key of each algorithm
// holds (docs/scaling.md): each op makes one new key, used once, or ten
// times for the sliding window log, the only state that grows with
// requests; redis-B/key is INFO memory's used_memory over the ops, on a
// redis-server of its own. Run it with
//
//	go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 20000x ./internal/systest
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	l, err := ratelease.New(c, ratelease.WithExact())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow,
		ratelease.SlidingWindowCounter, ratelease.SlidingWindowLog, ratelease.LeakyBucket} {
		for _, reqs := range []int{1, 10} {
			if reqs > 1 && alg != ratelease.SlidingWindowLog {
				continue // only the log grows with requests
			}
			b.Run(fmt.Sprintf("alg=%v/requests=%d", alg, reqs), func(b *testing.B) {
				p := policy(b, fmt.Sprintf("mem%d-%d-%d", alg, reqs, benchRuns.Add(1)), ratelease.Limit{Algorithm: alg, Rate: 100, Period: time.Hour, Burst: 100})
				// The policy's first call loads its script or library: not a key's.
				if _, err := l.AllowN(ctx, p, "warm", 1); err != nil {
					b.Fatal(err)
				}
				before := redistest.InfoField(b, c, "memory", "used_memory")
				k := 0
				for b.Loop() {
					key := fmt.Sprintf("user:%08d", k)
					k++
					for range reqs {
						if _, err := l.AllowN(ctx, p, key, 1); err != nil {
							b.Fatal(err)
						}
					}
				}
				after := redistest.InfoField(b, c, "memory", "used_memory")
				b.ReportMetric((after-before)/float64(b.N), "redis-B/key")
			})
		}
	}
}

// BenchmarkHotKey is one hot key (docs/scaling.md): four instances, each
// a Limiter with the default lease settings and a client of its own,
// paced at 25,000 decisions a second each for 3 s (an op), under a limit
// of 200,000/s and of 50,000/s (burst a tenth). It reports decisions/s,
// admitted/s, the Limiters' Redis round trips a second (trips/s; a
// per-request limiter makes decisions/s of them) and the commands the
// server processed a second, those in scripts included (redis-cmds/s).
// Run it with
//
//	go test -run '^$' -bench '^BenchmarkHotKey$' -benchtime 1x ./internal/systest
func BenchmarkHotKey(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	const instances, perInstance, runFor = 4, 25000, 3 * time.Second
	for _, limit := range []int{200_000, 50_000} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			var decided, admitted, trips, cmds, secs float64
			for b.Loop() {
				p := policy(b, fmt.Sprintf("hot%d-%d", limit, benchRuns.Add(1)), ratelease.Limit{Rate: limit, Period: time.Second, Burst: limit / 10})
				ins := newInstances(b, instances, clientsTo(b, srv.Addr), engine(ratelease.LeaseConfig{})...)
				before := redistest.InfoField(b, c, "stats", "total_commands_processed")
				start := time.Now()
				var wg sync.WaitGroup
				for _, in := range ins {
					wg.Go(func() { pace(start, perInstance, loadLength(runFor), 1, func(int) { in.allowN(p, "hot", 1) }) })
				}
				wg.Wait()
				secs += time.Since(start).Seconds()
				cmds += redistest.InfoField(b, c, "stats", "total_commands_processed") - before - 1 // the INFO itself
				for i, in := range ins {
					in.check(b, fmt.Sprintf("instance %d", i))
					st := in.l.Stats()
					decided += float64(st.Allowed + st.Denied)
					trips += float64(st.RoundTrips)
				}
				admitted += float64(sum(ins).admitted)
				closeAll(ins)
			}
			b.ReportMetric(decided/secs, "decisions/s")
			b.ReportMetric(admitted/secs, "admitted/s")
			b.ReportMetric(trips/secs, "trips/s")
			b.ReportMetric(cmds/secs, "redis-cmds/s")
		})
	}
}
