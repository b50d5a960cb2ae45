package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// newClient returns a client for addr, sized for goroutines concurrent
// callers, that counts its round trips (redistest.Trips: one per command,
// one per pipeline; the handshake go-redis makes on each new connection
// apart, in Handshakes: no limiter can avoid it, and on a workload of a few
// dozen decisions its three round trips per connection would outweigh what
// the limiter itself sends).
func newClient(addr string, goroutines int) (*redis.Client, *redistest.Trips) {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		PoolSize:              max(goroutines, 10*runtime.GOMAXPROCS(0)),
		ContextTimeoutEnabled: true,
	})
	h := &redistest.Trips{}
	c.AddHook(h)
	return c, h
}

// runs numbers the runs, so that each uses keys of its own.
var runs atomic.Int64

func prefix(name string) string { return fmt.Sprintf("bench-%s-%d", name, runs.Add(1)) }

// Decisions returns a benchmark of one process deciding for one key through
// p, from the given number of goroutines (1: sequential), on the Redis at
// addr. The limit, a million per second and a bucket of a billion, is far
// above what one process can ask, so every decision admits. Besides
// ns/op and allocations it reports decisions/s and roundtrips/op, the Redis
// round trips per decision.
func Decisions(p Peer, addr string, goroutines int) func(b *testing.B) {
	return measure(p, addr, goroutines, Limit{Rate: 1_000_000, Burst: 1_000_000_000}, nil, 1, true)
}

// RedisTimeKeys is how many keys RedisTime decides on.
const RedisTimeKeys = 64

// RedisTime returns a benchmark of what a decision costs Redis, as
// Decisions measures it, on RedisTimeKeys keys decided in turn: every
// decision admitted (a limit far above the demand), or, with deny, most
// of them denied (one a second per key, burst 1: keys under attack, the
// load's denials the cost). It reports admitted/op beside Decisions's
// figures.
func RedisTime(p Peer, addr string, goroutines int, deny bool) func(b *testing.B) {
	lim := Limit{Rate: 1_000_000, Burst: 1_000_000_000}
	if deny {
		lim = Limit{Rate: 1, Burst: 1}
	}
	return measure(p, addr, goroutines, lim, func(i int64) string { return "key" + strconv.FormatInt(i%RedisTimeKeys, 10) }, RedisTimeKeys, false)
}

// FailedMetric is the metric a benchmark of measure reports, with the
// count, when a decision failed (an error, or a denial where every
// decision must be admitted): its figures are then not the workload's.
const FailedMetric = "failed-decisions"

// FewUseGoroutines is how many goroutines FewUse decides from.
const FewUseGoroutines = 16

// FewUse returns a benchmark of keys used uses times each, one after
// another (uses 1: per-IP limits under a crawl, where every key is new),
// decided through p from FewUseGoroutines goroutines, each decision
// admitted (a limit of 5 a second, burst 5, above any key's uses). What
// the peer sends when it is closed counts (lease mode gives back what a
// key's lease did not use then), in round trips and Redis time.
func FewUse(p Peer, addr string, uses int) func(b *testing.B) {
	return measure(p, addr, FewUseGoroutines, Limit{Rate: 5, Burst: 5}, func(i int64) string { return "k" + strconv.FormatInt(i/int64(uses), 36) }, 0, true)
}

// measure is a benchmark of one process deciding through p, decision i
// on key(i) of lim (nil: every decision on one key, with nothing shared
// between the goroutines but the limiter: a counter they all add to
// would cost more than a leased decision), from goroutines goroutines,
// on the Redis at addr, after warm decisions (i from 0: each key's state
// exists before timing starts). With wantAll, every decision must be
// admitted; else admitted/op says how many were. The peer is closed
// before the figures are taken: what Close sends counts.
func measure(p Peer, addr string, goroutines int, lim Limit, key func(i int64) string, warm int, wantAll bool) func(b *testing.B) {
	return func(b *testing.B) {
		c, rt := newClient(addr, goroutines)
		defer c.Close()
		lim.Instances, lim.Prefix = 1, prefix(p.Name)
		inst, err := p.New(c, lim)
		if err != nil {
			b.Fatal(err)
		}
		closed := false
		defer func() {
			if !closed {
				_ = inst.Close()
			}
		}()
		ctx := context.Background()
		var next, admitted, failed atomic.Int64
		decide := func() {
			k := "key"
			if key != nil {
				k = key(next.Add(1) - 1)
			}
			ok, err := inst.Allow(ctx, k)
			if err != nil || (!ok && wantAll) {
				failed.Add(1)
				b.Errorf("%s: allowed %v, error %v", p.Name, ok, err)
			}
			if ok && !wantAll {
				admitted.Add(1)
			}
		}
		for range warm {
			decide()
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		start := rt.Trips.Load()
		admitted.Store(0)
		b.ResetTimer()
		if goroutines == 1 {
			for i := 0; i < b.N; i++ {
				decide()
			}
		} else {
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((goroutines + procs - 1) / procs)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					decide()
				}
			})
		}
		b.StopTimer()
		elapsed := b.Elapsed()
		closed = true
		if err := inst.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rt.Trips.Load()-start)/float64(b.N), "roundtrips/op")
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
		if n := failed.Load(); n > 0 {
			// testing.Benchmark (cmd/benchreport) does not tell a run that
			// failed after its first: this metric does.
			b.ReportMetric(float64(n), FailedMetric)
		}
		if !wantAll {
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
		}
		usec, calls, err := RedisMicros(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(usec/float64(b.N), "redis-us/op")
		if calls > 0 {
			b.ReportMetric(usec/float64(calls), "redis-us/call")
		}
	}
}

// RedisMicros is the Redis CPU time (µs) its commands took since the last
// CONFIG RESETSTAT, and the calls counted, from INFO commandstats: the
// scripts' (EVAL, EVALSHA, FCALL and their read-only forms), which include
// the commands they call, or, where no script ran, every command a limiter
// sends (not the INFO, CONFIG, HELLO, CLIENT and PING of the benchmark and
// the handshake). Redis runs commands on one core: a decision's µs here
// sets how many decisions one Redis can make per second.
func RedisMicros(ctx context.Context, c *redis.Client) (usec float64, calls int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	var scripts, others float64
	var scriptCalls, otherCalls int64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var us float64
		var n int64
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				us, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		switch cmd := strings.TrimPrefix(name, "cmdstat_"); {
		case strings.HasPrefix(cmd, "eval") || strings.HasPrefix(cmd, "fcall"):
			scripts += us
			scriptCalls += n
		case cmd == "info" || cmd == "config" || cmd == "hello" || strings.HasPrefix(cmd, "client") || cmd == "ping":
		default:
			others += us
			otherCalls += n
		}
	}
	if scripts > 0 {
		return scripts, scriptCalls, nil
	}
	return others, otherCalls, nil
}

// AccuracyConfig is the accuracy workload: Instances processes share a
// token bucket of Rate per second with Burst; together they ask for Demand
// times the rate, split between them by Shares, for Duration.
type AccuracyConfig struct {
	Rate, Burst int
	Demand      float64
	Shares      []float64 // one per instance, summing to 1
	Duration    time.Duration
}

// DefaultAccuracy is the workload of docs/benchmarks.md: four instances,
// 2000/s burst 200, asked for twice the rate in shares of 5, 10, 25 and
// 60 %, for 4 s. The smallest instances stay under a quarter of the limit,
// the largest goes far over it: a limit split statically between the
// instances wastes what the small ones leave.
var DefaultAccuracy = AccuracyConfig{
	Rate: 2000, Burst: 200, Demand: 2,
	Shares:   []float64{0.05, 0.10, 0.25, 0.60},
	Duration: 4 * time.Second,
}

// AccuracyResult is what one accuracy run saw.
type AccuracyResult struct {
	// Admitted counts the admitted requests of each instance.
	Admitted []int64
	// Decisions and RoundTrips are totals over the instances.
	Decisions, RoundTrips int64
	// Seconds is the run's length on Redis's clock; Bound is
	// Burst + Rate·Seconds.
	Seconds, Bound float64
}

// Total is the requests admitted by all instances.
func (r AccuracyResult) Total() int64 {
	var n int64
	for _, a := range r.Admitted {
		n += a
	}
	return n
}

// Accuracy is Total ÷ Bound: 1 is the whole limit, no more.
func (r AccuracyResult) Accuracy() float64 { return float64(r.Total()) / r.Bound }

// RoundTripsPerDecision is RoundTrips ÷ Decisions.
func (r AccuracyResult) RoundTripsPerDecision() float64 {
	return float64(r.RoundTrips) / float64(max(r.Decisions, 1))
}

// GoroutinesPerInstance pace each instance's demand in Accuracy.
const GoroutinesPerInstance = 4

// Accuracy runs cfg through p on the Redis at addr, each instance on a
// client of its own, and returns what was admitted. Each instance's demand
// is paced every millisecond (a goroutine that falls behind catches up).
func Accuracy(ctx context.Context, p Peer, addr string, cfg AccuracyConfig) (AccuracyResult, error) {
	lim := Limit{Rate: cfg.Rate, Burst: cfg.Burst, Instances: len(cfg.Shares), Prefix: prefix(p.Name)}
	res := AccuracyResult{Admitted: make([]int64, len(cfg.Shares))}
	var insts []Instance
	var hooks []*redistest.Trips
	defer func() {
		for _, in := range insts {
			_ = in.Close()
		}
	}()
	for range cfg.Shares {
		c, rt := newClient(addr, GoroutinesPerInstance)
		defer c.Close()
		in, err := p.New(c, lim)
		if err != nil {
			return res, err
		}
		insts, hooks = append(insts, in), append(hooks, rt)
	}
	clock, _ := newClient(addr, 1)
	defer clock.Close()
	startRT := make([]int64, len(hooks))
	for i, h := range hooks {
		startRT[i] = h.Trips.Load()
	}
	start, err := clock.Time(ctx).Result()
	if err != nil {
		return res, err
	}
	tallies := make([]tally, len(insts))
	began := time.Now()
	var wg sync.WaitGroup
	for i, in := range insts {
		wg.Go(func() {
			paced(began, cfg.Duration, float64(cfg.Rate)*cfg.Demand*cfg.Shares[i], func() bool {
				return tallies[i].decide(ctx, in, "shared")
			})
		})
	}
	wg.Wait()
	end, err := clock.Time(ctx).Result()
	if err != nil {
		return res, err
	}
	for i := range tallies {
		if err := tallies[i].err(); err != nil {
			return res, fmt.Errorf("%s instance %d: %w", p.Name, i, err)
		}
	}
	for i := range tallies {
		res.Admitted[i] = tallies[i].admitted.Load()
		res.Decisions += tallies[i].decisions.Load()
		res.RoundTrips += hooks[i].Trips.Load() - startRT[i]
	}
	res.Seconds = end.Sub(start).Seconds()
	res.Bound = float64(cfg.Burst) + float64(cfg.Rate)*res.Seconds
	return res, nil
}

// paced calls ask perSecond times a second from began until d has passed,
// from GoroutinesPerInstance goroutines that each wake every millisecond
// and make the calls that are due (one that falls behind catches up). A
// goroutine stops at the first call that returns false; paced returns when
// all have stopped.
func paced(began time.Time, d time.Duration, perSecond float64, ask func() bool) {
	perGoroutine := perSecond / GoroutinesPerInstance
	var wg sync.WaitGroup
	for range GoroutinesPerInstance {
		wg.Go(func() {
			var asked int64
			for {
				elapsed := time.Since(began)
				if elapsed >= d {
					return
				}
				for due := int64(perGoroutine * elapsed.Seconds()); asked < due; asked++ {
					if !ask() {
						return
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// tally counts one instance's decisions in a load and keeps its first
// error. It is safe for concurrent use.
type tally struct {
	decisions, admitted atomic.Int64
	first               atomic.Pointer[error]
}

// decide makes one decision through in for key and counts it. It reports
// whether the decision was made: false after an error.
func (t *tally) decide(ctx context.Context, in Instance, key string) bool {
	ok, err := in.Allow(ctx, key)
	t.decisions.Add(1)
	if err != nil {
		t.first.CompareAndSwap(nil, &err)
		return false
	}
	if ok {
		t.admitted.Add(1)
	}
	return true
}

// err is the first error a decision returned, or nil.
func (t *tally) err() error {
	if e := t.first.Load(); e != nil {
		return *e
	}
	return nil
}
