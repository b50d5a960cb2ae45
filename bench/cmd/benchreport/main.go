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
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/bench"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/internal/stamp"
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
	// The engine measured: bench/ sits in the main module's directory.
	if env.engine, err = stamp.Engine(".."); err != nil {
		return err
	}
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
	// Every benchmark line goes to the raw file and to the terminal.
	lines := io.MultiWriter(rawFile, os.Stdout)
	dec, err := decisions(peers, srv.Addr, o.count, goroutineCounts, lines)
	if err != nil {
		return err
	}
	// Exact mode by algorithm, one goroutine, beside redis_rate.
	algs, err := named(peers, []string{baseline})
	if err != nil {
		return err
	}
	byAlg, err := decisions(append(bench.ExactAlgorithms(), algs...), srv.Addr, o.count, []int{1}, lines)
	if err != nil {
		return err
	}

	// Exact mode's Redis time against the baseline's, admitting and
	// denying.
	rt, err := named(peers, []string{exactPeer, baseline})
	if err != nil {
		return err
	}
	redisTime, err := redisTimes(rt, srv.Addr, o.count, lines)
	if err != nil {
		return err
	}

	// Keys used a few times, lease mode against exact mode.
	fu, err := named(peers, []string{lease, exactPeer})
	if err != nil {
		return err
	}
	fewUse, err := fewUses(fu, srv.Addr, o.count, lines)
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
	reg.redisTime = redisTime
	reg.fewUse = fewUse
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

// env describes where and how the report was made.
type env struct {
	date, cpu, kernel, goVersion, redisVersion string
	cores, procs                               int
	modules                                    [][2]string // path, version
	src                                        tree        // the ratelease measured
	engine                                     string      // its engine's fingerprint (internal/stamp)
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
