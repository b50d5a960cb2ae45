package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratelease/ratelease/bench"
)

func TestChangedPaths(t *testing.T) {
	for _, c := range []struct {
		name   string
		status string
		skip   []string
		want   []string
	}{
		{"clean", "", nil, nil},
		{"modified, staged, untracked", " M a.go\x00M  b/c.lua\x00?? d.go\x00", nil, []string{"a.go", "b/c.lua", "d.go"}},
		{"a rename names both paths", "R  new.go\x00old.go\x00 M x.go\x00", nil, []string{"new.go", "old.go", "x.go"}},
		{"the report's own outputs are left out", " M docs/benchmarks.md\x00 M limiter.go\x00", []string{"docs/benchmarks.md"}, []string{"limiter.go"}},
		{"only the report's own outputs", " M docs/benchmarks.md\x00", []string{"docs/benchmarks.md"}, []string{}},
		{"paths with spaces", "?? a b.go\x00", nil, []string{"a b.go"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := changedPaths([]byte(c.status), c.skip)
			if len(got) != len(c.want) || !slices.Equal(got, c.want) {
				t.Errorf("changedPaths(%q) = %q, want %q", c.status, got, c.want)
			}
		})
	}
}

func TestCheckTree(t *testing.T) {
	clean := tree{commit: "8f39020b7759"}
	dirty := tree{commit: "8f39020b7759", changed: []string{"limiter.go"}}
	none := tree{}
	for _, c := range []struct {
		name  string
		t     tree
		allow bool
		ok    bool
	}{
		{"clean", clean, false, true},
		{"dirty, refused", dirty, false, false},
		{"dirty, with -dirty", dirty, true, true},
		{"no checkout, refused", none, false, false},
		{"no checkout, with -dirty", none, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkTree(c.t, c.allow)
			if (err == nil) != c.ok || (err != nil && !errors.Is(err, errDirty)) {
				t.Errorf("checkTree(%v, %v) = %v, want ok %v", c.t, c.allow, err, c.ok)
			}
		})
	}
}

// A report from a tree that is not a commit's says so in its header and
// marks every figure of a ratelease peer; one from a commit marks nothing.
func TestMarks(t *testing.T) {
	dirty := env{src: tree{commit: "8f39020b7759", changed: []string{"limiter.go"}}}
	if got := dirty.peer("ratelease-lease"); got != "ratelease-lease "+dirtyMark {
		t.Errorf("dirty: peer(ratelease-lease) = %q", got)
	}
	if got := dirty.peer("redis_rate"); got != "redis_rate" {
		t.Errorf("dirty: peer(redis_rate) = %q, want it unmarked", got)
	}
	if got := dirty.src.String(); !strings.Contains(got, "uncommitted") || !strings.Contains(got, "`limiter.go`") {
		t.Errorf("dirty: stamp %q names neither the changes nor the paths", got)
	}
	clean := env{src: tree{commit: "8f39020b7759"}}
	if got := clean.peer("ratelease-lease"); got != "ratelease-lease" {
		t.Errorf("clean: peer(ratelease-lease) = %q, want it unmarked", got)
	}
	if got := clean.src.String(); got != "8f39020b7759" {
		t.Errorf("clean: stamp %q", got)
	}
}

// readTree on a real checkout: a commit is clean, an edit or a new file
// makes it dirty, and the report's own output does not.
func TestReadTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q")
	write("a.go", "package a\n")
	write("docs/benchmarks.md", "old\n")
	write("bench/.keep", "")
	run("add", ".")
	run("commit", "-q", "-m", "x")
	t.Chdir(filepath.Join(dir, "bench")) // benchreport runs from bench/
	read := func() tree {
		t.Helper()
		tr, err := readTree("../docs/benchmarks.md", "out/decisions.txt")
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	if tr := read(); !tr.clean() || tr.commit == "" {
		t.Fatalf("a fresh commit: %+v, want clean", tr)
	}
	write("docs/benchmarks.md", "new\n")
	if tr := read(); !tr.clean() {
		t.Errorf("only the report changed: %+v, want clean", tr)
	}
	write("b.go", "package a\n")
	if tr := read(); tr.clean() || !slices.Equal(tr.changed, []string{"b.go"}) {
		t.Errorf("an untracked file: %+v, want b.go changed", tr)
	}
	write("a.go", "package a // edited\n")
	if tr := read(); !slices.Equal(tr.changed, []string{"a.go", "b.go"}) {
		t.Errorf("an edit: %+v, want a.go and b.go changed", tr)
	}
}

// The whole report, from made-up results: written from a tree that is not
// a commit's, its header says so and every row of a ratelease peer, and
// only those, is marked; written from a commit, nothing is.
func TestReportMarksADirtyTree(t *testing.T) {
	peers := bench.Peers()
	dec := map[decisionKey]decisionSamples{}
	for _, p := range peers {
		for _, g := range goroutineCounts {
			dec[decisionKey{p.Name, g}] = decisionSamples{
				"ns/op": {100, 100}, "decisions/s": {1e7, 1e7}, "roundtrips/op": {0.001, 0.001},
				"B/op": {0, 0}, "allocs/op": {0, 0},
			}
		}
	}
	var acc []accuracyRow
	for _, w := range workloads() {
		for _, p := range peers {
			acc = append(acc, accuracyRow{workload: w.name, impl: p.Name,
				runs: []bench.AccuracyResult{{Admitted: []int64{1, 2, 3, 4}, Decisions: 20, RoundTrips: 1, Seconds: 4, Bound: 10}}})
		}
	}
	var reg regimeResults
	for _, n := range everydayPeers {
		reg.everyday = append(reg.everyday, everydayRow{impl: n, runs: []bench.EverydayResult{{Decisions: 40, Admitted: 40, RoundTrips: 17}}})
	}
	for _, n := range fleetPeers {
		run := bench.FleetRun{Decisions: 100, RoundTrips: 1}
		reg.fleet = append(reg.fleet, fleetRow{impl: n, runs: []bench.FleetResult{{Alone: run, Beside: run}}})
	}
	reg.sharedKey = sharedKeyResults()
	render := func(src tree) string {
		var b strings.Builder
		if err := write(&b, env{src: src, command: "cd bench && go run ./cmd/benchreport", fleet: "fleet.md"}, peers, dec, nil, acc, reg, 2, 1, "out/decisions.txt"); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}

	report := render(tree{commit: "8f39020b7759", changed: []string{"limiter.go"}})
	if !strings.Contains(report, "Not a commit's figures") || !strings.Contains(report, "`limiter.go`") {
		t.Errorf("the header does not say the tree is not a commit's:\n%s", report)
	}
	section := ""
	for _, line := range strings.Split(report, "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| peer") || strings.HasPrefix(line, "| goal") || strings.HasPrefix(line, "| cell") || strings.HasPrefix(line, "| |") {
			continue
		}
		// Every goal is lease mode's, and every cell of the shared-key
		// workload ratelease's; elsewhere, the rows of a ratelease peer
		// (and the ratelease row of the header's table).
		ours := section == "## Goals" || section == "## A fleet on one key" || strings.HasPrefix(line, "| ratelease")
		if marked := strings.Contains(line, dirtyMark); marked != ours {
			t.Errorf("marked %v, want %v: %s", marked, ours, line)
		}
	}

	if report := render(tree{commit: "8f39020b7759"}); strings.Contains(report, dirtyMark) || strings.Contains(report, "Not a commit's") {
		t.Errorf("a commit's report is marked:\n%s", report)
	}
}
