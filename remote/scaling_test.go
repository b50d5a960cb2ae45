package remote_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// BenchmarkRedisCPUPerLease is the Redis CPU that one lease call costs
// (docs/scaling.md): the acquire script, in pipelines of 16 from 8
// goroutines, over 10,000 keys, each op one call, on a redis-server of its
// own. redis-cpu-µs/call is INFO cpu's used_cpu_user and used_cpu_sys over
// the calls: its inverse is the lease calls one Redis core serves a
// second. Run it with
//
//	go test -run '^$' -bench '^BenchmarkRedisCPUPerLease$' -benchtime 3s ./remote
func BenchmarkRedisCPUPerLease(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).Client(b)
	store := remote.NewStore(c, "cpu")
	p := mustPolicy(b, "cpu", tb(1000, 1000, time.Second))
	const goroutines, batch = 8, 16
	cpu := func() float64 {
		return redistest.InfoField(b, c, "cpu", "used_cpu_user") + redistest.InfoField(b, c, "cpu", "used_cpu_sys")
	}
	batches := int64((b.N + batch - 1) / batch)
	cpu0 := cpu()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			rs := make([]remote.Request, batch)
			for n := next.Add(1) - 1; n < batches; n = next.Add(1) - 1 {
				for i := range rs {
					rs[i] = remote.Request{Policy: p, Key: fmt.Sprintf("k%d", (n*batch+int64(i))%10000), Min: 1, Max: 100, Member: "m", Demand: 100, Horizon: 250 * time.Millisecond}
				}
				_, errs := store.AcquireBatch(ctx, rs)
				for _, err := range errs {
					if err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	used := cpu() - cpu0
	b.ReportMetric(used/float64(batches*batch)*1e6, "redis-cpu-µs/call")
}

// BenchmarkLeaseCallByMembers times one lease call (the acquire script, a
// token bucket under the fair share: the members want ten times the rate)
// on a key whose members hash holds 10 to 10,000 members, for the sizes of
// fleet one machine cannot drive (docs/scaling.md): members that all want
// the same (equal), and members whose demands spread from 1 to 10^6 units
// a second (spread). Each call is made by
// the next member in turn; redis-µs/call is the script's usec_per_call
// from INFO commandstats over the timed calls, the figure to compare
// (ns/op adds the loopback round trip). Run it with
//
//	go test -run '^$' -bench LeaseCallByMembers -benchmem -count 6 ./remote
func BenchmarkLeaseCallByMembers(b *testing.B) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redistest.BenchAddr(b)})
	defer c.Close()
	for _, c2 := range []struct {
		members int
		spread  bool
	}{{10, false}, {100, false}, {1000, false}, {10000, false}, {10, true}, {100, true}, {1000, true}, {10000, true}} {
		members := c2.members
		demands := "equal"
		if c2.spread {
			demands = "spread"
		}
		b.Run(fmt.Sprintf("members=%d/demands=%s", members, demands), func(b *testing.B) {
			store := remote.NewStore(c, fmt.Sprintf("bm%d%s", members, demands))
			p := mustPolicy(b, "p", tb(3000, 3000, time.Second))
			req := func(i int) remote.Request {
				m := i % members
				demand := int64(30000) // each member: ten times the key's rate
				if c2.spread {
					demand = 1 + int64(m*7919%1_000_000)
				}
				// A long horizon, so that no member lapses while the hash fills.
				return remote.Request{Policy: p, Key: "k", Min: 1, Max: 100,
					Member: fmt.Sprintf("m%05d", m), Demand: demand, Horizon: 20 * time.Second}
			}
			// Fill the hash: every member leases once, 100 calls a pipeline.
			for i := 0; i < members; i += 100 {
				rs := make([]remote.Request, 0, 100)
				for j := i; j < min(i+100, members); j++ {
					rs = append(rs, req(j))
				}
				if _, errs := store.AcquireBatch(ctx, rs); errs != nil {
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			// Warm up (the hash's table settles after its growth), then
			// count from a clean slate.
			for i := range 1000 {
				if _, err := store.Acquire(ctx, req(i)); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := store.Acquire(ctx, req(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			usec, calls := redistest.ScriptStats(b, c)
			b.ReportMetric(usec/calls, "redis-µs/call")
		})
	}
}
