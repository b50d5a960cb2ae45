package main

import (
	"context"
	"fmt"

	"github.com/ratelease/ratelease/bench"
)

// workload is one accuracy workload and what the report calls it.
type workload struct {
	name string
	cfg  bench.AccuracyConfig
}

func workloads() []workload {
	tight := bench.DefaultAccuracy
	full := bench.DefaultAccuracy
	full.Burst = full.Rate
	return []workload{
		{fmt.Sprintf("%d/s, burst %d", tight.Rate, tight.Burst), tight},
		{fmt.Sprintf("%d/s, burst %d (PerSecond's default)", full.Rate, full.Burst), full},
	}
}

// accuracyRow is what the runs of one workload through one peer saw.
type accuracyRow struct {
	workload string
	impl     string
	runs     []bench.AccuracyResult
}

// accuracy runs w through every peer runs times, the peers interleaved.
func accuracy(peers []bench.Peer, addr string, w workload, runs int) ([]accuracyRow, error) {
	rows := make([]accuracyRow, len(peers))
	for i, p := range peers {
		rows[i] = accuracyRow{workload: w.name, impl: p.Name}
	}
	for r := 0; r < runs; r++ {
		for i, p := range peers {
			res, err := bench.Accuracy(context.Background(), p, addr, w.cfg)
			if err != nil {
				return nil, fmt.Errorf("accuracy %s, %s: %w", w.name, p.Name, err)
			}
			fmt.Printf("accuracy %s %s: admitted %v of %.0f: %.3f, %.4f round trips per decision\n",
				w.name, p.Name, res.Admitted, res.Bound, res.Accuracy(), res.RoundTripsPerDecision())
			rows[i].runs = append(rows[i].runs, res)
		}
	}
	return rows, nil
}
