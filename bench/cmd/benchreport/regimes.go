package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/ratelease/ratelease/bench"
)

// everydayPeers are the peers the everyday workload runs through: lease
// mode, the exact mode it must not cost more than, and the baseline. The
// others are left out: ulule-limiter, like redis_rate, runs a script per
// decision, and x/time/rate never calls Redis.
var everydayPeers = []string{lease, "ratelease-exact", baseline}

// fleetPeers are the peers the fleet workload runs through: lease mode
// only, the regime is about its fair share.
var fleetPeers = []string{lease}

// regimeResults are the runs of the everyday and fleet workloads.
type regimeResults struct {
	// fewUse holds bench.FewUse's values for lease and exactPeer at each
	// of fewUseCounts.
	fewUse map[fewUseKey]decisionSamples
	// redisTime holds bench.RedisTime's values for exactPeer and the
	// baseline, admitting and denying, at each of redisTimeGoroutines.
	redisTime map[redisTimeKey]decisionSamples
	// everyday holds one row per peer of everydayPeers.
	everyday []everydayRow
	// fleet holds one row per peer of fleetPeers.
	fleet []fleetRow
	// ceiling holds one row per way of ceilingPeers, and the pipelined one.
	ceiling []ceilingRow
	// cluster holds one row per peer of ceilingPeers and size of
	// clusterSizes.
	cluster []ceilingRow
	// permits holds one row per mode: exact, lease.
	permits []permitRow
	// sharedKey holds one result per cell of bench.DefaultSharedKey.
	sharedKey []bench.SharedKeyResult
}

// everydayRow is what the everyday runs saw through one peer.
type everydayRow struct {
	impl string
	runs []bench.EverydayResult
}

// fleetRow is what the fleet runs saw through one peer.
type fleetRow struct {
	impl string
	runs []bench.FleetResult
}

// regimes runs the everyday workload (its peers at once) and the fleet
// workload runs times each, one after the other.
func regimes(peers []bench.Peer, addr string, runs int) (regimeResults, error) {
	every, err := named(peers, everydayPeers)
	if err != nil {
		return regimeResults{}, err
	}
	fleet, err := named(peers, fleetPeers)
	if err != nil {
		return regimeResults{}, err
	}
	var res regimeResults
	for _, p := range every {
		res.everyday = append(res.everyday, everydayRow{impl: p.Name})
	}
	for _, p := range fleet {
		res.fleet = append(res.fleet, fleetRow{impl: p.Name})
	}
	ctx := context.Background()
	for r := 0; r < runs; r++ {
		er, err := bench.Everyday(ctx, every, addr, bench.DefaultEveryday)
		if err != nil {
			return res, fmt.Errorf("everyday: %w", err)
		}
		for i, e := range er {
			fmt.Printf("everyday %s: %d of %d admitted, %d round trips: %.3f per decision (%d handshake)\n",
				every[i].Name, e.Admitted, e.Decisions, e.RoundTrips, e.RoundTripsPerDecision(), e.Handshakes)
			res.everyday[i].runs = append(res.everyday[i].runs, e)
		}
		for i, p := range fleet {
			f, err := bench.Fleet(ctx, p, addr, bench.DefaultFleet)
			if err != nil {
				return res, fmt.Errorf("fleet: %w", err)
			}
			fmt.Printf("fleet %s: the pair's round trips per decision %.4f alone, %.4f beside %d idle: %.2fx\n",
				p.Name, f.Alone.RoundTripsPerDecision(), f.Beside.RoundTripsPerDecision(), f.Beside.Idle, f.Ratio())
			res.fleet[i].runs = append(res.fleet[i].runs, f)
		}
	}
	return res, nil
}

// named returns the peers with the given names, in that order.
func named(peers []bench.Peer, names []string) ([]bench.Peer, error) {
	var ps []bench.Peer
	for _, n := range names {
		i := slices.IndexFunc(peers, func(p bench.Peer) bool { return p.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("no peer %q", n)
		}
		ps = append(ps, peers[i])
	}
	return ps, nil
}
