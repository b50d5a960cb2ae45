package systest_test

// The loads the system tests put on Limiters: skewed floods (skewedLoad),
// paced demand (pace), flat out (flatOut), and phases around a fault
// (phasedLoad), with the scheduler's lag measured meanwhile (lagProbe).

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
)

// skewedLoad runs Allow (or Wait) on keys of p through every instance for
// d: instance i from i+1 goroutines, each taking the keys in turn and
// pausing now and then at random. It returns the requests admitted per key
// and the decisions made; the instances count theirs too.
func skewedLoad(t *testing.T, ins []*instance, p *ratelease.Policy, keys []string, d time.Duration, wait bool) (admitted []int64, decisions int64) {
	t.Helper()
	adm := make([]atomic.Int64, len(keys))
	var dec atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), stop)
	defer cancel()
	for i, in := range ins {
		for g := 0; g <= i; g++ {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i*10+g), 1))
				for n := 0; time.Now().Before(stop); n++ {
					k := n % len(keys)
					var ok bool
					if wait {
						err := in.l.Wait(ctx, p, keys[k])
						if errors.Is(err, context.DeadlineExceeded) {
							return
						}
						ok = err == nil
						in.count(ratelease.Result{Allowed: ok}, 1)
					} else {
						res, err := in.l.Allow(ctx, p, keys[k])
						if err != nil {
							if ctx.Err() != nil {
								return
							}
							t.Error(err)
							return
						}
						ok = in.count(res, 1)
					}
					dec.Add(1)
					if ok {
						adm[k].Add(1)
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
				}
			})
		}
	}
	wg.Wait()
	for i := range adm {
		admitted = append(admitted, adm[i].Load())
	}
	return admitted, dec.Load()
}

// paceTick is the shortest sleep of pace: a load faster than one call per
// paceTick is issued in small batches, every paceTick, of the calls due.
// (A sleep on Linux oversleeps by some 50-100µs and costs a wakeup: pacing
// thousands of calls a second one sleep each would fall behind.)
const paceTick = time.Millisecond

// pace calls fn rate times a second in all, from goroutines goroutines
// (goroutine g calls fn(g)), evenly spaced, from start until start+d: the
// calls due before start+d are made. Each goroutine sleeps until its next
// call is due, at least paceTick, then makes every call that has come due;
// so the rate holds when a call is slow or a sleep long, as long as the
// machine keeps up. A goroutine more than a tenth of a second behind at the
// end gives up the rest. pace returns when every goroutine is done, with
// the number of calls made: compare it with intended.
func pace(start time.Time, rate float64, d time.Duration, goroutines int, fn func(g int)) (calls int64) {
	end := start.Add(d)
	var made atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			// Goroutine g's i-th call is due at start + (g + i·goroutines)/rate.
			due := func(i int) time.Time {
				return start.Add(time.Duration((float64(g) + float64(i)*float64(goroutines)) / rate * float64(time.Second)))
			}
			for i := 0; due(i).Before(end); {
				if w := time.Until(due(i)); w > 0 {
					time.Sleep(max(w, paceTick))
				}
				now := time.Now()
				if now.After(end.Add(100 * time.Millisecond)) {
					return
				}
				for ; !due(i).After(now) && due(i).Before(end); i++ {
					fn(g)
					made.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return made.Load()
}

// intended is the number of calls pace is asked for: rate·d.
func intended(rate float64, d time.Duration) float64 { return rate * d.Seconds() }

// checkOffered fails t when a paced run offered less than three quarters,
// or more than five quarters, of the intended load: a machine too busy to
// keep up offers less, and the checks are then of what it did offer, but
// such a run no longer tests the regime it names.
func checkOffered(t *testing.T, who string, offered int64, rate float64, d time.Duration) {
	t.Helper()
	want := intended(rate, d)
	off := math.Abs(float64(offered)-want) / want
	if off > 0.25 {
		t.Errorf("harness: %s offered %d decisions, intended %.0f (%.0f/s for %v): the machine did not keep up", who, offered, want, rate, d)
	}
}

// goroutinesFor is how many goroutines pace a load of rate per second: one
// per 750/s, so that a call that waits on Redis does not hold up the rest.
func goroutinesFor(rate float64) int { return max(1, int(math.Ceil(rate/750))) }

// flatOut calls fn(g) from goroutines goroutines as fast as they can, for d.
func flatOut(d time.Duration, goroutines int, fn func(g int)) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			for time.Now().Before(end) {
				fn(g)
			}
		})
	}
	wg.Wait()
}

// lagProbe measures the scheduler's lag while a load runs: how much later
// than asked a goroutine that sleeps 500µs at a time wakes up and runs. On
// an idle machine that is some 50-100µs; on a loaded one, what any
// goroutine may wait for a core. A latency bound adds it, so that a loaded
// machine moves the figure, not the verdict.
type lagProbe struct {
	mu   sync.Mutex
	lags []time.Duration
}

// run samples until stop is closed.
func (p *lagProbe) run(stop <-chan struct{}) {
	const nap = 500 * time.Microsecond
	for {
		select {
		case <-stop:
			return
		default:
		}
		start := time.Now()
		time.Sleep(nap)
		lag := time.Since(start) - nap
		p.mu.Lock()
		p.lags = append(p.lags, lag)
		p.mu.Unlock()
	}
}

// percentile returns the p-th percentile (0 to 1) of the lags seen.
func (p *lagProbe) percentile(q float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return percentile(p.lags, q)
}

// percentile returns the q-th percentile (0 to 1) of ds, sorting it; 0
// when empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[int(float64(len(ds)-1)*q)]
}

// loadResult is what one phase of phasedLoad saw on one key.
type loadResult struct {
	decisions, admitted, errors int64
	unavailable                 int64 // errors that are ErrUnavailable
	lastErr                     error
	fallbackDenied              int64 // denials from the failure mode
	sources                     map[ratelease.Source]int64
	latencies                   []time.Duration
	// lastFallback is when the last decision that the failure mode made
	// began (zero if none).
	lastFallback time.Time
}

// percentile returns the q-th percentile of the decisions' latencies.
func (r *loadResult) percentile(q float64) time.Duration { return percentile(r.latencies, q) }

// phase is what phasedLoad saw in one phase.
type phase struct {
	keys       []*loadResult // per key
	start, end time.Time     // on this machine's clock
	lag        *lagProbe     // the scheduler's lag meanwhile
}

// seconds is the phase's length.
func (ph *phase) seconds() float64 { return ph.end.Sub(ph.start).Seconds() }

// loadSpec is the shape of a phasedLoad: goroutines per Limiter, each
// taking the keys in turn and pausing after each decision.
type loadSpec struct {
	goroutines int
	pause      time.Duration
	keys       []string
}

// phasedLoad runs Allow on spec.keys of p through every Limiter of ls, and
// calls at(i) as phase i begins; phase i then lasts phases[i]. A decision
// counts in the phase in which it returned: one that returned before phase
// i began cannot have seen what at(i) did, while one begun before it may
// have. It returns what each phase saw.
func phasedLoad(t *testing.T, ls []*ratelease.Limiter, spec loadSpec, p *ratelease.Policy, phases []time.Duration, at func(i int)) []*phase {
	t.Helper()
	results := make([]*phase, len(phases))
	for i := range results {
		ph := &phase{lag: &lagProbe{}}
		for range spec.keys {
			ph.keys = append(ph.keys, &loadResult{sources: map[ratelease.Source]int64{}})
		}
		results[i] = ph
	}
	var current atomic.Int32
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range ls {
		for range spec.goroutines {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					k := n % len(spec.keys)
					start := time.Now()
					res, err := l.Allow(context.Background(), p, spec.keys[k])
					lat := time.Since(start)
					mu.Lock()
					r := results[current.Load()].keys[k]
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
						if res.Source == ratelease.SourceFallback && start.After(r.lastFallback) {
							r.lastFallback = start
						}
						if res.Allowed {
							r.admitted++
						} else if res.Source == ratelease.SourceFallback {
							r.fallbackDenied++
						}
					}
					mu.Unlock()
					time.Sleep(spec.pause)
				}
			})
		}
	}
	for i, d := range phases {
		ph := results[i]
		probeStop := make(chan struct{})
		var probe sync.WaitGroup
		probe.Go(func() { ph.lag.run(probeStop) })
		mu.Lock()
		ph.start = time.Now()
		if i > 0 {
			results[i-1].end = ph.start
		}
		current.Store(int32(i))
		mu.Unlock()
		at(i)
		time.Sleep(d)
		close(probeStop)
		probe.Wait()
	}
	close(stop)
	wg.Wait()
	results[len(results)-1].end = time.Now()
	return results
}

// checkLatency holds the decisions of a phase to what the Redis timeout
// allows: 99% of them within 1ms (they did not wait on Redis), and none
// longer than the timeout and 50ms, each bound lengthened by the
// scheduler's lag measured meanwhile (its 99th percentile, and its worst).
func checkLatency(t *testing.T, what string, r *loadResult, lag *lagProbe, timeout time.Duration) {
	t.Helper()
	p99, worst := r.percentile(0.99), r.percentile(1)
	lag99, lagMax := lag.percentile(0.99), lag.percentile(1)
	t.Logf("%s: p99 %v, max %v; the scheduler's lag: p99 %v, max %v", what, p99, worst, lag99, lagMax)
	if limit := time.Millisecond + lag99; p99 > limit {
		t.Errorf("%s: p99 %v > 1ms + the scheduler's p99 lag %v", what, p99, lag99)
	}
	if limit := timeout + 50*time.Millisecond + lagMax; worst > limit {
		t.Errorf("%s: a decision took %v > the Redis timeout %v + 50ms + the scheduler's worst lag %v", what, worst, timeout, lagMax)
	}
}
