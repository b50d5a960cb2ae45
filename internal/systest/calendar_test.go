package systest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A calendar quota in lease mode on real Redis (one server, and a
// 3-master cluster): four instances flood a key for a second, with a rate
// limit beside the quota; the day's quota is never passed, and is taken
// whole. The day is that of a zone whose midnight is twelve hours away
// (a fixed offset from this moment), so that no window ends in the run.
func TestCalendarQuotaOnRealRedis(t *testing.T) {
	now := time.Now().UTC()
	noon := time.Date(now.Year(), now.Month(), now.Day(), 12, 0, 0, 0, time.UTC)
	loc := time.FixedZone("ratelease-test-noon", int(noon.Sub(now).Round(time.Minute).Seconds()))
	const quota = 3000
	p := policy(t, "calq", ratelease.PerSecond(20000), ratelease.PerCalendarDay(quota, loc))
	for _, c := range []struct {
		name    string
		clients func(t *testing.T) func() redis.UniversalClient
	}{
		{"one server", func(t *testing.T) func() redis.UniversalClient { return clientsTo(t, redistest.Start(t).Addr) }},
		{"cluster", func(t *testing.T) func() redis.UniversalClient {
			return clusterClients(t, redistest.StartCluster(t, 3))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ins := newInstances(t, 4, c.clients(t), ratelease.WithRedisTimeout(2*time.Second))
			defer closeAll(ins)
			var wg sync.WaitGroup
			stop := time.Now().Add(time.Second)
			for _, in := range ins {
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for time.Now().Before(stop) {
							in.allowN(p, "k", 1)
						}
					}()
				}
			}
			wg.Wait()
			for i, in := range ins {
				in.check(t, "instance "+string(rune('0'+i)))
			}
			tot := sum(ins)
			t.Logf("admitted %d of a quota of %d; %d decisions, %d round trips", tot.units, quota, tot.decisions, tot.trips)
			atMost(t, "the day's quota", float64(tot.units), quota)
			atLeast(t, "the day's quota", float64(tot.units), quota, 0.97, 0.9)
		})
	}
}
