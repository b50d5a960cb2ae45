package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/perf/benchmath"

	"github.com/ratelease/ratelease/bench"
)

// decisionKey names one decision benchmark.
type decisionKey struct {
	impl       string
	goroutines int
}

// decisionSamples are one benchmark's values, one per round, by unit.
type decisionSamples map[string][]float64

// decisions runs every decision benchmark count times, interleaved, writes
// each result as a benchmark line to w, and returns the values.
func decisions(peers []bench.Peer, addr string, count int, goroutines []int, w io.Writer) (map[decisionKey]decisionSamples, error) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/ratelease/ratelease/bench\ncpu: %s\n", runtime.GOOS, runtime.GOARCH, cpuModel())
	res := map[decisionKey]decisionSamples{}
	for round := 0; round < count; round++ {
		for _, p := range peers {
			for _, g := range goroutines {
				name := fmt.Sprintf("Decisions/impl=%s/goroutines=%d", p.Name, g)
				if err := benchmark(res, decisionKey{p.Name, g}, name, bench.Decisions(p, addr, g), w); err != nil {
					return nil, err
				}
			}
		}
	}
	return res, nil
}

// benchmark runs f once, writes its result to w as a benchmark
// line named Benchmark<name>, and adds its values to res under k.
func benchmark[K comparable](res map[K]decisionSamples, k K, name string, f func(*testing.B), w io.Writer) error {
	r := testing.Benchmark(f)
	if r.N == 0 {
		return fmt.Errorf("benchmark %s failed", name)
	}
	// A run with decisions denied or failed where every one must be
	// admitted keeps its figures; their count (bench.FailedMetric) goes
	// to the goals (failedDecisions), so that no report hides them.
	fmt.Fprintf(w, "Benchmark%s-%d\t%s\t%s\n", name, runtime.GOMAXPROCS(0), r.String(), r.MemString())
	if res[k] == nil {
		res[k] = decisionSamples{}
	}
	res[k].add(r)
	return nil
}

// failedDecisions is how many decisions, over every run in m under impl,
// were denied or failed where every one must be admitted, and how many
// runs there were.
func failedDecisions[K interface {
	comparable
	peer() string
}](m map[K]decisionSamples, impl string) (failed float64, runs int) {
	for k, s := range m {
		if k.peer() != impl {
			continue
		}
		for _, v := range s[bench.FailedMetric] {
			failed += v
		}
		runs += len(s["ns/op"])
	}
	return failed, runs
}

func (k decisionKey) peer() string { return k.impl }
func (k fewUseKey) peer() string   { return k.impl }

// add appends r's values to s.
func (s decisionSamples) add(r testing.BenchmarkResult) {
	s["ns/op"] = append(s["ns/op"], float64(r.T.Nanoseconds())/float64(r.N))
	s["B/op"] = append(s["B/op"], float64(r.AllocedBytesPerOp()))
	s["allocs/op"] = append(s["allocs/op"], float64(r.AllocsPerOp()))
	for unit, v := range r.Extra {
		s[unit] = append(s[unit], v)
	}
}

// redisTimeKey names one bench.RedisTime benchmark.
type redisTimeKey struct {
	impl       string
	goroutines int
	deny       bool
}

// redisTimeGoroutines are the goroutine counts RedisTime runs with.
var redisTimeGoroutines = []int{1, 8}

// redisTimes runs bench.RedisTime for each peer, admitting and denying,
// at each of redisTimeGoroutines, count times, interleaved, writes each
// result as a benchmark line to w, and returns the values.
func redisTimes(peers []bench.Peer, addr string, count int, w io.Writer) (map[redisTimeKey]decisionSamples, error) {
	res := map[redisTimeKey]decisionSamples{}
	for round := 0; round < count; round++ {
		for _, deny := range []bool{false, true} {
			for _, g := range redisTimeGoroutines {
				for _, p := range peers {
					name := fmt.Sprintf("RedisTime/load=%s/goroutines=%d/impl=%s", denyName(deny), g, p.Name)
					if err := benchmark(res, redisTimeKey{p.Name, g, deny}, name, bench.RedisTime(p, addr, g, deny), w); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return res, nil
}

// denyName names RedisTime's load in benchmark lines and tables.
func denyName(deny bool) string {
	if deny {
		return "denying"
	}
	return "admitting"
}

// summary is benchstat's summary of values: the median, with the range a
// 95% confidence interval gives it.
func summary(values []float64) benchmath.Summary {
	return benchmath.AssumeNothing.Summary(benchmath.NewSample(slices.Clone(values), &benchmath.DefaultThresholds), 0.95)
}

// median of values.
func median(values []float64) float64 { return summary(values).Center }

// fewUseKey names one bench.FewUse benchmark.
type fewUseKey struct {
	impl string
	uses int
}

// fewUseCounts are the uses of each key FewUse runs with.
var fewUseCounts = []int{1, 2, 4}

// fewUses runs bench.FewUse for each peer at each of fewUseCounts, count
// times, interleaved, writes each result as a benchmark line to w, and
// returns the values.
func fewUses(peers []bench.Peer, addr string, count int, w io.Writer) (map[fewUseKey]decisionSamples, error) {
	res := map[fewUseKey]decisionSamples{}
	for round := 0; round < count; round++ {
		for _, uses := range fewUseCounts {
			for _, p := range peers {
				name := fmt.Sprintf("FewUse/uses=%d/impl=%s", uses, p.Name)
				if err := benchmark(res, fewUseKey{p.Name, uses}, name, bench.FewUse(p, addr, uses), w); err != nil {
					return nil, err
				}
			}
		}
	}
	return res, nil
}
