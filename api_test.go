package ratelease_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelease/ratelease/internal/apicheck"
)

// apiPackages are the packages whose exported API is recorded in api/:
// the ones a program imports.
var apiPackages = map[string]string{
	"ratelease": ".", "httplimit": "httplimit", "iolimit": "iolimit", "ratetest": "ratetest",
}

// TestAPI: the exported API of each package a program imports is the one
// recorded in api/<name>.txt, so that no change to it goes unseen: a change
// comes with its file (RATELEASE_UPDATE_API=1 go test -run TestAPI .
// rewrites them) and a CHANGELOG.md entry.
func TestAPI(t *testing.T) {
	for name, dir := range apiPackages {
		got, err := apicheck.List(dir)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join("api", name+".txt")
		text := strings.Join(got, "\n") + "\n"
		if os.Getenv("RATELEASE_UPDATE_API") == "1" {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v: record the API with RATELEASE_UPDATE_API=1 go test -run TestAPI .", err)
		}
		if text == string(want) {
			continue
		}
		have := map[string]bool{}
		for _, l := range got {
			have[l] = true
		}
		recorded := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSuffix(string(want), "\n"), "\n") {
			recorded[l] = true
			if !have[l] {
				t.Errorf("%s: gone from the API: %s", file, l)
			}
		}
		for _, l := range got {
			if !recorded[l] {
				t.Errorf("%s: new in the API: %s", file, l)
			}
		}
		t.Errorf("%s: the exported API changed: if that is meant, run RATELEASE_UPDATE_API=1 go test -run TestAPI . and say what changed in CHANGELOG.md", file)
	}
}
