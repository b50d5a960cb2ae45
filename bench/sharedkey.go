package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// SharedKeyConfig is the shared-key workload: in each of Cells, a fleet of
// Limiters (each with the defaults, New(client), and a client of its own)
// shares one key of PerSecond(Rate), each instance asking twice its share,
// evenly paced; or, in a cell with Keys, Keys keys of PerSecond(KeyRate)
// each, Demand decisions a second in all, each instance drawing its keys
// by a Zipf law of exponent Zipf. Each cell runs for Duration in lease
// mode, then for Duration in exact mode, on the same demand.
type SharedKeyConfig struct {
	Cells           []SharedKeyCell
	Rate            int     // one key's limit per second, and its burst
	KeyRate, Demand int     // with many keys: each key's limit per second; decisions a second in all
	Zipf            float64 // with many keys: the Zipf law's s, > 1
	Duration        time.Duration
}

// DefaultSharedKey is the workload of docs/fleet.md: 10, 100 and 300
// instances on one key of PerSecond(3000), and 300 instances over 10,000
// keys of PerSecond(20) asked 3000 times a second in all, 5 s in each mode.
var DefaultSharedKey = SharedKeyConfig{
	Cells:    []SharedKeyCell{{Instances: 10}, {Instances: 100}, {Instances: 300}, {Instances: 300, Keys: 10000}},
	Rate:     3000,
	KeyRate:  20,
	Demand:   3000,
	Zipf:     1.1,
	Duration: 5 * time.Second,
}

// SharedKeyCell is one cell of the shared-key workload: Instances
// instances on one key, or, when Keys is not 0, over Keys keys.
type SharedKeyCell struct {
	Instances, Keys int
}

// String names the cell as docs/fleet.md does: 100x/1key, 300x/10000keys.
func (c SharedKeyCell) String() string {
	if c.Keys > 0 {
		return fmt.Sprintf("%dx/%dkeys", c.Instances, c.Keys)
	}
	return fmt.Sprintf("%dx/1key", c.Instances)
}

// SharedKeyRun is what one mode's run of a cell measured.
type SharedKeyRun struct {
	// Decisions and Admitted are totals over the instances; Fallback
	// counts the decisions made by the failure mode (SourceFallback).
	Decisions, Admitted, Fallback int64
	// Intended is the decisions the pacing was asked for: Decisions falls
	// short of it when the machine does not keep up.
	Intended int64
	// Busy counts the denials because Redis was busy (Stats.Busy).
	Busy uint64
	// CPU is Redis's CPU time (INFO cpu, user and system) over the run, in
	// seconds of one core per second of the run.
	CPU float64
	// Calls and Micros are the scripts' calls (FCALL, EVALSHA) and the µs
	// Redis spent in them, from INFO commandstats.
	Calls, Micros float64
	// Bound is Burst + Rate·T over the run's span T of Redis time: the
	// most the key may admit. 0 with many keys.
	Bound float64
	// Worst is the worst instance's admitted units over its max-min fair
	// share of Rate·T, given what each instance asked. 0 with many keys.
	Worst float64
}

// CallsPerDecision is Calls ÷ Decisions.
func (r SharedKeyRun) CallsPerDecision() float64 { return ratio(r.Calls, float64(r.Decisions)) }

// MicrosPerCall is Micros ÷ Calls: what one script call costs Redis.
func (r SharedKeyRun) MicrosPerCall() float64 { return ratio(r.Micros, r.Calls) }

// OfBound is Admitted ÷ Bound: at most 1. 0 with many keys.
func (r SharedKeyRun) OfBound() float64 { return ratio(float64(r.Admitted), r.Bound) }

// SharedKeyResult is one cell's runs in lease and in exact mode.
type SharedKeyResult struct {
	Cell         SharedKeyCell
	Lease, Exact SharedKeyRun
}

// CPURatio is lease mode's Redis CPU over exact mode's.
func (r SharedKeyResult) CPURatio() float64 { return ratio(r.Lease.CPU, r.Exact.CPU) }

// AdmittedRatio is the units lease mode admitted over exact mode's.
func (r SharedKeyResult) AdmittedRatio() float64 {
	return ratio(float64(r.Lease.Admitted), float64(r.Exact.Admitted))
}

// String is the result on one line, for a log.
func (r SharedKeyResult) String() string {
	return fmt.Sprintf("%s: Redis CPU lease %.1f%% exact %.1f%% of a core (%.2fx); lease %.4f calls/decision, %.1f µs/call (exact %.1f); admitted lease %d exact %d (bound %.0f); fallback lease %d exact %d; busy lease %d; fair lease %.2f exact %.2f; decisions lease %d exact %d of %d",
		r.Cell, 100*r.Lease.CPU, 100*r.Exact.CPU, r.CPURatio(), r.Lease.CallsPerDecision(), r.Lease.MicrosPerCall(), r.Exact.MicrosPerCall(),
		r.Lease.Admitted, r.Exact.Admitted, r.Lease.Bound, r.Lease.Fallback, r.Exact.Fallback, r.Lease.Busy, r.Lease.Worst, r.Exact.Worst,
		r.Lease.Decisions, r.Exact.Decisions, r.Lease.Intended)
}

// SharedKey runs cell c of cfg on the Redis at addr, in lease mode and
// then in exact mode. Redis's statistics are reset before each run (CONFIG
// RESETSTAT), and its CPU is read over the run: nothing else should use
// that Redis meanwhile.
func SharedKey(ctx context.Context, addr string, cfg SharedKeyConfig, c SharedKeyCell) (SharedKeyResult, error) {
	res := SharedKeyResult{Cell: c}
	var err error
	if res.Lease, err = sharedKeyRun(ctx, addr, cfg, c, false); err != nil {
		return res, fmt.Errorf("%s, lease mode: %w", c, err)
	}
	if res.Exact, err = sharedKeyRun(ctx, addr, cfg, c, true); err != nil {
		return res, fmt.Errorf("%s, exact mode: %w", c, err)
	}
	return res, nil
}

// sharedKeyInstance is one instance of the shared-key workload and what
// its decisions were. One goroutine decides through it at a time.
type sharedKeyInstance struct {
	l                             *ratelease.Limiter
	decisions, admitted, fallback int64
	err                           error // the first decision's error, which ends its load
}

// decide makes one decision for key through p and counts it. It reports
// whether the decision was made: false after an error.
func (in *sharedKeyInstance) decide(ctx context.Context, p *ratelease.Policy, key string) bool {
	r, err := in.l.Allow(ctx, p, key)
	if err != nil {
		in.err = err
		return false
	}
	in.decisions++
	if r.Allowed {
		in.admitted++
	}
	if r.Source == ratelease.SourceFallback {
		in.fallback++
	}
	return true
}

// sharedKeyRun is one mode's run of cell c.
func sharedKeyRun(ctx context.Context, addr string, cfg SharedKeyConfig, c SharedKeyCell, exact bool) (SharedKeyRun, error) {
	var res SharedKeyRun
	mode, limit := "lease", ratelease.PerSecond(cfg.Rate)
	var opts []ratelease.Option
	if exact {
		mode, opts = "exact", []ratelease.Option{ratelease.WithExact()}
	}
	perInstance := 2 * float64(cfg.Rate) / float64(c.Instances) // twice its share
	if c.Keys > 0 {
		limit, perInstance = ratelease.PerSecond(cfg.KeyRate), float64(cfg.Demand)/float64(c.Instances)
	}
	// A policy of its own (its name is in the keys) keeps each run's keys
	// apart, and leaves the Limiters with the defaults.
	p, err := ratelease.NewPolicy(prefix("shared-key-"+mode), limit)
	if err != nil {
		return res, err
	}
	ins := make([]*sharedKeyInstance, c.Instances)
	var clients []*redis.Client
	defer func() {
		for _, in := range ins {
			if in != nil {
				_ = in.l.Close()
			}
		}
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	for i := range ins {
		cl, _ := newClient(addr, 1)
		clients = append(clients, cl)
		l, err := ratelease.New(cl, opts...)
		if err != nil {
			return res, err
		}
		ins[i] = &sharedKeyInstance{l: l}
	}
	// Each instance is ready before the load starts, as a service is
	// once its readiness check (Ping) passes: its connection made, Redis
	// seen to answer. Without it, 100 Limiters dialling and leasing in
	// the same few milliseconds on a loaded 2-core machine (CI, under the
	// race detector) timed out their first calls before any answer, and
	// took Redis for down: a cold start, not the shared key's regime.
	for i, in := range ins {
		if err := in.l.Ping(ctx); err != nil {
			return res, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	admin, _ := newClient(addr, 1)
	defer admin.Close()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return res, err
	}
	cpu0, err := redisCPU(ctx, admin)
	if err != nil {
		return res, err
	}
	start := time.Now().Add(20 * time.Millisecond)
	t0, err := admin.Time(ctx).Result()
	if err != nil {
		return res, err
	}
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			// Instances start a little apart, as a fleet's requests do.
			at := start.Add(time.Duration(float64(i) * float64(time.Second) / (perInstance * float64(len(ins)))))
			var zipf *rand.Zipf
			if c.Keys > 0 {
				zipf = rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 7)), cfg.Zipf, 1, uint64(c.Keys-1))
			}
			evenly(at, perInstance, cfg.Duration, func() bool {
				key := "shared"
				if zipf != nil {
					key = "k" + strconv.FormatUint(zipf.Uint64(), 10)
				}
				return in.decide(ctx, p, key)
			})
		})
	}
	wg.Wait()
	t1, err := admin.Time(ctx).Result()
	if err != nil {
		return res, err
	}
	elapsed := time.Since(start).Seconds()
	cpu1, err := redisCPU(ctx, admin)
	if err != nil {
		return res, err
	}
	res.CPU = (cpu1 - cpu0) / elapsed
	if res.Micros, res.Calls, err = redistest.ReadScriptStats(ctx, admin); err != nil {
		return res, err
	}
	for i, in := range ins {
		if in.err != nil {
			return res, fmt.Errorf("instance %d: %w", i, in.err)
		}
		res.Decisions += in.decisions
		res.Admitted += in.admitted
		res.Fallback += in.fallback
		res.Busy += in.l.Stats().Busy
	}
	res.Intended = int64(perInstance*cfg.Duration.Seconds()) * int64(len(ins))
	if c.Keys == 0 {
		seconds := t1.Sub(t0).Seconds()
		res.Bound = float64(limit.Burst) + float64(cfg.Rate)*seconds
		demands := make([]float64, len(ins))
		for i, in := range ins {
			demands[i] = float64(in.decisions)
		}
		shares := redistest.WaterFill(float64(cfg.Rate)*seconds, demands)
		res.Worst = math.Inf(1)
		for i, in := range ins {
			res.Worst = min(res.Worst, ratio(float64(in.admitted), shares[i]))
		}
	}
	return res, nil
}

// evenly calls ask perSecond times a second, evenly spaced, from start
// until start+d: the calls due before start+d are made. It sleeps until
// its next call is due, at least a millisecond, then makes every call that
// has come due, so the rate holds when a call is slow or a sleep long, as
// long as the machine keeps up; more than a tenth of a second behind at
// the end, it gives up the rest. It stops at the first call that returns
// false.
func evenly(start time.Time, perSecond float64, d time.Duration, ask func() bool) {
	end := start.Add(d)
	due := func(i int) time.Time { return start.Add(time.Duration(float64(i) / perSecond * float64(time.Second))) }
	for i := 0; due(i).Before(end); {
		if w := time.Until(due(i)); w > 0 {
			time.Sleep(max(w, time.Millisecond))
		}
		now := time.Now()
		if now.After(end.Add(100 * time.Millisecond)) {
			return
		}
		for ; !due(i).After(now) && due(i).Before(end); i++ {
			if !ask() {
				return
			}
		}
	}
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
