package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/internal/redistest"
)

// addr is the redis-server TestMain started for this package's tests.
var addr string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(redistest.RequireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "redis-server not found and %s=1: %v\n", redistest.RequireEnv, err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "skipping: redis-server not found (set %s=1 to fail instead): %v\n", redistest.RequireEnv, err)
		return 0
	}
	dir, err := os.MkdirTemp("", "ratelease-bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Launch(bin, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr = srv.Addr
	code := m.Run()
	srv.Kill()
	if code == 0 {
		// goleak.VerifyTestMain, after the server's own goroutine has ended.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// BenchmarkDecisions is one decision through each peer, sequentially and
// from 32 goroutines; compare with
//
//	benchstat -col /impl out/new.txt
func BenchmarkDecisions(b *testing.B) {
	for _, p := range Peers() {
		for _, g := range []int{1, 32} {
			b.Run(fmt.Sprintf("impl=%s/goroutines=%d", p.Name, g), Decisions(p, addr, g))
		}
	}
}

// BenchmarkRedisTime is what an exact decision costs Redis against
// redis_rate's (redis-us/op), on 64 keys, admitting and denying, from 1
// and 8 goroutines; compare with
//
//	benchstat -col /impl out/new.txt
func BenchmarkRedisTime(b *testing.B) {
	for _, deny := range []bool{false, true} {
		for _, g := range []int{1, 8} {
			for _, p := range Peers() {
				if p.Name != "ratelease-exact" && p.Name != "redis_rate" {
					continue
				}
				load := "admitting"
				if deny {
					load = "denying"
				}
				b.Run(fmt.Sprintf("load=%s/goroutines=%d/impl=%s", load, g, p.Name), RedisTime(p, addr, g, deny))
			}
		}
	}
}

// BenchmarkFewUse is keys used once, twice and 4 times each from 16
// goroutines, lease mode against exact mode; compare with
//
//	benchstat -col /impl out/new.txt
func BenchmarkFewUse(b *testing.B) {
	for _, uses := range []int{1, 2, 4} {
		for _, p := range Peers() {
			if p.Name != "ratelease-exact" && p.Name != "ratelease-lease" {
				continue
			}
			b.Run(fmt.Sprintf("uses=%d/impl=%s", uses, p.Name), FewUse(p, addr, uses))
		}
	}
}

// Every peer runs the accuracy workload; the global ones keep within the
// limit, and ratelease in lease mode makes few round trips. (The figures
// of docs/benchmarks.md come from cmd/benchreport, on longer runs.)
func TestAccuracy(t *testing.T) {
	cfg := DefaultAccuracy
	cfg.Duration = 1500 * time.Millisecond
	for _, p := range Peers() {
		t.Run(p.Name, func(t *testing.T) {
			res, err := Accuracy(context.Background(), p, addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("admitted %v = %d of bound %.0f: %.3f; %d decisions, %.4f round trips each",
				res.Admitted, res.Total(), res.Bound, res.Accuracy(), res.Decisions, res.RoundTripsPerDecision())
			// The load reached its demand; a peer that makes a round trip
			// a decision on a loaded 2-core machine (CI runs this beside
			// the race tests) is held to half of it, still the limit's
			// rate: its figure, not its verdict, is the machine's.
			wantDecisions := cfg.Demand * float64(cfg.Rate) * cfg.Duration.Seconds()
			floor := 0.9
			if res.RoundTripsPerDecision() > 0.5 {
				floor = 0.5
			}
			if float64(res.Decisions) < floor*wantDecisions {
				t.Errorf("%d decisions, want about %.0f (at least %.0f%%): the load did not reach its demand", res.Decisions, wantDecisions, 100*floor)
			}
			switch {
			case !p.Global:
				if res.RoundTrips != 0 {
					t.Errorf("a local limiter made %d round trips", res.RoundTrips)
				}
			case p.Name == "ulule-limiter":
				// A fixed window admits Rate in each window it touches,
				// whatever the bucket bound: checked only for sanity.
				if a := res.Accuracy(); a < 0.5 || a > 1.5 {
					t.Errorf("accuracy %.3f", a)
				}
			default:
				// A little over 1 for timing: Redis's clock is read just
				// before the first decision and just after the last. How
				// close to 1 a run of 1.5 s comes depends on how much of
				// the machine it gets: an idle one reaches 0.9, a loaded
				// 2-core one 0.75.
				if a := res.Accuracy(); a > 1.01 || a < 0.75 {
					t.Errorf("accuracy %.3f, want within [0.75, 1.01]", a)
				}
			}
			if p.Name == "ratelease-lease" {
				// At this binding limit leases are small: a few hundredths
				// of a round trip per decision (docs/benchmarks.md has the
				// figures; the 0.01 goal is not always met here). This
				// catches a fall back to a round trip per decision.
				if r := res.RoundTripsPerDecision(); r > 0.2 {
					t.Errorf("%.4f round trips per decision in lease mode, want at most 0.2", r)
				}
			}
		})
	}
}

// Every peer, and exact mode with each algorithm, answers the decision
// benchmark (every decision admits: Decisions says so), and the hook
// counts what it should: one round trip per decision for the exact peers,
// none for the local one, few for ratelease's leases.
func TestDecisions(t *testing.T) {
	for _, p := range append(Peers(), ExactAlgorithms()...) {
		r := testing.Benchmark(Decisions(p, addr, 1))
		if r.N == 0 {
			t.Fatalf("%s: the benchmark failed", p.Name)
		}
		rt := r.Extra["roundtrips/op"]
		t.Logf("%s: %d decisions, %v, %.4f round trips each", p.Name, r.N, r.T, rt)
		switch p.Name {
		case "ratelease-lease":
			if rt > 0.01 {
				t.Errorf("%s: %.4f round trips per decision", p.Name, rt)
			}
		case "x-time-rate":
			if rt != 0 {
				t.Errorf("%s: %.4f round trips per decision", p.Name, rt)
			}
		default:
			if rt < 1 || rt > 1.01 {
				t.Errorf("%s: %.4f round trips per decision, want 1", p.Name, rt)
			}
		}
	}
}

// peersNamed returns the peers of Peers with the given names, in that order.
func peersNamed(t *testing.T, names ...string) []Peer {
	t.Helper()
	var ps []Peer
	for _, n := range names {
		i := slices.IndexFunc(Peers(), func(p Peer) bool { return p.Name == n })
		if i < 0 {
			t.Fatalf("no peer %q", n)
		}
		ps = append(ps, Peers()[i])
	}
	return ps
}

// The everyday workload, shortened, through the peers the report runs it
// for: every request is made and admitted (the load is under the limit),
// the exact peers pay about a round trip per decision, and lease mode no
// more than exact mode.
func TestEveryday(t *testing.T) {
	cfg := DefaultEveryday
	cfg.Duration = 3 * time.Second
	peers := peersNamed(t, "ratelease-lease", "ratelease-exact", "redis_rate")
	res, err := Everyday(context.Background(), peers, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(cfg.Instances * cfg.Requests())
	for i, r := range res {
		name := peers[i].Name
		t.Logf("%s: %d decisions, %d admitted, %d round trips (%.3f per decision), %d handshake round trips",
			name, r.Decisions, r.Admitted, r.RoundTrips, r.RoundTripsPerDecision(), r.Handshakes)
		if r.Decisions != want {
			t.Errorf("%s: %d decisions, want %d", name, r.Decisions, want)
		}
		if r.Admitted != r.Decisions {
			t.Errorf("%s: admitted %d of %d decisions, want all: the load is under the limit", name, r.Admitted, r.Decisions)
		}
		if name != "ratelease-lease" {
			// A script's first run on a fresh server costs EVALSHA and EVAL.
			if v := r.RoundTripsPerDecision(); v < 1 || v > 1.25 {
				t.Errorf("%s: %.3f round trips per decision, want about 1", name, v)
			}
		}
	}
	if lease, exact := res[0].RoundTripsPerDecision(), res[1].RoundTripsPerDecision(); lease > exact {
		t.Errorf("lease mode: %.3f round trips per decision, more than exact mode's %.3f", lease, exact)
	}
}

// The fleet workload, shortened and with 5 idle instances, through lease
// mode: the busy pair asks what it should, the idle ones exist, and lease
// mode stays far from a round trip per decision. (The ratio is logged, not
// checked: the root module's TestEconomyFleet checks it.)
func TestFleet(t *testing.T) {
	cfg := DefaultFleet
	cfg.Duration = 1500 * time.Millisecond
	cfg.Idle = 5
	res, err := Fleet(context.Background(), peersNamed(t, "ratelease-lease")[0], addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantDecisions := float64(cfg.Busy) * cfg.PerBusy * cfg.Duration.Seconds()
	for _, r := range []FleetRun{res.Alone, res.Beside} {
		t.Logf("%d idle: the pair made %d decisions (%d admitted) in %d round trips: %.4f per decision; the idle ones %d round trips",
			r.Idle, r.Decisions, r.Admitted, r.RoundTrips, r.RoundTripsPerDecision(), r.IdleRoundTrips)
		if float64(r.Decisions) < 0.9*wantDecisions {
			t.Errorf("%d idle: %d decisions, want about %.0f: the load did not reach its demand", r.Idle, r.Decisions, wantDecisions)
		}
		if v := r.RoundTripsPerDecision(); v > 0.2 {
			t.Errorf("%d idle: %.4f round trips per decision in lease mode, want at most 0.2", r.Idle, v)
		}
	}
	if res.Alone.Idle != 0 || res.Beside.Idle != cfg.Idle {
		t.Errorf("runs beside %d and %d idle instances, want 0 and %d", res.Alone.Idle, res.Beside.Idle, cfg.Idle)
	}
	t.Logf("ratio beside ÷ alone: %.2f", res.Ratio())
}

// The ceiling workload, shortened: every peer that decides in Redis, and
// ratelease's pipelined exact decisions, make decisions that all admit,
// and the server's CPU accounting sees them cost something.
func TestCeiling(t *testing.T) {
	cfg := CeilingConfig{Goroutines: 8, Keys: 100, Batch: 8, Duration: 300 * time.Millisecond}
	check := func(name string, r CeilingResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %d decisions, %.0f/s, %.0f per Redis CPU second", name, r.Decisions, r.PerSecond(), r.PerRedisSecond())
		if r.Decisions < 100 || r.RedisSeconds <= 0 || r.Seconds < 0.3 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	for _, p := range peersNamed(t, "ratelease-exact", "redis_rate") {
		r, err := Ceiling(p, addr, cfg)
		check(p.Name, r, err)
	}
	r, err := CeilingPipelined(addr, cfg)
	check("pipelined", r, err)
	cl := redistest.StartCluster(t, 3)
	for _, p := range peersNamed(t, "ratelease-exact", "redis_rate") {
		r, err := CeilingCluster(p, cl.Addrs(), cfg)
		check(p.Name+" on a cluster of 3 masters", r, err)
	}
}

// The shared-key workload, shortened (10 and 100 instances on one key, 3 s
// in each mode), checked with the defaults (New(client), PerSecond) against
// what lease mode reaches on a loaded 2-core machine: Redis CPU at most 0.8
// of exact mode's on the same demand (0.2 with 10 instances; an idle
// machine reaches half and a tenth), at most 1% of decisions by the
// failure mode while Redis is up, the bound held, and every instance
// admitted at least 0.75 of its max-min fair share. (docs/fleet.md has the
// full workload's figures.)
func TestSharedKey(t *testing.T) {
	cfg := DefaultSharedKey
	cfg.Cells = []SharedKeyCell{{Instances: 10}, {Instances: 100}}
	cfg.Duration = 3 * time.Second
	for _, c := range cfg.Cells {
		t.Run(c.String(), func(t *testing.T) {
			r, err := SharedKey(context.Background(), addr, cfg, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(r)
			checkSharedKey(t, r)
		})
	}
}

// checkSharedKey asserts a cell's bounds (see TestSharedKey). The bound on
// what is admitted holds on any machine; the others are what lease mode
// reaches on a loaded 2-core machine.
func checkSharedKey(t *testing.T, r SharedKeyResult) {
	t.Helper()
	most := 0.8
	switch {
	case r.Cell.Keys > 0:
		// Each instance sees a key of many far less than once a lease's
		// life: no lease serves two decisions, and the key is asked per
		// decision in both modes (see docs/scaling.md): about exact
		// mode's cost.
		most = 1.6
	case r.Cell.Instances <= 10:
		most = 0.2
	}
	if r.CPURatio() > most {
		t.Errorf("%s: lease mode's Redis CPU %.2fx exact mode's, want at most %.2f", r.Cell, r.CPURatio(), most)
	}
	if r.Lease.Fallback > r.Lease.Decisions/100 {
		t.Errorf("%s: %d of lease mode's %d decisions by the failure mode while Redis was up, want at most 1%%", r.Cell, r.Lease.Fallback, r.Lease.Decisions)
	}
	if r.Cell.Keys == 0 {
		if float64(r.Lease.Admitted) > r.Lease.Bound {
			t.Errorf("%s: lease mode admitted %d > the bound %.0f", r.Cell, r.Lease.Admitted, r.Lease.Bound)
		}
		if r.Lease.Worst < 0.75 {
			t.Errorf("%s: the worst instance had %.2f of its max-min fair share, want at least 0.75", r.Cell, r.Lease.Worst)
		}
	}
	// A machine too busy to keep up offers less than intended: the
	// figures are then those of what it did offer, but a run that offered
	// less than three quarters no longer measured the regime it names.
	off := math.Abs(float64(r.Lease.Decisions-r.Lease.Intended)) / float64(r.Lease.Intended)
	if off > 0.25 {
		t.Errorf("%s: lease mode made %d decisions, intended %d: the machine did not keep up", r.Cell, r.Lease.Decisions, r.Lease.Intended)
	}
}
