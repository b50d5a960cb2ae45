package main

import (
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/ratelease/ratelease/bench"
	"github.com/ratelease/ratelease/internal/redistest"
)

// ceilingRow is one way of deciding's runs of the ceiling workload.
type ceilingRow struct {
	impl, how string
	runs      []bench.CeilingResult
}

// ceilingPeers are the peers the ceiling workload runs, one decision a
// round trip; ratelease's exact decisions run pipelined too.
var ceilingPeers = []string{"ratelease-exact", "redis_rate"}

// ceilings runs the ceiling workload runs times for each way, interleaved.
func ceilings(peers []bench.Peer, addr string, runs int) ([]ceilingRow, error) {
	ps, err := named(peers, ceilingPeers)
	if err != nil {
		return nil, err
	}
	rows := make([]ceilingRow, len(ps)+1)
	for i, p := range ps {
		rows[i] = ceilingRow{impl: p.Name, how: "each through Allow"}
	}
	rows[len(ps)] = ceilingRow{impl: "ratelease-exact", how: fmt.Sprintf("%d a round trip (remote.Store.AcquireBatch)", bench.DefaultCeiling.Batch)}
	for range runs {
		for i := range rows {
			var r bench.CeilingResult
			var err error
			if i < len(ps) {
				r, err = bench.Ceiling(ps[i], addr, bench.DefaultCeiling)
			} else {
				r, err = bench.CeilingPipelined(addr, bench.DefaultCeiling)
			}
			if err != nil {
				return nil, fmt.Errorf("ceiling %s, %s: %w", rows[i].impl, rows[i].how, err)
			}
			fmt.Printf("ceiling %s, %s: %.0f decisions/s, %.0f per Redis CPU second\n", rows[i].impl, rows[i].how, r.PerSecond(), r.PerRedisSecond())
			rows[i].runs = append(rows[i].runs, r)
		}
	}
	return rows, nil
}

// clusterSizes are the numbers of masters of the clusters the ceiling
// workload runs on.
var clusterSizes = []int{1, 3}

// clusterCeilings runs the ceiling workload on a Redis Cluster of each of
// clusterSizes masters (redis-server bin, files under dir), runs times for
// each peer of ceilingPeers, interleaved.
func clusterCeilings(peers []bench.Peer, bin, dir string, runs int) ([]ceilingRow, error) {
	ps, err := named(peers, ceilingPeers)
	if err != nil {
		return nil, err
	}
	var rows []ceilingRow
	for _, n := range clusterSizes {
		cl, err := redistest.LaunchCluster(bin, filepath.Join(dir, fmt.Sprintf("cluster-%d", n)), n)
		if err != nil {
			return nil, err
		}
		running.Store(cl)
		first := len(rows)
		for _, p := range ps {
			rows = append(rows, ceilingRow{impl: p.Name, how: fmt.Sprintf("%d", n)})
		}
		for range runs {
			for i, p := range ps {
				r, err := bench.CeilingCluster(p, cl.Addrs(), bench.DefaultCeiling)
				if err != nil {
					cl.Kill()
					return nil, fmt.Errorf("ceiling %s on %d masters: %w", p.Name, n, err)
				}
				fmt.Printf("ceiling %s on %d masters: %.0f decisions/s, %.0f per Redis CPU second\n", p.Name, n, r.PerSecond(), r.PerRedisSecond())
				rows[first+i].runs = append(rows[first+i].runs, r)
			}
		}
		cl.Kill()
		running.Store(nil)
	}
	return rows, nil
}

// running is the cluster clusterCeilings runs on, for an interrupt to
// kill.
var running atomic.Pointer[redistest.Cluster]
