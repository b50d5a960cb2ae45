package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	unavailable                 int64 // errors that are ErrUnavailable
	lastErr                     error
	fallbackDenied              int64 // denials from the failure mode
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
				switch {
				case err != nil:
					r.errors++
					r.lastErr = err
					if errors.Is(err, ratelease.ErrUnavailable) {
						r.unavailable++
					}
				default:
					r.sources[res.Source]++
					if res.Allowed {
						r.admitted++
					} else if res.Source == ratelease.Fallback {
						r.fallbackDenied++
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

// Faults on real processes, each for 2 s under load (8 goroutines, one
// instance, 1000/s), in the default FailLocal. Through every outage: no
// error, no decision waits much longer than the Redis timeout (p99 under
// 1ms), the instance keeps to its limit ± 30% from its local fallback, and
// within 2 s of Redis answering again decisions come from it. A restart is
// a fresh start, and a flushed script cache heals without a caller seeing
// it.
func TestRedisFaults(t *testing.T) {
	const rate = 1000
	for _, c := range []struct {
		name          string
		outage        bool // Redis cannot answer during the fault
		start, finish func(t *testing.T, srv *redistest.Server, proxy *redistest.Proxy)
	}{
		{"hung", true,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Pause(t) },
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Resume(t) }},
		{"killed", true,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Kill() },
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Restart(t) }},
		{"slow 200ms", true,
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) {
				proxy.SetDelay(200 * time.Millisecond)
			},
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDelay(0) }},
		{"dropped", true,
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDrop(true) },
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDrop(false); proxy.Cut() }},
		{"restarted", false,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Restart(t) },
			func(*testing.T, *redistest.Server, *redistest.Proxy) {}},
		{"script flush", false,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) {
				if err := srv.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			},
			func(*testing.T, *redistest.Server, *redistest.Proxy) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr)
			cl := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = cl.Close() })
			l, err := ratelease.New(cl)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p := policy(t, "fault", ratelease.Limit{Rate: rate, Period: time.Second, Burst: 100})
			faulty := false
			defer func() {
				if faulty {
					c.finish(t, srv, proxy)
				}
			}()
			rs := degradedLoad(t, l, p, []time.Duration{500 * time.Millisecond, 2 * time.Second, 2 * time.Second}, func(i int) {
				switch i {
				case 1:
					c.start(t, srv, proxy)
					faulty = true
				case 2:
					c.finish(t, srv, proxy)
					faulty = false
				}
			})
			during, after := rs[1], rs[2]
			p99, worst := during.percentile(0.99), during.percentile(1)
			perSecond := float64(during.admitted) / 2
			t.Logf("during: %d decisions, %d errors, sources %v, admitted %.0f/s, p99 %v, max %v",
				during.decisions, during.errors, during.sources, perSecond, p99, worst)
			t.Logf("after: %d errors, sources %v; %+v", after.errors, after.sources, l.Stats())
			if during.errors+after.errors != 0 {
				t.Errorf("%d errors during the fault, %d after, in FailLocal", during.errors, after.errors)
			}
			if p99 > time.Millisecond {
				t.Errorf("p99 %v > 1ms during the fault", p99)
			}
			if limit := ratelease.DefaultRedisTimeout + 50*time.Millisecond; worst > limit {
				t.Errorf("a decision took %v > the Redis timeout + 50ms", worst)
			}
			if perSecond < 0.7*rate || perSecond > 1.3*rate {
				t.Errorf("admitted %.0f/s during the fault, want %d ± 30%%", perSecond, rate)
			}
			if c.outage && during.sources[ratelease.Fallback] < during.decisions/2 {
				t.Errorf("sources %v: most decisions should be Fallback", during.sources)
			}
			if !c.outage && during.sources[ratelease.Fallback] != 0 {
				t.Errorf("sources %v: no decision should need the fallback", during.sources)
			}
			if after.sources[ratelease.Local]+after.sources[ratelease.Remote] == 0 {
				t.Errorf("Redis back for 2s, and no decision came from it: %v", after.sources)
			}
			if s := l.Stats(); s.Breaker != ratelease.BreakerClosed {
				t.Errorf("breaker %v after recovery", s.Breaker)
			}
		})
	}
}

// FailOpen and FailClosed through a hung Redis (SIGSTOP for 2 s, 8
// goroutines, one instance): each keeps its contract. FailOpen admits every
// request the failure mode decides, with no error; FailClosed fails every
// request that needs Redis with ErrUnavailable and the cause, and decides
// none by itself. In both, no decision waits much longer than the Redis
// timeout, and decisions come from Redis again once it is back.
func TestFailureModesOnHungRedis(t *testing.T) {
	for _, mode := range []ratelease.FailureMode{ratelease.FailOpen, ratelease.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			cl := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = cl.Close() })
			l, err := ratelease.New(cl, ratelease.WithFailureMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p := policy(t, "mode", ratelease.Limit{Rate: 1000, Period: time.Second, Burst: 100})
			paused := false
			defer func() {
				if paused {
					srv.Resume(t)
				}
			}()
			rs := degradedLoad(t, l, p, []time.Duration{500 * time.Millisecond, 2 * time.Second, 3 * time.Second}, func(i int) {
				switch i {
				case 1:
					srv.Pause(t)
					paused = true
				case 2:
					srv.Resume(t)
					paused = false
				}
			})
			during, after := rs[1], rs[2]
			p99, worst := during.percentile(0.99), during.percentile(1)
			t.Logf("during: %d decisions, %d errors (%d ErrUnavailable), sources %v, %d admitted, p99 %v, max %v; after: %d errors, sources %v",
				during.decisions, during.errors, during.unavailable, during.sources, during.admitted, p99, worst, after.errors, after.sources)
			if p99 > time.Millisecond {
				t.Errorf("p99 %v > 1ms during the fault", p99)
			}
			if limit := ratelease.DefaultRedisTimeout + 50*time.Millisecond; worst > limit {
				t.Errorf("a decision took %v > the Redis timeout + 50ms", worst)
			}
			if after.sources[ratelease.Local]+after.sources[ratelease.Remote] == 0 {
				t.Errorf("Redis back for 3s, and no decision came from it: %v", after.sources)
			}
			switch mode {
			case ratelease.FailOpen:
				if n := rs[0].errors + during.errors + after.errors; n != 0 {
					t.Errorf("%d errors in FailOpen", n)
				}
				if during.sources[ratelease.Fallback] < during.decisions/2 || during.fallbackDenied != 0 {
					t.Errorf("FailOpen: %d of %d decisions from the fallback, %d of them denials; want most, and none denied",
						during.sources[ratelease.Fallback], during.decisions, during.fallbackDenied)
				}
			case ratelease.FailClosed:
				if during.unavailable < during.decisions/2 || during.unavailable != during.errors {
					t.Errorf("FailClosed: %d ErrUnavailable, %d errors in all, of %d decisions; want most, and no other error",
						during.unavailable, during.errors, during.decisions)
				}
				// It wraps the cause too: the timeout, or the open breaker.
				if w, ok := during.lastErr.(interface{ Unwrap() []error }); !ok || len(w.Unwrap()) < 2 {
					t.Errorf("FailClosed: %v wraps no cause beside ErrUnavailable", during.lastErr)
				}
				if n := during.sources[ratelease.Fallback] + after.sources[ratelease.Fallback]; n != 0 {
					t.Errorf("FailClosed decided %d requests by itself", n)
				}
				if after.errors != after.unavailable {
					t.Errorf("after: %d errors, %d of them ErrUnavailable", after.errors, after.unavailable)
				}
			}
		})
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

// Chaos: for 20 s, faults picked at random with a fixed seed (hung, killed
// and restarted, slow, dropped, none) under load on three FailLocal
// instances sharing one key, and one FailOpen instance on another. No call
// fails, nothing panics, and the three together never admit more than
// Burst + Rate·T plus the documented outage allowance: 2·Burst per outage
// of an instance, shared by the instances (its fallback's fresh burst, and
// the bucket's refill should the recovery charge fail), and Burst per
// restart of Redis (an empty Redis starts full).
func TestChaos(t *testing.T) {
	const (
		rate, burst = 1000, 100
		instances   = 3
		runFor      = 20 * time.Second
	)
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	newLimiter := func(opts ...ratelease.Option) *ratelease.Limiter {
		c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		l, err := ratelease.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	p := policy(t, "chaos", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	var ls []*ratelease.Limiter
	for i := 0; i < instances; i++ {
		ls = append(ls, newLimiter(ratelease.WithInstances(instances)))
	}
	open := newLimiter(ratelease.WithFailureMode(ratelease.FailOpen))

	var admitted, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	load := func(l *ratelease.Limiter, key string, count bool) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := l.Allow(context.Background(), p, key)
			if err != nil {
				errs.Add(1)
				t.Errorf("Allow: %v", err)
				return
			}
			if count && res.Allowed {
				admitted.Add(1)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	start := time.Now()
	for _, l := range ls {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go load(l, "shared", true)
		}
	}
	wg.Add(1)
	go load(open, "open", false)

	rng := rand.New(rand.NewPCG(2026, 11))
	restarts := 0
	for time.Since(start) < runFor-2*time.Second {
		hold := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		switch rng.IntN(5) {
		case 0: // none
			time.Sleep(hold)
		case 1:
			srv.Pause(t)
			time.Sleep(hold)
			srv.Resume(t)
		case 2:
			srv.Kill()
			time.Sleep(hold)
			srv.Restart(t)
			restarts++
		case 3:
			proxy.SetDelay(200 * time.Millisecond)
			time.Sleep(hold)
			proxy.SetDelay(0)
		case 4:
			proxy.SetDrop(true)
			time.Sleep(hold)
			proxy.SetDrop(false)
			proxy.Cut()
		}
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // some calm between faults
	}
	time.Sleep(runFor - time.Since(start))
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)

	var opens uint64
	for _, l := range ls {
		s := l.Stats()
		opens += s.BreakerOpens
		_ = l.Close()
	}
	_ = open.Close()
	allowance := 2*burst*float64(opens)/instances + burst*float64(restarts)
	bound := burst + rate*elapsed.Seconds() + allowance
	got := float64(admitted.Load())
	t.Logf("admitted %.0f in %v; bound %.0f (Burst + Rate·T %.0f, %d breaker openings, %d restarts); %d errors",
		got, elapsed, bound, burst+rate*elapsed.Seconds(), opens, restarts, errs.Load())
	if got > bound {
		t.Fatalf("admitted %.0f > %.0f", got, bound)
	}
}
