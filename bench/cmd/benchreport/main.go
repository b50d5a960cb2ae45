// Command benchreport runs ratelease's comparison benchmarks and writes
// docs/benchmarks.md and docs/fleet.md. Run it from bench/:
//
//	go run ./cmd/benchreport
//
// It starts a redis-server of its own on a free loopback port (the one on
// PATH), runs the decision benchmarks of package bench -count times with
// the peers interleaved round by round (so that a slow spell of a shared
// machine hits them all alike), then the accuracy workloads, then the
// everyday and fleet workloads (-accuracy-runs times each), the ceiling
// and permits workloads, and last the shared-key workload (once, each of
// its cells on a redis-server of its own), and writes the report (-o), the
// raw benchmark lines (-raw, for benchstat) and the shared-key workload's
// report (-fleet, docs/fleet.md, with its plot beside it, docs/fleet.svg).
// It stops the servers it started, and only those, by their PIDs.
//
// The whole run takes a while; the shared-key workload runs alone, and
// writes docs/fleet.md and docs/fleet.svg only, with
//
//	go run ./cmd/benchreport -only shared-key
//
// The report is stamped with the commit it measured, so it refuses to run
// on a tree with uncommitted changes (the report's own outputs aside),
// before anything is measured: a stamp must not name a commit whose code
// was not the code measured. -dirty runs it anyway, and then every row of
// a ratelease peer is marked as not a commit's, with the changed paths in
// the header.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/perf/benchmath"

	"github.com/ratelease/ratelease/bench"
	"github.com/ratelease/ratelease/internal/redistest"
)

// goroutineCounts are the decision benchmark's two loads.
var goroutineCounts = []int{1, 32}

// baseline is the peer the goals compare with.
const baseline = "redis_rate"

// lease is the peer the goals are about: lease mode with its defaults.
const lease = "ratelease-lease"

func main() {
	testing.Init() // testing.Benchmark reads -test.benchtime
	count := flag.Int("count", 6, "rounds of the decision benchmarks")
	benchtime := flag.Duration("benchtime", time.Second, "time of each decision benchmark")
	accuracyRuns := flag.Int("accuracy-runs", 3, "runs of each accuracy workload, and of the everyday and fleet workloads")
	out := flag.String("o", "../docs/benchmarks.md", "the report to write")
	raw := flag.String("raw", "out/decisions.txt", "the benchmark lines to write, for benchstat")
	fleet := flag.String("fleet", "../docs/fleet.md", "the shared-key workload's report to write; its plot is written beside it, as .svg")
	only := flag.String("only", "", "run one part alone: "+sharedKeyOnly+" runs the shared-key workload and writes -fleet and its plot, not -o or -raw")
	dirty := flag.Bool("dirty", false, "run on a tree that is not a commit's (uncommitted changes, or no git checkout), marking every ratelease row of the report as such")
	flag.Parse()
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fail(err)
	}
	if *only != "" && *only != sharedKeyOnly {
		fail(fmt.Errorf("-only %q: the only part that runs alone is %s", *only, sharedKeyOnly))
	}
	o := options{count: *count, accuracyRuns: *accuracyRuns, out: *out, raw: *raw, fleet: *fleet, sharedKeyOnly: *only == sharedKeyOnly, dirty: *dirty}
	if err := run(o); err != nil {
		fail(err)
	}
}

// options are the command's flags.
type options struct {
	count, accuracyRuns int
	out, raw, fleet     string
	sharedKeyOnly       bool
	dirty               bool
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "benchreport:", err)
	os.Exit(1)
}

func run(o options) error {
	began := time.Now()
	// The tree is read before the run, not after: what was built is what
	// the tree held then (go run compiles first), and a commit made during
	// the run must not be named as the one measured.
	src, err := readTree(o.out, o.raw, o.fleet, plotPath(o.fleet))
	if err != nil {
		if !o.dirty {
			return fmt.Errorf("%w: %v; pass -dirty to mark every ratelease row as not a commit's", errDirty, err)
		}
		src = tree{}
	}
	if err := checkTree(src, o.dirty); err != nil {
		return err
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchreport")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Launch(bin, dir)
	if err != nil {
		return err
	}
	defer srv.Kill()
	interrupted := make(chan os.Signal, 1)
	signal.Notify(interrupted, os.Interrupt)
	go func() {
		<-interrupted
		srv.Kill()
		if cl := running.Load(); cl != nil {
			cl.Kill()
		}
		if s := serving.Load(); s != nil {
			s.Kill()
		}
		os.RemoveAll(dir)
		os.Exit(130)
	}()
	env, err := environment(srv.Addr)
	if err != nil {
		return err
	}
	env.src = src
	env.command = "cd bench && go run ./cmd/benchreport " + strings.Join(os.Args[1:], " ")
	if o.sharedKeyOnly {
		rows, err := sharedKeys(bin, dir)
		if err != nil {
			return err
		}
		return writeSharedKeyFiles(o.fleet, env, rows)
	}

	if err := os.MkdirAll(filepath.Dir(o.raw), 0o755); err != nil {
		return err
	}
	rawFile, err := os.Create(o.raw)
	if err != nil {
		return err
	}
	defer rawFile.Close()
	peers := bench.Peers()
	dec, err := decisions(peers, srv.Addr, o.count, goroutineCounts, io.MultiWriter(rawFile, os.Stdout))
	if err != nil {
		return err
	}
	// Exact mode by algorithm, one goroutine, beside redis_rate.
	algs, err := named(peers, []string{baseline})
	if err != nil {
		return err
	}
	byAlg, err := decisions(append(bench.ExactAlgorithms(), algs...), srv.Addr, o.count, []int{1}, io.MultiWriter(rawFile, os.Stdout))
	if err != nil {
		return err
	}

	var acc []accuracyRow
	for _, w := range workloads() {
		rows, err := accuracy(peers, srv.Addr, w, o.accuracyRuns)
		if err != nil {
			return err
		}
		acc = append(acc, rows...)
	}
	reg, err := regimes(peers, srv.Addr, o.accuracyRuns)
	if err != nil {
		return err
	}
	if reg.ceiling, err = ceilings(peers, srv.Addr, o.accuracyRuns); err != nil {
		return err
	}
	if reg.cluster, err = clusterCeilings(peers, bin, dir, o.accuracyRuns); err != nil {
		return err
	}
	if reg.permits, err = permits(srv.Addr, o.accuracyRuns); err != nil {
		return err
	}
	if reg.sharedKey, err = sharedKeys(bin, dir); err != nil {
		return err
	}
	env.took = time.Since(began).Round(time.Second)
	if err := writeSharedKeyFiles(o.fleet, env, reg.sharedKey); err != nil {
		return err
	}
	if env.fleet, err = filepath.Rel(filepath.Dir(o.out), o.fleet); err != nil {
		return err
	}
	env.fleet = filepath.ToSlash(env.fleet)
	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	if err := write(f, env, peers, dec, byAlg, acc, reg, o.count, o.accuracyRuns, o.raw); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

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
				r := testing.Benchmark(bench.Decisions(p, addr, g))
				if r.N == 0 {
					return nil, fmt.Errorf("decision benchmark %s with %d goroutines failed", p.Name, g)
				}
				fmt.Fprintf(w, "BenchmarkDecisions/impl=%s/goroutines=%d-%d\t%s\t%s\n",
					p.Name, g, runtime.GOMAXPROCS(0), r.String(), r.MemString())
				k := decisionKey{p.Name, g}
				if res[k] == nil {
					res[k] = decisionSamples{}
				}
				s := res[k]
				s["ns/op"] = append(s["ns/op"], float64(r.T.Nanoseconds())/float64(r.N))
				s["B/op"] = append(s["B/op"], float64(r.AllocedBytesPerOp()))
				s["allocs/op"] = append(s["allocs/op"], float64(r.AllocsPerOp()))
				for unit, v := range r.Extra {
					s[unit] = append(s[unit], v)
				}
			}
		}
	}
	return res, nil
}

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

// env describes where and how the report was made.
type env struct {
	date, cpu, kernel, goVersion, redisVersion string
	cores, procs                               int
	modules                                    [][2]string // path, version
	src                                        tree        // the ratelease measured
	took                                       time.Duration
	command                                    string
	fleet                                      string // the shared-key workload's report, relative to this one
}

func environment(addr string) (env, error) {
	e := env{
		date:      time.Now().UTC().Format("2006-01-02"),
		cpu:       cpuModel(),
		goVersion: runtime.Version(),
		cores:     runtime.NumCPU(),
		procs:     runtime.GOMAXPROCS(0),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	} else {
		e.kernel = runtime.GOOS
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.InfoMap(context.Background(), "server").Result()
	if err != nil {
		return e, err
	}
	e.redisVersion = info["Server"]["redis_version"]
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			switch m.Path {
			case "github.com/go-redis/redis_rate/v10", "github.com/ulule/limiter/v3", "golang.org/x/time",
				"github.com/redis/go-redis/v9":
				e.modules = append(e.modules, [2]string{m.Path, m.Version})
			}
		}
	}
	return e, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// summary is benchstat's summary of values: the median, with the range a
// 95% confidence interval gives it.
func summary(values []float64) benchmath.Summary {
	return benchmath.AssumeNothing.Summary(benchmath.NewSample(slices.Clone(values), &benchmath.DefaultThresholds), 0.95)
}

// median of values.
func median(values []float64) float64 { return summary(values).Center }
