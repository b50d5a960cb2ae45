package ratelease_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// loadResult is what one phase of degradedLoad saw.
type loadResult struct {
	decisions, admitted, errors int64
	sources                     map[ratelease.Source]int64
	latencies                   []time.Duration
}

func (r *loadResult) percentile(p float64) time.Duration {
	slices.Sort(r.latencies)
	return r.latencies[int(float64(len(r.latencies)-1)*p)]
}

// degradedLoad runs 8 goroutines of Allow on one key through l, and calls
// phase at each boundary; it returns what each phase saw.
func degradedLoad(t *testing.T, l *ratelease.Limiter, p *ratelease.Policy, phases []time.Duration, at func(i int)) []*loadResult {
	t.Helper()
	results := make([]*loadResult, len(phases))
	var current atomic.Int32
	var mu sync.Mutex
	for i := range results {
		results[i] = &loadResult{sources: map[ratelease.Source]int64{}}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				res, err := l.Allow(context.Background(), p, "k")
				lat := time.Since(start)
				mu.Lock()
				r := results[current.Load()]
				r.decisions++
				r.latencies = append(r.latencies, lat)
				if err != nil {
					r.errors++
				} else {
					r.sources[res.Source]++
					if res.Allowed {
						r.admitted++
					}
				}
				mu.Unlock()
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	for i, d := range phases {
		mu.Lock()
		current.Store(int32(i))
		mu.Unlock()
		at(i)
		time.Sleep(d)
	}
	close(stop)
	wg.Wait()
	return results
}

// A hung Redis (SIGSTOP) for 2 s under load, in the default FailLocal: no
// error, no request waits much longer than the Redis timeout, the one
// instance keeps to about its limit from its local fallback, and once Redis
// answers again decisions come from it within 2 s.
func TestHungRedisFailsLocal(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	var opened atomic.Int32
	l, err := ratelease.New(c, ratelease.WithObserver(func(s ratelease.BreakerState) {
		if s == ratelease.BreakerOpen {
			opened.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const rate = 1000
	p := policy(t, "hung", ratelease.Limit{Rate: rate, Period: time.Second, Burst: 100})
	paused := false
	defer func() {
		if paused {
			srv.Resume(t)
		}
	}()
	rs := degradedLoad(t, l, p, []time.Duration{500 * time.Millisecond, 2 * time.Second, 2 * time.Second}, func(i int) {
		switch i {
		case 1:
			srv.Pause(t)
			paused = true
		case 2:
			srv.Resume(t)
			paused = false
		}
	})
	hung, after := rs[1], rs[2]
	p99, worst := hung.percentile(0.99), hung.percentile(1)
	perSecond := float64(hung.admitted) / 2
	t.Logf("hung: %d decisions, %d errors, sources %v, admitted %.0f/s, p99 %v, max %v; breaker opened %d times",
		hung.decisions, hung.errors, hung.sources, perSecond, p99, worst, opened.Load())
	t.Logf("after: sources %v", after.sources)
	if hung.errors != 0 {
		t.Errorf("%d errors in FailLocal", hung.errors)
	}
	if p99 > time.Millisecond {
		t.Errorf("p99 %v > 1ms while Redis hung", p99)
	}
	if limit := ratelease.DefaultRedisTimeout + 50*time.Millisecond; worst > limit {
		t.Errorf("a decision took %v > the Redis timeout + 50ms", worst)
	}
	if perSecond < 0.7*rate || perSecond > 1.3*rate {
		t.Errorf("admitted %.0f/s while hung, want %d ± 30%%", perSecond, rate)
	}
	if hung.sources[ratelease.Fallback] < hung.decisions/2 {
		t.Errorf("sources %v: most decisions should be Fallback", hung.sources)
	}
	if after.sources[ratelease.Local]+after.sources[ratelease.Remote] == 0 {
		t.Errorf("Redis back for 2s, and no decision came from it: %v", after.sources)
	}
	if s := l.Stats(); s.Breaker != ratelease.BreakerClosed || s.BreakerOpens == 0 {
		t.Errorf("Stats after recovery: %+v", s)
	}
}

// Close during an outage returns within about one Redis timeout, although
// Redis takes back none of the units held (they return by themselves when
// their keys' state expires); goleak (TestMain) checks nothing is left.
func TestCloseDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	const timeout = 100 * time.Millisecond
	l, err := ratelease.New(c, ratelease.WithRedisTimeout(timeout), ratelease.WithLease(ratelease.LeaseConfig{Min: 10}))
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "close", ratelease.PerSecond(1000))
	for i := 0; i < 50; i++ { // units held on 50 keys
		if _, err := l.Allow(context.Background(), p, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause(t)
	defer srv.Resume(t)
	start := time.Now()
	_ = l.Close()
	took := time.Since(start)
	t.Logf("Close with Redis hung took %v", took)
	if took > timeout+100*time.Millisecond {
		t.Fatalf("Close took %v with a %v Redis timeout", took, timeout)
	}
}
