package systest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// The quotas on every deployment of real Redis (one server, a 3-master
// cluster, a Ring of 3, a primary behind Sentinel), in lease mode: a
// calendar quota flooded by four instances for a second, with a rate limit
// beside it, is never passed and is taken whole (the day is that of a
// zone whose midnight is twelve hours away, a fixed offset from this
// moment, so that no window ends in the run; flooded past the second
// until it denies, so that a slow machine's run is whole too); and
// permits, acquired and released by eight goroutines of four instances,
// leased and exact, are never held past their limit (counted from just
// after each acquire to just before its release); and a cost charged past
// a limit leaves its debt.
func TestQuotasOnEveryDeployment(t *testing.T) {
	now := time.Now().UTC()
	noon := time.Date(now.Year(), now.Month(), now.Day(), 12, 0, 0, 0, time.UTC)
	loc := time.FixedZone("ratelease-test-noon", int(noon.Sub(now).Round(time.Minute).Seconds()))
	const quota, permits = 3000, 5
	for _, c := range []struct {
		name    string
		clients func(t *testing.T) func() redis.UniversalClient
	}{
		{"one server", func(t *testing.T) func() redis.UniversalClient { return clientsTo(t, redistest.Start(t).Addr) }},
		{"cluster", func(t *testing.T) func() redis.UniversalClient {
			return clusterClients(t, redistest.StartCluster(t, 3))
		}},
		{"ring", func(t *testing.T) func() redis.UniversalClient {
			addrs := map[string]string{}
			for i := range 3 {
				addrs[fmt.Sprintf("shard%d", i)] = redistest.Start(t).Addr
			}
			return func() redis.UniversalClient {
				ring := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = ring.Close() })
				return ring
			}
		}},
		{"sentinel", func(t *testing.T) func() redis.UniversalClient {
			s := redistest.StartSentinel(t, "quotas")
			return func() redis.UniversalClient {
				c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: []string{s.Addr}, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clients := c.clients(t)
			p := policy(t, "calq", ratelease.PerSecond(20000), ratelease.PerCalendarDay(quota, loc))
			ins := newInstances(t, 4, clients, ratelease.WithRedisTimeout(2*time.Second))
			exact := newInstances(t, 1, clients, ratelease.WithRedisTimeout(2*time.Second), ratelease.WithExact())
			defer closeAll(append(ins, exact...))
			con, err := ratelease.NewConcurrency("permq", permits, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var inFlight, most, held atomic.Int64
			// The flood goes on for a second, and after it until the
			// day's quota denies it (a denial for longer than a minute:
			// the rate limit's are shorter), for at most 10 s: a loaded
			// machine takes longer to use the quota, not less of it.
			stop := time.Now().Add(time.Second)
			for i, in := range append(ins, exact...) {
				for range 2 {
					wg.Go(func() {
						for last := stop.Add(9 * time.Second); time.Now().Before(last); {
							res, err := in.l.Allow(context.Background(), p, "k")
							if err != nil {
								in.fail(err)
								return
							}
							in.count(res, 1)
							if !res.Allowed && res.RetryAfter > time.Minute && time.Now().After(stop) {
								return
							}
						}
					})
					wg.Go(func() {
						for time.Now().Before(stop) {
							pm, _, err := in.l.AcquirePermit(context.Background(), con, "k")
							if err != nil {
								in.fail(err)
								return
							}
							if pm == nil {
								time.Sleep(time.Millisecond)
								continue
							}
							n := inFlight.Add(1)
							for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
							}
							held.Add(1)
							time.Sleep(time.Duration(1+i%3) * time.Millisecond)
							inFlight.Add(-1)
							if err := pm.Release(context.Background()); err != nil {
								in.fail(err)
							}
						}
					})
				}
			}
			wg.Wait()
			for i, in := range append(ins, exact...) {
				in.check(t, fmt.Sprintf("instance %d", i))
			}
			tot, ex := sum(ins), sum(exact)
			tot.units, tot.fallbackUnits = tot.units+ex.units, tot.fallbackUnits+ex.fallbackUnits
			t.Logf("admitted %d of a quota of %d (%d by the failure mode); %d permits held, at most %d at once (limit %d)",
				tot.units, quota, tot.fallbackUnits, held.Load(), most.Load(), permits)
			// (What the failure mode admitted, a Redis call timing out on a
			// loaded machine, is the failure mode's, as in every bound here.)
			atMost(t, "the day's quota", float64(tot.units), quota+float64(tot.fallbackUnits))
			atLeast(t, "the day's quota", float64(tot.units), quota, 0.9)
			if most.Load() > permits || held.Load() < 100 {
				t.Errorf("%d permits held, at most %d at once; want at most %d, and permits served", held.Load(), most.Load(), permits)
			}
			// A cost settled past the limit leaves a debt, leased or
			// exact: 100 a minute, 60 reserved, 90 charged after.
			for i, in := range []*instance{ins[0], exact[0]} {
				key := fmt.Sprintf("settle%d", i)
				tokens := policy(t, "tokens", ratelease.PerMinute(100))
				if res, err := in.l.AllowN(context.Background(), tokens, key, 60); err != nil || !res.Allowed {
					t.Fatalf("instance %d: the estimate: %+v, %v", i, res, err)
				}
				res, err := in.l.Charge(context.Background(), tokens, key, 90)
				if err != nil || res.Debt != 50 || res.RetryAfter < 30*time.Second {
					t.Fatalf("instance %d: Charge(90): %+v, %v; want a debt of 50, half a minute's refill and more", i, res, err)
				}
			}
		})
	}
}
