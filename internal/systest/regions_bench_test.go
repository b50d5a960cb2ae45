package systest_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/internal/stamp"
)

// regionsOut names the file BenchmarkRegions writes its table to.
var regionsOut = flag.String("regions-out", "", "BenchmarkRegions writes its table, stamped, to this file (docs/regions-run.md)")

// A shape of demand for the regional tier: the units each region asks
// for a second (regionDemand, skewed: the first region five times its
// equal share), and how they are asked.
type regionShape struct {
	name string
	// flood: each instance's goroutines ask as fast as they can, instead
	// of paced; wait: Wait instead of Allow; single: every decision on a
	// key of its own.
	flood, wait, single bool
}

var regionShapes = []regionShape{
	{name: "paced"},
	{name: "flood", flood: true},
	{name: "wait", wait: true},
	{name: "single-use keys", single: true},
}

// The limit of BenchmarkRegions: 200 units a second (a token bucket's
// burst the same), and each region's demand: five, 0.6 and 0.8 times an
// equal third of it.
const regionRate = 200

var regionDemand = []float64{5 * regionRate / 3.0, 0.6 * regionRate / 3, 0.8 * regionRate / 3}

// regionRow is a cell's results: the worldwide tier, exact mode on one
// Redis, and lease mode on one Redis (one region), on the same demand.
type regionRow struct {
	shape               regionShape
	alg                 ratelease.Algorithm
	world, exact, local worldLoad
	bound               float64
	cross               int64
}

// BenchmarkRegions runs the regional tier on the world of the regional
// tests (three regions 80, 120 and 160 ms from the global Redis, two to
// four instances each) in each shape of demand and algorithm, and on the
// same demand exact mode and lease mode on one Redis (one region, no
// cross-region link), 8 s each (an op). It asserts the worldwide bound
// and reports what the worldwide tier admitted over what exact mode
// admitted, the cross-region round trips per decision, the p99 decision
// latency of both lease runs, and the worst region's share of its
// max-min fair share. With -regions-out it writes docs/regions-run.md,
// stamped with its date, commit and machine:
//
//	go test -run '^$' -bench '^BenchmarkRegions$' -benchtime 1x -timeout 30m ./internal/systest \
//	  -args -regions-out $PWD/docs/regions-run.md
func BenchmarkRegions(b *testing.B) {
	tree := treeState()
	engine, err := stamp.Engine("../..")
	if err != nil {
		b.Fatal(err)
	}
	d := loadLength(8 * time.Second)
	var rows []regionRow
	for _, sh := range regionShapes {
		for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowCounter} {
			b.Run(fmt.Sprintf("shape=%s/alg=%s", sh.name, alg), func(b *testing.B) {
				var row regionRow
				for b.Loop() {
					row = runRegionCell(b, sh, alg, d)
					atMost(b, "worldwide", float64(row.world.total()), row.bound)
				}
				rows = append(rows, row)
				b.ReportMetric(ratio(row.world.total(), row.exact.total()), "world/exact")
				b.ReportMetric(ratio(row.world.steadyTotal(), row.exact.steadyTotal()), "steady-world/exact")
				b.ReportMetric(ratio(row.cross, sumOf(row.world.decisions)), "cross/decision")
				b.ReportMetric(float64(percentile(row.world.latencies, 0.99).Nanoseconds()), "world-p99-ns")
				b.ReportMetric(float64(percentile(row.local.latencies, 0.99).Nanoseconds()), "local-p99-ns")
				b.ReportMetric(float64(percentile(row.world.lateLatencies, 0.99).Nanoseconds()), "steady-world-p99-ns")
				b.ReportMetric(float64(percentile(row.local.lateLatencies, 0.99).Nanoseconds()), "steady-local-p99-ns")
				b.ReportMetric(row.world.worst(row.offered()), "fair")
			})
		}
	}
	if *regionsOut != "" {
		if err := os.WriteFile(*regionsOut, []byte(regionReport(rows, d, tree, engine)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func sumOf(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// offered is what each region asked for over the run, by its decisions
// (a flood asks as fast as it can).
func (r regionRow) offered() []float64 {
	out := make([]float64, len(r.world.decisions))
	for i, n := range r.world.decisions {
		out[i] = float64(n)
	}
	return out
}

// runRegionCell runs one cell: the worldwide tier, then exact mode and
// lease mode on one Redis, on the same demand.
func runRegionCell(b *testing.B, sh regionShape, alg ratelease.Algorithm, d time.Duration) regionRow {
	b.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	l := ratelease.Limit{Algorithm: alg, Rate: regionRate, Period: time.Second}
	if sh.single {
		l.Rate = 5 // per key; every key is used once
	}
	base := policy(b, "regions-"+run, l)
	row := regionRow{shape: sh, alg: alg}
	w := newWorld(b, worldInstances, worldRTT)
	w.crossTrips()
	row.world = runShape(b, w.regions, w.globalNow, sh, base.Worldwide(), d)
	row.cross = w.crossTrips()
	w.check(b)
	switch {
	case sh.single:
		row.bound = float64(sumOf(row.world.decisions)) // a key used once admits its one unit at most
	case alg == ratelease.TokenBucket:
		row.bound = bucket(regionRate, regionRate)(row.world.s)
	default:
		row.bound = windows(regionRate)(row.world.s)
	}
	for _, exact := range []bool{true, false} {
		srv := redistest.Start(b)
		var opts []ratelease.Option
		if exact {
			opts = append(opts, ratelease.WithExact())
		}
		var fleet [][]*instance
		for _, n := range worldInstances {
			ins := newInstances(b, n, clientsTo(b, srv.Addr), opts...)
			for _, in := range ins {
				if err := in.l.Ping(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			fleet = append(fleet, ins)
		}
		res := runShape(b, fleet, redisClock(b, dial(b, srv.Addr)), sh, base, d)
		if exact {
			row.exact = res
		} else {
			row.local = res
		}
	}
	return row
}

// runShape runs the shape sh of regionDemand on p in fleet (a region per
// element) for d.
func runShape(b *testing.B, fleet [][]*instance, now func() int64, sh regionShape, p *ratelease.Policy, d time.Duration) worldLoad {
	b.Helper()
	var keys atomic.Int64
	key := func() string {
		if sh.single {
			return "k" + strconv.FormatInt(keys.Add(1), 10)
		}
		return "k"
	}
	decide := func(in *instance, _, _ int) int64 {
		if sh.wait {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if in.l.Wait(ctx, p, key()) == nil {
				in.count(ratelease.Result{Allowed: true}, 1)
				return 1
			}
			in.count(ratelease.Result{}, 1)
			return 0
		}
		if in.allowN(p, key(), 1) {
			return 1
		}
		return 0
	}
	demand := make([]float64, len(regionDemand))
	for r, x := range regionDemand {
		demand[r] = x * d.Seconds()
	}
	if !sh.flood {
		return runRegions(b, fleet, now, demand, d, decide)
	}
	// Flat out: two goroutines per instance.
	l := newWorldLoad(len(fleet))
	var mu sync.Mutex
	l.s.start = now()
	start := time.Now()
	stop, warm := start.Add(d), start.Add(d/4)
	var wg sync.WaitGroup
	for r, ins := range fleet {
		for i, in := range ins {
			for g := range 2 {
				wg.Go(func() {
					var lat, late []time.Duration
					var units, steady, n int64
					for t0 := time.Now(); t0.Before(stop); t0 = time.Now() {
						u := decide(in, r, 2*i+g)
						el := time.Since(t0)
						lat = append(lat, el)
						units += u
						if !t0.Before(warm) {
							steady += u
							late = append(late, el)
						}
						n++
					}
					mu.Lock()
					l.admitted[r] += units
					l.steady[r] += steady
					l.decisions[r] += n
					l.latencies = append(l.latencies, lat...)
					l.lateLatencies = append(l.lateLatencies, late...)
					mu.Unlock()
				})
			}
		}
	}
	wg.Wait()
	l.s.end = now()
	return l
}

// regionReport is docs/regions-run.md: the cells as a table, stamped.
func regionReport(rows []regionRow, d time.Duration, tree, engine string) string {
	var b strings.Builder
	b.WriteString("# The regional tier: demand shapes\n\n")
	fmt.Fprintf(&b, "Generated by `BenchmarkRegions` (internal/systest/regions_bench_test.go) on %s, commit %s, engine fingerprint `%s`, %s/%s, %d CPUs, %s; do not edit by hand. Made with:\n\n",
		time.Now().UTC().Format("2006-01-02"), tree, engine, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	b.WriteString("```\ngo test -run '^$' -bench '^BenchmarkRegions$' -benchtime 1x -timeout 30m ./internal/systest \\\n  -args -regions-out $PWD/docs/regions-run.md\n```\n\n")
	fmt.Fprintf(&b, "Each cell runs %v, with the defaults, on one global redis-server and three regional ones (regions 80, 120 and 160 ms from the global Redis: a proxy delays each reply; 2, 3 and 4 instances), all on one 2-core machine with the load, a worldwide limit of %d units a second (a token bucket's burst the same; windows of one second; single-use keys: 5 a second per key, each key used once). Regions ask %.0f, %.0f and %.0f a second (the first five times its equal share), paced (open loop: each decision in a goroutine of its own when it is due, however long the ones before take, as requests arrive), or flat out (flood: two goroutines per instance, each deciding as soon as its last decision returned), or by Wait (200 ms deadline, paced). The same demand then runs in exact mode and in lease mode on one redis-server (one region). ",
		d, regionRate, regionDemand[0], regionDemand[1], regionDemand[2])
	b.WriteString("*world/exact*: units the regions admitted over exact mode's; *steady*: the same for the decisions made from a quarter of the run on, once the pools and leases are stocked (what the fleet holds in them is a float of units admitted later, which a run's end leaves unused); *of bound*: over what the bound allows over the run's span of the global Redis's time (from a fresh key every unit was granted within it: Burst + Rate·T, or Rate per window touched; single-use keys: one per key); *cross/dec*: round trips to the global Redis per decision; *p99*: decision latency, worldwide and in one region, over the whole run (a key's first decisions in each region wait for its pool's first refill, a cross-region round trip or two) and in steady state (the decisions made from a quarter of the run on); *fair*: the worst region's admitted over its max-min fair share of what was admitted.\n\n")
	b.WriteString("| shape | algorithm | world/exact | steady | of bound | cross/dec | p99 world | steady | p99 one region | steady | fair |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %.3f | %.3f | %.3f | %.4f | %v | %v | %v | %v | %.2f |\n",
			r.shape.name, r.alg, ratio(r.world.total(), r.exact.total()), ratio(r.world.steadyTotal(), r.exact.steadyTotal()), float64(r.world.total())/r.bound,
			ratio(r.cross, sumOf(r.world.decisions)),
			percentile(r.world.latencies, 0.99).Round(time.Microsecond), percentile(r.world.lateLatencies, 0.99).Round(time.Microsecond),
			percentile(r.local.latencies, 0.99).Round(time.Microsecond), percentile(r.local.lateLatencies, 0.99).Round(time.Microsecond),
			r.world.worst(r.offered()))
	}
	return b.String()
}
