package systest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A limit raised and lowered mid-run under one name (a config reload that
// rebuilds the policy), on a real redis-server, two instances driving one
// key flat out, in lease and exact mode: each phase admits within its own
// limit's bound, Burst + Rate·(T + TTL) (TTL 0 in exact mode), T its span
// in Redis time (plus what the failure mode admitted, should a Redis call
// have failed); the raised limit admits more than the earlier one could
// have in that span, and the lowered one holds at once (the usage carried
// over is far above it, so it admits next to nothing). No call fails:
// requests in flight with the earlier policy are decided as usual.
func TestLimitChangedMidRun(t *testing.T) {
	srv := redistest.Start(t)
	now := redisClock(t, srv.Client(t))
	redisTime := func() time.Time { return time.UnixMicro(now()) }
	phases := []struct {
		rate int
		run  time.Duration
	}{{200, time.Second}, {800, 2 * time.Second}, {50, time.Second}}
	for _, exact := range []bool{false, true} {
		name := map[bool]string{false: "lease", true: "exact"}[exact]
		t.Run(name, func(t *testing.T) {
			opt := ratelease.WithLease(ratelease.LeaseConfig{})
			ttl := ratelease.DefaultLeaseConfig().TTL
			if exact {
				opt, ttl = ratelease.WithExact(), 0
			}
			// A Redis timeout of 2 s: a loaded machine's slow replies are
			// waited for, not decided by the failure mode (whose units
			// would come on top of the bound: they are added to it).
			ls := limiters(newInstances(t, 2, clientsTo(t, srv.Addr), opt, ratelease.WithRedisTimeout(2*time.Second)))
			type phase struct {
				p        *ratelease.Policy
				i        int
				admitted atomic.Int64
				fallback atomic.Int64 // admitted by the failure mode
			}
			var cur atomic.Pointer[phase]
			const perLimiter = 4
			seen := make([]atomic.Int64, len(ls)*perLimiter) // the phase each goroutine last used
			var failures atomic.Int64
			var firstErr atomic.Pointer[error]
			stop := make(chan struct{})
			var wg sync.WaitGroup
			run := func() {
				for g := range seen {
					wg.Add(1)
					go func() {
						defer wg.Done()
						l := ls[g/perLimiter]
						for {
							select {
							case <-stop:
								return
							default:
							}
							ph := cur.Load()
							r, err := l.Allow(context.Background(), ph.p, "tenant-42")
							switch {
							case err != nil:
								if failures.Add(1) == 1 {
									firstErr.Store(&err)
								}
							case r.Allowed:
								ph.admitted.Add(1)
								if r.Source == ratelease.SourceFallback {
									ph.fallback.Add(1)
								}
							}
							seen[g].Store(int64(ph.i))
						}
					}()
				}
			}
			// settled waits until every goroutine has decided with phase i.
			settled := func(i int) {
				for g := range seen {
					for seen[g].Load() < int64(i) {
						time.Sleep(time.Millisecond)
					}
				}
			}
			all := make([]*phase, len(phases))
			// A phase spans from before its policy is stored to after every
			// goroutine has decided with the next one: its decisions all
			// fall inside (spans overlap, which only widens the bounds).
			starts := make([]time.Time, len(phases))
			spans := make([]time.Duration, len(phases))
			for i, ph := range phases {
				p, err := ratelease.NewPolicy("reload-"+name, ratelease.PerSecond(ph.rate))
				if err != nil {
					t.Fatal(err)
				}
				all[i] = &phase{p: p, i: i + 1}
				starts[i] = redisTime()
				cur.Store(all[i])
				if i == 0 {
					run()
				}
				if i > 0 {
					settled(i + 1) // no decision of phase i is still in flight
					spans[i-1] = redisTime().Sub(starts[i-1])
				}
				time.Sleep(ph.run)
			}
			close(stop)
			wg.Wait()
			spans[len(phases)-1] = redisTime().Sub(starts[len(phases)-1])
			if n := failures.Load(); n > 0 {
				t.Fatalf("%d calls failed, the first: %v", n, *firstErr.Load())
			}
			bound := func(rate int, span time.Duration) float64 {
				return float64(rate) + float64(rate)*(span+ttl).Seconds()
			}
			for i, ph := range phases {
				got, fallback := all[i].admitted.Load(), all[i].fallback.Load()
				b := bound(ph.rate, spans[i]) + float64(fallback)
				t.Logf("phase %d, %d/s for %v: admitted %d (%d by the failure mode), bound %.0f", i+1, ph.rate, spans[i].Round(time.Millisecond), got, fallback, b)
				if float64(got) > b {
					t.Errorf("phase %d (%d/s): admitted %d > bound %.0f", i+1, ph.rate, got, b)
				}
			}
			// Raised: more than the earlier limit could have admitted.
			if got, was := all[1].admitted.Load(), bound(phases[0].rate, spans[1]); float64(got) <= was {
				t.Errorf("raised to %d/s: admitted %d, no more than %d/s allows (%.0f)", phases[1].rate, got, phases[0].rate, was)
			}
		})
	}
}
