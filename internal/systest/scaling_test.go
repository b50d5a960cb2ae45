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

// TestScalingFigures is a measurement, not a check: it makes the figures
// of docs/scaling.md on a real redis-server (Redis CPU per lease call:
// TestRedisCPUPerLease, in remote). Run it with
//
//	RATELEASE_MEASURE=1 go test -run TestScalingFigures -v ./internal/systest
func TestScalingFigures(t *testing.T) {
	redistest.Measure(t)
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
				before := redistest.InfoField(t, c, "memory", "used_memory")
				for k := 0; k < keys; k++ {
					if _, err := l.AllowN(ctx, p, fmt.Sprintf("user:%08d", k), 1); err != nil {
						t.Fatal(err)
					}
					for r := 1; r < reqs; r++ {
						_, _ = l.AllowN(ctx, p, fmt.Sprintf("user:%08d", k), 1)
					}
				}
				after := redistest.InfoField(t, c, "memory", "used_memory")
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
			ins := newInstances(t, instances, clientsTo(t, srv.Addr), engine(ratelease.LeaseConfig{})...)
			cmds := redistest.InfoField(t, c, "stats", "total_commands_processed")
			start := time.Now()
			var wg sync.WaitGroup
			for _, in := range ins {
				wg.Go(func() { pace(start, perInstance, runFor, 1, func(int) { in.allowN(p, "hot", 1) }) })
			}
			wg.Wait()
			secs := time.Since(start).Seconds()
			var decisions, roundTrips uint64
			var per []uint64
			for i, in := range ins {
				in.check(t, fmt.Sprintf("instance %d", i))
				s := in.l.Stats()
				decisions += s.Allowed + s.Denied
				roundTrips += s.RoundTrips
				per = append(per, s.Allowed)
			}
			used := redistest.InfoField(t, c, "stats", "total_commands_processed") - cmds - 1 // the INFO itself
			admitted := sum(ins).admitted
			closeAll(ins)
			t.Logf("| %d/s | %.0f | %.0f | %v | %.0f | %.0f | %.0f |", limit, float64(decisions)/secs, float64(admitted)/secs, per,
				float64(roundTrips)/secs, used/secs, float64(decisions)/secs)
		}
	})
}
