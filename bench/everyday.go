package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
)

// EverydayConfig is the everyday per-key workload: Instances processes
// share one key of Rate per second with Burst, well under its limit, each
// asking PerInstance times a second, evenly paced, for Duration. The
// instances are staggered by an even part of the interval (instance i
// starts i/Instances of an interval after instance 0), so that the key's
// requests arrive evenly too.
type EverydayConfig struct {
	Rate, Burst, Instances int
	PerInstance            float64
	Duration               time.Duration
}

// DefaultEveryday is the workload of docs/benchmarks.md: a per-user limit
// of PerSecond(5) (5/s, burst 5) that two instances each see a request on
// every 500 ms (2/s each, 4/s in all, the second instance 250 ms after the
// first), for 10 s: what most keys of a service look like.
var DefaultEveryday = EverydayConfig{Rate: 5, Burst: 5, Instances: 2, PerInstance: 2, Duration: 10 * time.Second}

// Interval is the time between two requests of one instance.
func (c EverydayConfig) Interval() time.Duration {
	return time.Duration(float64(time.Second) / c.PerInstance)
}

// Requests is the number of requests each instance makes.
func (c EverydayConfig) Requests() int { return int(c.PerInstance * c.Duration.Seconds()) }

// EverydayResult is what one peer's instances saw in one everyday run.
type EverydayResult struct {
	// Decisions and Admitted are totals over the instances.
	Decisions, Admitted int64
	// RoundTrips is everything the instances' clients sent from their
	// creation to the end of the load (leases, refunds, script loads: all
	// but the connection handshake); Handshakes is the handshake's round
	// trips, apart.
	RoundTrips, Handshakes int64
}

// RoundTripsPerDecision is RoundTrips ÷ Decisions.
func (r EverydayResult) RoundTripsPerDecision() float64 {
	return float64(r.RoundTrips) / float64(max(r.Decisions, 1))
}

// AdmittedFraction is Admitted ÷ Decisions: 1 when nothing was denied, as
// the load is under the limit.
func (r EverydayResult) AdmittedFraction() float64 {
	return float64(r.Admitted) / float64(max(r.Decisions, 1))
}

// Everyday runs cfg through each of peers at once, in one window of
// cfg.Duration, on the Redis at addr: each peer has its instances, each
// instance a client of its own, and each peer a key prefix of its own. The
// load is a few requests a second, so that the peers do not disturb each
// other. It returns one result per peer, in the order of peers.
func Everyday(ctx context.Context, peers []Peer, addr string, cfg EverydayConfig) ([]EverydayResult, error) {
	type instance struct {
		in    Instance
		trips *redistest.Trips
		tally tally
	}
	insts := make([][]*instance, len(peers))
	defer func() {
		for _, ins := range insts {
			for _, in := range ins {
				_ = in.in.Close()
			}
		}
	}()
	for k, p := range peers {
		lim := Limit{Rate: cfg.Rate, Burst: cfg.Burst, Instances: cfg.Instances, Prefix: prefix(p.Name)}
		for range cfg.Instances {
			c, rt := newClient(addr, 1)
			defer c.Close()
			in, err := p.New(c, lim)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.Name, err)
			}
			insts[k] = append(insts[k], &instance{in: in, trips: rt})
		}
	}
	interval, n := cfg.Interval(), cfg.Requests()
	began := time.Now()
	var wg sync.WaitGroup
	for _, ins := range insts {
		for i, in := range ins {
			first := began.Add(time.Duration(i) * interval / time.Duration(cfg.Instances))
			wg.Go(func() {
				for r := range n {
					time.Sleep(time.Until(first.Add(time.Duration(r) * interval)))
					if !in.tally.decide(ctx, in.in, "user:42") {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	res := make([]EverydayResult, len(peers))
	for k, ins := range insts {
		for i, in := range ins {
			if err := in.tally.err(); err != nil {
				return nil, fmt.Errorf("%s instance %d: %w", peers[k].Name, i, err)
			}
			res[k].Decisions += in.tally.decisions.Load()
			res[k].Admitted += in.tally.admitted.Load()
			res[k].RoundTrips += in.trips.Trips.Load()
			res[k].Handshakes += in.trips.Handshakes.Load()
		}
	}
	return res, nil
}
