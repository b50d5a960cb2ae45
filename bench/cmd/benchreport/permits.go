package main

import (
	"fmt"

	"github.com/ratelease/ratelease/bench"
)

// permitRow is the permits workload's runs in one mode.
type permitRow struct {
	mode string
	runs []bench.PermitResult
}

// permits runs the permits workload runs times in exact and in lease
// mode, interleaved.
func permits(addr string, runs int) ([]permitRow, error) {
	rows := []permitRow{{mode: "exact"}, {mode: "lease"}}
	for range runs {
		for i := range rows {
			r, err := bench.Permits(addr, rows[i].mode == "exact", bench.DefaultPermits)
			if err != nil {
				return nil, fmt.Errorf("permits, %s mode: %w", rows[i].mode, err)
			}
			fmt.Printf("permits %s: %.0f/s, %.4f round trips a permit\n", rows[i].mode, r.PerSecond(), r.RoundTripsPerPermit())
			rows[i].runs = append(rows[i].runs, r)
		}
	}
	return rows, nil
}
