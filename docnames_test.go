package ratelease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// repoNames returns every name the repository's Go code declares, in
// every module, tests included: types, functions, methods, fields,
// constants and variables, and the packages' own names.
func repoNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	repoFiles(t, func(path string) {
		if !strings.HasSuffix(path, ".go") {
			return
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		names[f.Name.Name] = true
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				names[n.Name.Name] = true
			case *ast.TypeSpec:
				names[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					names[id.Name] = true
				}
			}
			return true
		})
	})
	return names
}

// docCode matches a Markdown code span; goName one that names Go code:
// an exported identifier, or a selector of them (Limiter.Allow,
// ratelease.PerSecond), with no other text.
var (
	docCode = regexp.MustCompile("`([^`\n]+)`")
	goName  = regexp.MustCompile(`^(?:[a-z][a-z0-9]*\.)?[A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*(?:\(\))?$`)
)

// notOurs are the exported names the docs take from other code: go-redis's
// options, Go's own, Redis's and HTTP's words that look like Go names.
var notOurs = map[string]bool{
	"ContextTimeoutEnabled": true, "UniversalClient": true, "ClusterClient": true, "FailoverClient": true,
	"NewClient": true, "NewClusterClient": true, "NewFailoverClient": true, "NewRing": true, "Ring": true,
	"Options": true, "ClusterOptions": true, "RingOptions": true, "FailoverOptions": true, "Addr": true,
	"Addrs": true, "Client": true, "PoolSize": true, "ReadTimeout": true, "WriteTimeout": true,
	"MaxRetries": true, "DialTimeout": true, "Limiter": true, "Reservation": true, "Every": true,
	"Inf": true, "NewLimiter": true, "Local": true, "UTC": true, "LoadLocation": true, "Sunday": true,
	"Monday": true, "RateLimit": true, "Canceled": true, "DeadlineExceeded": true, "Is": true, "As": true,
	"Handler": true, "HandlerFunc": true, "ServeHTTP": true, "Request": true, "ResponseWriter": true,
	"SetTime": true, "FastForward": true, "RunParallel": true, "DialerRetries": true,
	"ResourceExhausted": true, "RetryInfo": true, "ManualReader": true,
	"Int64ObservableCounter": true, "Int64ObservableGauge": true,
	"sync.Map": true, // Go's, not package sync's
}

// TestDocsNameCodeThatExists: every Go name a doc spells in a code span
// (`Limiter.Allow`, `TestShapeMatrix`, `WithLease`) is declared somewhere
// in the repository, so that a rename or a removal cannot leave a doc
// pointing at nothing. CHANGELOG.md names what is gone on purpose.
func TestDocsNameCodeThatExists(t *testing.T) {
	names := repoNames(t)
	var missing []string
	for _, file := range docFiles(t) {
		if file == "CHANGELOG.md" || !strings.HasSuffix(file, ".md") {
			continue
		}
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, m := range docCode.FindAllStringSubmatch(line, -1) {
				span := strings.TrimSuffix(m[1], "()")
				if !goName.MatchString(m[1]) || notOurs[span] {
					continue
				}
				parts := strings.Split(span, ".")
				if !ast.IsExported(parts[0]) && len(parts) > 1 {
					if !names[parts[0]] {
						continue // another package's: time.Local, redis.Options
					}
					parts = parts[1:]
				}
				for _, p := range parts {
					if !names[p] && !notOurs[p] && strings.ToUpper(p) != p {
						missing = append(missing, file+":"+strconv.Itoa(i+1)+": `"+m[1]+"`")
						break
					}
				}
			}
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("%s: no such name in the code", m)
	}
}
