package ratelease_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelease/ratelease/internal/apicheck"
)

// The surface's budget: what a newcomer takes in at a glance stays that
// small. Each figure is a ceiling, not a target: the budget holds it.
const (
	maxRootExports   = 113 // types, functions, methods, constants, variables (110, regions' two, ErrNilContext)
	maxRootDocLines  = 715 // go doc -all . (700, and regions')
	maxCommentShare  = 0.35
	maxFileLines     = 500 // non-test Go files, every module
	commentShareDirs = ". tier sync local remote internal/door"
)

// TestSurfaceBudget: the root's exports and godoc, the engine packages'
// share of comment lines, and every non-test file's length stay within
// the budget.
func TestSurfaceBudget(t *testing.T) {
	api, err := apicheck.List(".")
	if err != nil {
		t.Fatal(err)
	}
	exports := 0
	for _, l := range api {
		if !strings.Contains(l, " struct, ") && !strings.Contains(l, " interface, ") {
			exports++
		}
	}
	if exports > maxRootExports {
		t.Errorf("the root exports %d names, more than %d", exports, maxRootExports)
	}
	out, err := exec.Command("go", "doc", "-all", ".").Output()
	if err != nil {
		t.Fatalf("go doc -all .: %v", err)
	}
	if n := strings.Count(string(out), "\n"); n > maxRootDocLines {
		t.Errorf("go doc -all . is %d lines, more than %d: godoc says the contract, docs/ the detail", n, maxRootDocLines)
	}
	for _, dir := range strings.Fields(commentShareDirs) {
		code, comments := commentLines(t, dir)
		if share := float64(comments) / float64(code); share > maxCommentShare {
			t.Errorf("%s: %.1f %% of its non-test lines are comments, more than %.0f %%", dir, 100*share, 100*maxCommentShare)
		}
	}
	repoFiles(t, func(path string) {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(src), "\n"); n > maxFileLines {
			t.Errorf("%s is %d lines, more than %d: split it by job", path, n, maxFileLines)
		}
	})
}

// commentLines counts the non-blank lines of dir's non-test Go files, and
// those of them a comment covers.
func commentLines(t *testing.T, dir string) (code, comments int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		covered := map[int]bool{}
		for _, g := range af.Comments {
			for l := fset.Position(g.Pos()).Line; l <= fset.Position(g.End()).Line; l++ {
				covered[l] = true
			}
		}
		comments += len(covered)
		for _, l := range strings.Split(string(src), "\n") {
			if strings.TrimSpace(l) != "" {
				code++
			}
		}
	}
	return code, comments
}
