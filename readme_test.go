package ratelease_test

import (
	"bufio"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
)

// The docs' own checks: the README is a door (short, with the set-up
// commands), its Go code compiles, its links lead somewhere, and no doc
// names an issue number. They read files only, but for
// TestReadmeGoBlocksCompile, which runs the go tool.

// readmeMaxLines is the most lines the README may have: depth lives in
// docs/, godoc and CONTRIBUTING.md.
const readmeMaxLines = 150

// readmeTestCmd is the README's test command, which CI (.ci/run) greps
// README.md for, word for word.
const readmeTestCmd = "go test -race -shuffle=on -p 1 ./..."

// mdBlock is a fenced block of a Markdown file.
type mdBlock struct {
	lang string
	line int // the line of its first content line, 1-based
	text string
}

// mdBlocks returns the fenced blocks (```lang ... ```) of a Markdown text.
func mdBlocks(text string) []mdBlock {
	var blocks []mdBlock
	var cur *mdBlock
	var body strings.Builder
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") {
				cur = &mdBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: i + 2}
				body.Reset()
			}
			continue
		}
		if trimmed == "```" {
			cur.text = body.String()
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	return blocks
}

// readDoc returns the text of the file name, relative to the repository's
// root (the package's directory).
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeIsADoor: the README stays short and names the two set-up
// commands.
func TestReadmeIsADoor(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(strings.TrimSuffix(readme, "\n"), "\n") + 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move depth to docs/, godoc or CONTRIBUTING.md", n, readmeMaxLines)
	}
	for _, cmd := range []string{"go run ./examples/quickstart", readmeTestCmd} {
		if !strings.Contains(readme, cmd) {
			t.Errorf("README.md does not name the set-up command %q", cmd)
		}
	}
}

// TestReadmeGoBlocksCompile: every ```go block of README.md is a complete
// program (package main with a func main), and go vet passes on it. Each
// block is written to a directory of its own under a temporary directory
// in the repository (its name begins with "_", so that ./... patterns
// never see it), so that it builds against this module's go.mod and
// go.sum and the code of this checkout, from the module cache that built
// this test: nothing to download. A //line directive makes the go tool
// report README.md's own lines.
//
// Fragments are not allowed: a README's Go code is meant to be copied, and
// a fragment can break without anyone noticing. Snippets belong in godoc
// (example_test.go) or in docs/.
func TestReadmeGoBlocksCompile(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH, so README.md's Go code cannot be compiled: %v", err)
	}
	var programs []mdBlock
	for _, b := range mdBlocks(readDoc(t, "README.md")) {
		if b.lang != "go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), "README.md", b.text, 0)
		if err != nil {
			t.Errorf("README.md:%d: a ```go block must be a complete program (package main, func main), "+
				"and this one does not parse as a Go file: %v", b.line, err)
			continue
		}
		hasMain := false
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
				hasMain = true
			}
		}
		if f.Name.Name != "main" || !hasMain {
			t.Errorf("README.md:%d: a ```go block must be a complete program (package main, func main); "+
				"put fragments in godoc (example_test.go) or docs/", b.line)
			continue
		}
		if formatted, err := format.Source([]byte(b.text)); err != nil || string(formatted) != b.text {
			t.Errorf("README.md:%d: the ```go block is not gofmt-clean (%v)", b.line, err)
		}
		programs = append(programs, b)
	}
	if len(programs) == 0 {
		t.Fatal("README.md has no complete Go program in a ```go block")
	}
	if t.Failed() {
		return
	}

	root, err := os.Getwd() // the package's directory: the module root
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "_readmecheck")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var pkgs []string
	for i, b := range programs {
		pkg := filepath.Join(dir, fmt.Sprintf("block%d", i+1))
		if err := os.Mkdir(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		src := fmt.Sprintf("//line %s:%d\n%s", filepath.Join(root, "README.md"), b.line, b.text)
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, pkg)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"vet"}, pkgs...)...)
	cmd.Dir = root
	// This module's go.mod and go.sum, as they are: the blocks may import
	// only what the module requires (its dependencies are in the module
	// cache already, since this test was built).
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go vet on README.md's Go code: %v\n%s", err, out)
	}
}

// Issue and pull-request numbers: "issue 13", "issues #12", "PR 7", "pull
// request 3", and a bare "#24" that is not part of a word, a URL, a link
// target or an HTML entity.
var (
	issueWord   = regexp.MustCompile(`(?i)\b(?:issues?|pull requests?|PRs?)\s*#?[0-9]+\b`)
	issueHash   = regexp.MustCompile(`(?:^|[^\w&/#])#[0-9]+\b`)
	urlOrTarget = regexp.MustCompile(`https?://\S+|\]\([^)]*\)|&#[0-9]+;`)
)

// repoFiles calls f with the path of each file of the repository,
// relative to the root, in lexical order, skipping hidden directories,
// testdata and node_modules.
func repoFiles(t *testing.T, f func(path string)) {
	t.Helper()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		f(filepath.ToSlash(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// docFiles returns the repository's Markdown files, and the text files of
// docs/ (generated figures are docs too), relative to the root, sorted.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	repoFiles(t, func(path string) {
		if strings.HasSuffix(path, ".md") || (filepath.Dir(path) == "docs" && strings.HasSuffix(path, ".txt")) {
			files = append(files, path)
		}
	})
	return files
}

// TestReadmeDocsNameNoIssueNumbers: no doc names an issue or pull-request
// number. A doc says what holds and why; the history is the commit log's.
// Every offending line is listed, in files of every owner (a generated
// file is fixed in its generator).
func TestReadmeDocsNameNoIssueNumbers(t *testing.T) {
	files := docFiles(t)
	if len(files) == 0 {
		t.Fatal("no Markdown file found")
	}
	var hits []string
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
		for n := 1; sc.Scan(); n++ {
			line := urlOrTarget.ReplaceAllString(sc.Text(), " ")
			for _, re := range []*regexp.Regexp{issueWord, issueHash} {
				if m := re.FindString(line); m != "" {
					hits = append(hits, fmt.Sprintf("%s:%d: %q in: %s", name, n, strings.TrimSpace(m), strings.TrimSpace(sc.Text())))
					break
				}
			}
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if len(hits) > 0 {
		t.Errorf("%d lines of docs name an issue or pull-request number (say what changed and why instead):\n%s",
			len(hits), strings.Join(hits, "\n"))
	}
}

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: lowercased, punctuation dropped, spaces made hyphens, a
// repeated one suffixed -1, -2...
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// TestReadmeLinksResolve: the relative links of the README and of the
// docs made with it lead to a file of the repository, and their anchors to
// a heading of it.
func TestReadmeLinksResolve(t *testing.T) {
	for _, name := range []string{"README.md", "CONTRIBUTING.md", "docs/operations.md"} {
		text := readDoc(t, name)
		var prose strings.Builder // the text outside fenced blocks
		inFence := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
				continue
			}
			if !inFence {
				prose.WriteString(line)
				prose.WriteByte('\n')
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose.String(), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := name
			if path != "" {
				file = filepath.Join(filepath.Dir(name), filepath.FromSlash(path))
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %q: %v", name, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", name, target)
				continue
			}
			if !headingAnchors(readDoc(t, file))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", name, target, file, anchor)
			}
		}
	}
}
