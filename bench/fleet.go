package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// FleetConfig is the fleet workload: Busy instances drive one key of Rate
// per second with Burst, each asking PerBusy times a second, for Duration;
// once alone, once beside Idle more instances of the same peer that never
// touch that key.
type FleetConfig struct {
	Rate, Burst, Busy int
	PerBusy           float64
	Idle              int
	Duration          time.Duration
}

// DefaultFleet is the workload of docs/benchmarks.md: two busy instances on
// one key of PerSecond(1000), each asking 2000/s (together 4 × the limit),
// for 4 s, alone and beside 30 idle instances. What a key costs should
// depend on the instances that use it, not on every instance alive.
var DefaultFleet = FleetConfig{Rate: 1000, Burst: 1000, Busy: 2, PerBusy: 2000, Idle: 30, Duration: 4 * time.Second}

// FleetRun is what the busy instances saw in one run of the fleet workload.
type FleetRun struct {
	// Idle is the number of idle instances beside the busy ones.
	Idle int
	// Decisions and Admitted are the busy instances' totals.
	Decisions, Admitted int64
	// RoundTrips is what the busy instances' clients sent during the
	// load; IdleRoundTrips is what the idle instances' clients sent during
	// the load, 0 when Idle is 0. (Connection handshakes are not counted.)
	RoundTrips, IdleRoundTrips int64
}

// RoundTripsPerDecision is the busy instances' RoundTrips ÷ Decisions.
func (r FleetRun) RoundTripsPerDecision() float64 {
	return float64(r.RoundTrips) / float64(max(r.Decisions, 1))
}

// FleetResult is one run of the busy instances alone and one beside the
// idle instances.
type FleetResult struct {
	Alone, Beside FleetRun
}

// Ratio is the busy instances' round trips per decision beside the idle
// instances ÷ alone: 1 when the idle instances cost the busy key nothing.
func (r FleetResult) Ratio() float64 {
	return r.Beside.RoundTripsPerDecision() / r.Alone.RoundTripsPerDecision()
}

// Fleet runs cfg through p on the Redis at addr: the busy instances alone,
// then beside cfg.Idle idle instances, each run with a key prefix of its
// own and each instance on a client of its own. Each idle instance makes
// one decision on a key of its own before the load, so that it is a
// limiter that has talked to Redis, and then nothing. Each busy instance's
// demand is paced every millisecond, as in Accuracy.
func Fleet(ctx context.Context, p Peer, addr string, cfg FleetConfig) (FleetResult, error) {
	var res FleetResult
	var err error
	if res.Alone, err = fleetRun(ctx, p, addr, cfg, 0); err != nil {
		return res, err
	}
	res.Beside, err = fleetRun(ctx, p, addr, cfg, cfg.Idle)
	return res, err
}

// fleetRun is one run of Fleet, beside idle idle instances.
func fleetRun(ctx context.Context, p Peer, addr string, cfg FleetConfig, idle int) (FleetRun, error) {
	res := FleetRun{Idle: idle}
	lim := Limit{Rate: cfg.Rate, Burst: cfg.Burst, Instances: cfg.Busy + idle, Prefix: prefix(p.Name)}
	var insts []Instance
	var clients []*redis.Client
	defer func() {
		for _, in := range insts {
			_ = in.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	newInstance := func(goroutines int) (Instance, *redistest.Trips, error) {
		c, rt := newClient(addr, goroutines)
		clients = append(clients, c)
		in, err := p.New(c, lim)
		if err != nil {
			return nil, nil, err
		}
		insts = append(insts, in)
		return in, rt, nil
	}
	busy := make([]Instance, cfg.Busy)
	busyRT := make([]*redistest.Trips, cfg.Busy)
	for i := range busy {
		var err error
		if busy[i], busyRT[i], err = newInstance(GoroutinesPerInstance); err != nil {
			return res, err
		}
	}
	idleRT := make([]*redistest.Trips, idle)
	for i := range idleRT {
		in, rt, err := newInstance(1)
		if err != nil {
			return res, err
		}
		if _, err := in.Allow(ctx, fmt.Sprintf("idle:%d", i)); err != nil {
			return res, fmt.Errorf("%s idle instance %d: %w", p.Name, i, err)
		}
		idleRT[i] = rt
	}
	tripsNow := func(hooks []*redistest.Trips) []int64 {
		n := make([]int64, len(hooks))
		for i, h := range hooks {
			n[i] = h.Trips.Load()
		}
		return n
	}
	busyStart, idleStart := tripsNow(busyRT), tripsNow(idleRT)
	tallies := make([]tally, cfg.Busy)
	began := time.Now()
	var wg sync.WaitGroup
	for i, in := range busy {
		wg.Go(func() {
			paced(began, cfg.Duration, cfg.PerBusy, func() bool { return tallies[i].decide(ctx, in, "busy") })
		})
	}
	wg.Wait()
	for i := range tallies {
		if err := tallies[i].err(); err != nil {
			return res, fmt.Errorf("%s busy instance %d: %w", p.Name, i, err)
		}
		res.Decisions += tallies[i].decisions.Load()
		res.Admitted += tallies[i].admitted.Load()
		res.RoundTrips += busyRT[i].Trips.Load() - busyStart[i]
	}
	for i, h := range idleRT {
		res.IdleRoundTrips += h.Trips.Load() - idleStart[i]
	}
	return res, nil
}
