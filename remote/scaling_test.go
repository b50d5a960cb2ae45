package remote_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// TestRedisCPUPerLease is a measurement, not a check: the Redis CPU that
// one lease call costs (the acquire script, in pipelines of 16 from 8
// goroutines, over 10,000 keys), for docs/scaling.md. Run it with
//
//	RATELEASE_MEASURE=1 go test -run TestRedisCPUPerLease -v ./remote
func TestRedisCPUPerLease(t *testing.T) {
	redistest.Measure(t)
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	store := remote.NewStore(c, "cpu")
	p := mustPolicy(t, "cpu", tb(1000, 1000, time.Second))
	const goroutines, batch, runFor = 8, 16, 3 * time.Second
	cpu := func() float64 {
		return redistest.InfoField(t, c, "cpu", "used_cpu_user") + redistest.InfoField(t, c, "cpu", "used_cpu_sys")
	}
	cpu0 := cpu()
	var calls atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(runFor)
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	used := cpu() - cpu0
	n := float64(calls.Load())
	t.Logf("%0.f lease calls in %v (pipelines of %d from %d goroutines): %.1f µs of Redis CPU each, %.0f calls per Redis CPU-second",
		n, runFor, batch, goroutines, used/n*1e6, n/used)
}
