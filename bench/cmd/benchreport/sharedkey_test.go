package main

import (
	"strings"
	"testing"

	"github.com/ratelease/ratelease/bench"
)

// sharedKeyResults are made-up results of the shared-key workload: a cell
// on one key and one over many keys.
func sharedKeyResults() []bench.SharedKeyResult {
	run := func(cpu, calls float64, admitted int64, bound, worst float64) bench.SharedKeyRun {
		return bench.SharedKeyRun{CPU: cpu, Calls: calls, Micros: 20 * calls, Decisions: 30000, Intended: 30000, Admitted: admitted, Bound: bound, Worst: worst}
	}
	return []bench.SharedKeyResult{
		{Cell: bench.SharedKeyCell{Instances: 10}, Lease: run(0.016, 504, 14700, 15030, 1.17), Exact: run(0.18, 30000, 14970, 15030, 1.11)},
		{Cell: bench.SharedKeyCell{Instances: 300, Keys: 10000}, Lease: run(0.169, 29682, 29000, 0, 0), Exact: run(0.121, 30000, 29030, 0, 0)},
	}
}

// docs/fleet.md from made-up results: stamped with the commit and the
// command, which names the way to write it alone; a row per cell, the
// bound and the fair share on one key only; marked when the tree is not a
// commit's.
func TestSharedKeyDoc(t *testing.T) {
	render := func(src tree) string {
		var b strings.Builder
		e := env{date: "2026-11-26", cores: 2, cpu: "a CPU", redisVersion: "8.0.0", src: src, command: "cd bench && go run ./cmd/benchreport -only shared-key "}
		if err := writeSharedKeyDoc(&b, e, sharedKeyResults(), "fleet.svg"); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	doc := render(tree{commit: "8f39020b7759"})
	for _, want := range []string{
		"on 2026-11-26, commit 8f39020b7759,",
		"```\ncd bench && go run ./cmd/benchreport -only shared-key\n```",
		"| cell | CPU lease | CPU exact | lease/exact | calls/dec lease | µs/call lease | µs/call exact | fallback lease | busy lease | of bound lease | admitted lease/exact | fair lease | fair exact |\n",
		"| 10x/1key | 1.6% | 18.0% | 0.09 | 0.0168 | 20.0 | 20.0 | 0 | 0 | 0.978 | 0.982 | 1.17 | 1.11 |\n",
		"| 300x/10000keys | 16.9% | 12.1% | 1.40 | 0.9894 | 20.0 | 20.0 | 0 | 0 | — | 0.999 | — | — |\n",
		"![Redis CPU by instances on one key](fleet.svg)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("fleet.md has no %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, dirtyMark) {
		t.Errorf("a commit's fleet.md is marked:\n%s", doc)
	}
	doc = render(tree{commit: "8f39020b7759", changed: []string{"limiter.go"}})
	if !strings.Contains(doc, "Not a commit's figures") || !strings.Contains(doc, "| 10x/1key "+dirtyMark+" |") {
		t.Errorf("a dirty tree's fleet.md does not say so:\n%s", doc)
	}
	if svg := sharedKeyPlot(sharedKeyResults()); !strings.HasPrefix(svg, "<svg ") || strings.Count(svg, "<polyline") != 2 || strings.Count(svg, "<circle") != 2 {
		t.Errorf("the plot has not a line per mode and a point per one-key cell:\n%s", svg)
	}
}
