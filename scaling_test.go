package ratelease_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// infoField reads one numeric field of INFO section from srv.
func infoField(t *testing.T, c *redis.Client, section, field string) float64 {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// TestScalingFigures is a measurement, not a check: it makes the figures
// of docs/scaling.md on a real redis-server. Run it with
//
//	RATELEASE_MEASURE=1 go test -run TestScalingFigures -v .
func TestScalingFigures(t *testing.T) {
	if os.Getenv("RATELEASE_MEASURE") == "" {
		t.Skip("a measurement: set RATELEASE_MEASURE=1 to run it")
	}
	ctx := context.Background()

	t.Run("memory per key", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		l, err := ratelease.New(c, ratelease.WithExact())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		const keys = 20000
		t.Logf("| algorithm | requests per key | Redis memory per key |")
		t.Logf("|---|---|---|")
		for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow,
			ratelease.SlidingWindowCounter, ratelease.SlidingWindowLog, ratelease.LeakyBucket} {
			for _, reqs := range []int{1, 10} {
				if reqs > 1 && alg != ratelease.SlidingWindowLog {
					continue // only the log grows with requests
				}
				p := policy(t, fmt.Sprintf("mem%d-%d", alg, reqs), ratelease.Limit{Algorithm: alg, Rate: 100, Period: time.Hour, Burst: 100})
				before := infoField(t, c, "memory", "used_memory")
				for k := 0; k < keys; k++ {
					if _, err := l.AllowN(ctx, p, fmt.Sprintf("user:%08d", k), 1); err != nil {
						t.Fatal(err)
					}
					for r := 1; r < reqs; r++ {
						_, _ = l.AllowN(ctx, p, fmt.Sprintf("user:%08d", k), 1)
					}
				}
				after := infoField(t, c, "memory", "used_memory")
				t.Logf("| %v | %d | %.0f B |", alg, reqs, (after-before)/keys)
			}
		}
	})

	t.Run("hot key", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		const instances, perInstance, runFor = 4, 25000, 3 * time.Second
		t.Logf("| limit | decisions/s | admitted/s | admitted per instance | Redis round trips/s (leasing) | Redis commands/s, those in scripts included | per-request limiter: round trips/s |")
		t.Logf("|---|---|---|---|---|---|---|")
		for _, limit := range []int{200_000, 50_000} {
			p := policy(t, fmt.Sprintf("hot%d", limit), ratelease.Limit{Rate: limit, Period: time.Second, Burst: limit / 10})
			var ls []*ratelease.Limiter
			for i := 0; i < instances; i++ {
				cl := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = cl.Close() })
				ls = append(ls, leased(t, cl, ratelease.LeaseConfig{}))
			}
			cmds := infoField(t, c, "stats", "total_commands_processed")
			start := time.Now()
			admitted := pacedLoad(t, ls, p, runFor, perInstance)
			secs := time.Since(start).Seconds()
			var decisions, roundTrips uint64
			var per []uint64
			for _, l := range ls {
				s := l.Stats()
				decisions += s.Allowed + s.Denied
				roundTrips += s.RoundTrips
				per = append(per, s.Allowed)
			}
			used := infoField(t, c, "stats", "total_commands_processed") - cmds - 1 // the INFO itself
			for _, l := range ls {
				_ = l.Close()
			}
			t.Logf("| %d/s | %.0f | %.0f | %v | %.0f | %.0f | %.0f |", limit, float64(decisions)/secs, float64(admitted)/secs, per,
				float64(roundTrips)/secs, used/secs, float64(decisions)/secs)
		}
	})

	t.Run("Redis CPU per lease", func(t *testing.T) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		store := remote.NewStore(c, "cpu")
		p, err := remote.NewPolicy("cpu", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}})
		if err != nil {
			t.Fatal(err)
		}
		const goroutines, batch, runFor = 8, 16, 3 * time.Second
		cpu := func() float64 {
			return infoField(t, c, "cpu", "used_cpu_user") + infoField(t, c, "cpu", "used_cpu_sys")
		}
		cpu0 := cpu()
		var calls atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(runFor)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs := make([]remote.Request, batch)
				for n := 0; time.Now().Before(stop); n++ {
					for i := range rs {
						rs[i] = remote.Request{Policy: p, Key: fmt.Sprintf("k%d", (n*batch+i)%10000), Min: 1, Max: 100, Member: "m", Demand: 100, Horizon: 250 * time.Millisecond}
					}
					_, errs := store.AcquireBatch(ctx, rs)
					for _, err := range errs {
						if err != nil {
							t.Error(err)
							return
						}
					}
					calls.Add(batch)
				}
			}()
		}
		wg.Wait()
		used := cpu() - cpu0
		n := float64(calls.Load())
		t.Logf("%0.f lease calls in %v (pipelines of %d from %d goroutines): %.1f µs of Redis CPU each, %.0f calls per Redis CPU-second",
			n, runFor, batch, goroutines, used/n*1e6, n/used)
	})
}
