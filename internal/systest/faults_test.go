package systest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// defaultRedisTimeout is WithRedisTimeout's default, which these Limiters
// keep.
const defaultRedisTimeout = 100 * time.Millisecond

// Faults on real processes, each for 2 s under load (8 goroutines, one
// instance, 1000/s), in the default FailLocal. Through every outage: no
// error, no decision waits much longer than the Redis timeout (p99 under
// 1ms, each bound lengthened by the scheduler's lag: see checkLatency),
// the instance keeps to its limit ± 30% from its local fallback, and
// within 2 s of Redis answering again decisions come from it. A restart is
// a fresh start: the failure mode decides only while Redis is down (from
// the kill until the new server answers) and until the breaker's next
// probe finds it back; a flushed script cache heals without a caller
// seeing it: the failure mode decides nothing.
func TestRedisFaults(t *testing.T) {
	const rate = 1000
	for _, c := range []struct {
		name string
		// outage: Redis cannot answer from start until finish. down: start
		// leaves Redis unable to answer for a moment (it kills and restarts
		// it), and Redis answers when start returns.
		outage, down  bool
		start, finish func(t *testing.T, srv *redistest.Server, proxy *redistest.Proxy)
	}{
		{"hung", true, false,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Pause(t) },
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Resume(t) }},
		{"killed", true, false,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Kill() },
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Restart(t) }},
		{"slow 200ms", true, false,
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) {
				proxy.SetDelay(200 * time.Millisecond)
			},
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDelay(0) }},
		{"dropped", true, false,
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDrop(true) },
			func(t *testing.T, _ *redistest.Server, proxy *redistest.Proxy) { proxy.SetDrop(false); proxy.Cut() }},
		{"restarted", false, true,
			func(t *testing.T, srv *redistest.Server, _ *redistest.Proxy) { srv.Restart(t) },
			func(*testing.T, *redistest.Server, *redistest.Proxy) {}},
		{"script flush", false, false,
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
			// An outage is met with the default timeout. Where Redis is up,
			// a timeout of 1 s keeps a loaded machine's slow replies from
			// passing for a fault: what the failure mode decides there is
			// the fault's doing.
			timeout := defaultRedisTimeout
			if !c.outage {
				timeout = time.Second
			}
			l, err := ratelease.New(dial(t, proxy.Addr), ratelease.WithRedisTimeout(timeout))
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
			var faultFrom, faultTo time.Time // start's call
			phases := phasedLoad(t, []*ratelease.Limiter{l}, loadSpec{goroutines: 8, pause: 50 * time.Microsecond, keys: []string{"k"}}, p,
				[]time.Duration{500 * time.Millisecond, 2 * time.Second, 2 * time.Second}, func(i int) {
					switch i {
					case 1:
						faultFrom = time.Now()
						c.start(t, srv, proxy)
						faultTo = time.Now()
						faulty = true
					case 2:
						c.finish(t, srv, proxy)
						faulty = false
					}
				})
			during, after := phases[1].keys[0], phases[2].keys[0]
			perSecond := float64(during.admitted) / phases[1].seconds()
			t.Logf("during: %d decisions, %d errors, sources %v, admitted %.0f/s over %.2fs",
				during.decisions, during.errors, during.sources, perSecond, phases[1].seconds())
			t.Logf("after: %d errors, sources %v; %+v", after.errors, after.sources, l.Stats())
			if during.errors+after.errors != 0 {
				t.Errorf("%d errors during the fault, %d after, in FailLocal (last: %v)", during.errors, after.errors, after.lastErr)
			}
			checkLatency(t, "during the fault", during, phases[1].lag, timeout)
			if perSecond < 0.7*rate || perSecond > 1.3*rate {
				t.Errorf("admitted %.0f/s during the fault, want %d ± 30%%", perSecond, rate)
			}
			fallback := during.sources[ratelease.SourceFallback]
			switch {
			case c.outage:
				if fallback < during.decisions/2 {
					t.Errorf("sources %v: most decisions should be Fallback", during.sources)
				}
			case c.down:
				// Redis was down for at most down, within start. A breaker
				// that opened meanwhile probes again, its backoff doubled
				// from 100ms after each failed probe, at most down and
				// 100ms after Redis answers; a call may take the timeout,
				// and a goroutine the scheduler's lag to begin it.
				down := faultTo.Sub(faultFrom)
				latest := faultTo.Add(down + 100*time.Millisecond + timeout + phases[1].lag.percentile(1))
				t.Logf("Redis down for at most %v: %d decisions by the failure mode", down, fallback)
				if fallback > 0 && during.lastFallback.After(latest) {
					t.Errorf("sources %v: a decision by the failure mode began %v after Redis answered again (down for %v); the breaker's probe finds it within %v",
						during.sources, during.lastFallback.Sub(faultTo), down, latest.Sub(faultTo))
				}
			default:
				if fallback != 0 {
					t.Errorf("sources %v: no decision should need the fallback", during.sources)
				}
			}
			if after.sources[ratelease.SourceLocal]+after.sources[ratelease.SourceRemote] == 0 {
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
// timeout (see checkLatency), and decisions come from Redis again once it
// is back.
func TestFailureModesOnHungRedis(t *testing.T) {
	for _, mode := range []ratelease.FailureMode{ratelease.FailOpen, ratelease.FailClosed} {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			l, err := ratelease.New(dial(t, srv.Addr), ratelease.WithFailureMode(mode))
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
			phases := phasedLoad(t, []*ratelease.Limiter{l}, loadSpec{goroutines: 8, pause: 50 * time.Microsecond, keys: []string{"k"}}, p,
				[]time.Duration{500 * time.Millisecond, 2 * time.Second, 3 * time.Second}, func(i int) {
					switch i {
					case 1:
						srv.Pause(t)
						paused = true
					case 2:
						srv.Resume(t)
						paused = false
					}
				})
			before, during, after := phases[0].keys[0], phases[1].keys[0], phases[2].keys[0]
			t.Logf("during: %d decisions, %d errors (%d ErrUnavailable), sources %v, %d admitted; after: %d errors, sources %v",
				during.decisions, during.errors, during.unavailable, during.sources, during.admitted, after.errors, after.sources)
			checkLatency(t, "during the fault", during, phases[1].lag, defaultRedisTimeout)
			if after.sources[ratelease.SourceLocal]+after.sources[ratelease.SourceRemote] == 0 {
				t.Errorf("Redis back for 3s, and no decision came from it: %v", after.sources)
			}
			switch mode {
			case ratelease.FailOpen:
				if n := before.errors + during.errors + after.errors; n != 0 {
					t.Errorf("%d errors in FailOpen", n)
				}
				if during.sources[ratelease.SourceFallback] < during.decisions/2 || during.fallbackDenied != 0 {
					t.Errorf("FailOpen: %d of %d decisions from the fallback, %d of them denials; want most, and none denied",
						during.sources[ratelease.SourceFallback], during.decisions, during.fallbackDenied)
				}
			case ratelease.FailClosed:
				if during.unavailable < during.decisions/2 || during.unavailable != during.errors {
					t.Errorf("FailClosed: %d ErrUnavailable, %d errors in all, of %d decisions; want most, and no other error",
						during.unavailable, during.errors, during.decisions)
				}
				// It wraps the cause too: the timeout, or the open breaker
				// (down the chain: the root's error wraps the engine's).
				wraps := false
				for err := during.lastErr; err != nil && !wraps; err = errors.Unwrap(err) {
					w, ok := err.(interface{ Unwrap() []error })
					wraps = ok && len(w.Unwrap()) >= 2
				}
				if !wraps {
					t.Errorf("FailClosed: %v wraps no cause beside ErrUnavailable", during.lastErr)
				}
				if n := during.sources[ratelease.SourceFallback] + after.sources[ratelease.SourceFallback]; n != 0 {
					t.Errorf("FailClosed decided %d requests by itself", n)
				}
				if after.errors != after.unavailable {
					t.Errorf("after: %d errors, %d of them ErrUnavailable", after.errors, after.unavailable)
				}
			}
		})
	}
}

// Close during an outage returns within about one Redis timeout (and
// 100ms, and the scheduler's worst lag meanwhile), although Redis takes
// back none of the units held (they return by themselves when their keys'
// state expires); goleak (TestMain) checks nothing is left.
func TestCloseDuringOutage(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 100 * time.Millisecond
	l, err := ratelease.New(dial(t, srv.Addr), ratelease.WithRedisTimeout(timeout), ratelease.WithLease(ratelease.LeaseConfig{Min: 10}))
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
	lag := &lagProbe{}
	stop := make(chan struct{})
	var probe sync.WaitGroup
	probe.Go(func() { lag.run(stop) })
	start := time.Now()
	_ = l.Close()
	took := time.Since(start)
	close(stop)
	probe.Wait()
	worst := lag.percentile(1)
	t.Logf("Close with Redis hung took %v; the scheduler's worst lag meanwhile %v", took, worst)
	if limit := timeout + 100*time.Millisecond + worst; took > limit {
		t.Fatalf("Close took %v with a %v Redis timeout (the scheduler's worst lag: %v)", took, timeout, worst)
	}
}
