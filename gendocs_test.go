package ratelease_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/ratelease/ratelease/internal/stamp"
)

// generatedDocs are the files of docs/ that a generator writes from a run
// of the engine, with the command that writes each.
var generatedDocs = map[string]string{
	"docs/shapes.md":      "go test -run '^$' -bench '^BenchmarkShapeMatrix$' -benchtime 1x -timeout 60m ./internal/systest -args -shapes-out $PWD/docs/shapes.md",
	"docs/benchmarks.md":  "cd bench && go run ./cmd/benchreport",
	"docs/fleet.md":       "cd bench && go run ./cmd/benchreport -only shared-key",
	"docs/regions-run.md": "go test -run '^$' -bench '^BenchmarkRegions$' -benchtime 1x -timeout 30m ./internal/systest -args -regions-out $PWD/docs/regions-run.md",
}

var engineStamp = regexp.MustCompile("engine fingerprint `([0-9a-f]{12})`")

// TestGeneratedDocsAreCurrent: each generated file of docs/ was made from
// the engine's code as it is now (internal/stamp: its Go and Lua, less
// comments), so that no figure describes code that has since changed. A
// change to the engine comes with its figures made again.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	now, err := stamp.Engine(".")
	if err != nil {
		t.Fatal(err)
	}
	for file, cmd := range generatedDocs {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := engineStamp.FindSubmatch(text)
		switch {
		case m == nil:
			t.Errorf("%s names no engine fingerprint: make it again with %s", file, cmd)
		case string(m[1]) != now:
			t.Errorf("%s measures the engine of fingerprint %s, and the engine is now %s: make it again with %s", file, m[1], now, cmd)
		}
	}
}
