package systest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// Policies made at run time (one per request, from a plan or a claim) do
// not accumulate: in lease mode a policy's state in the Limiter goes with
// its last key, which WithMaxKeys bounds; in exact mode it goes when the
// policy is collected. The policy can be collected, and its counters go to
// Stats.DroppedPolicies.
func TestPoliciesMadeAtRunTimeDoNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("40k policies")
	}
	// A redis-server, not miniredis: miniredis would keep the keys in this
	// heap.
	srv := redistest.Start(t)
	for _, c := range []struct {
		name string
		n    int
		opt  ratelease.Option
	}{
		{"lease", 40_000, ratelease.WithLease(ratelease.LeaseConfig{})}, // (a leak of 250 B a policy grows it 9.5 MB, past its 8 MB)
		{"exact", 15_000, ratelease.WithExact()},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := ratelease.New(srv.Client(t), c.opt, ratelease.WithMaxKeys(1000))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := context.Background()
			var busy atomic.Int64
			// decide makes policies from to to, one decision each, on
			// goroutines of their own (a service's requests come side by
			// side; one after the other, the run took 19s under -race).
			decide := func(from, to int) {
				const goroutines = 4
				var wg sync.WaitGroup
				for g := range goroutines {
					wg.Go(func() {
						for i := from + g; i < to && !t.Failed(); i += goroutines {
							p, err := ratelease.NewPolicy(fmt.Sprintf("%s-%d", c.name, i), ratelease.PerSecond(10))
							if err != nil {
								t.Error(err)
								return
							}
							// Each policy's first decision is admitted, but
							// for a call that timed out on a Redis answering
							// others (SourceBusy: the -race run of a loaded
							// machine): the heap, not the verdicts, is what
							// this test measures.
							res, err := l.Allow(ctx, p, "k")
							if res.Source == ratelease.SourceBusy && err == nil {
								busy.Add(1)
							} else if err != nil || !res.Allowed {
								t.Errorf("policy %d: %+v, %v", i, res, err)
								return
							}
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					t.FailNow()
				}
			}
			const warm = 2000 // the first policies warm everything up
			decide(0, warm)
			before := heap()
			decide(warm, c.n)
			after := heap()
			growth := int64(after) - int64(before)
			t.Logf("heap %.1f MB after %dk policies, %.1f MB after %dk: growth %.2f MB (%.0f B a policy)",
				float64(before)/1e6, warm/1000, float64(after)/1e6, c.n/1000, float64(growth)/1e6, float64(growth)/float64(c.n-warm))
			if growth > 20e6*int64(c.n)/100_000 {
				t.Fatalf("the heap grew %.1f MB over %d policies", float64(growth)/1e6, c.n-warm)
			}
			s := l.Stats()
			if d := s.DroppedPolicies.Allowed; d < uint64(c.n)/2 {
				t.Errorf("%d policies' decisions dropped, %d policies held", d, len(s.Policies))
			}
			t.Logf("%d policies held; decisions of dropped ones: %d; denied busy: %d", len(s.Policies), s.DroppedPolicies.Allowed, busy.Load())
		})
	}
}

// heap returns the bytes of live objects, after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC() // what the cleanups of the first dropped may go now
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
