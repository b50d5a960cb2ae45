package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// tree is the source the report's ratelease figures were built from: a
// commit, and the paths that differ from it.
type tree struct {
	// commit is HEAD's short hash, "" outside a git checkout.
	commit string
	// changed are the paths, relative to the top of the checkout, that
	// differ from commit: modified, staged, deleted or untracked (not
	// ignored), less the report's own outputs. Untracked files count: a
	// new .go file changes the build as much as an edited one.
	changed []string
}

// clean reports whether the figures are commit's: a commit, and nothing
// changed.
func (t tree) clean() bool { return t.commit != "" && len(t.changed) == 0 }

// String names the tree as the report stamps it.
func (t tree) String() string {
	switch {
	case t.commit == "":
		return "not a git checkout: no commit"
	case len(t.changed) == 0:
		return t.commit
	}
	return fmt.Sprintf("%s with uncommitted changes to %s", t.commit, list(t.changed))
}

// list names paths in code, joined with commas, the first ten of them.
func list(paths []string) string {
	const most = 10
	n := make([]string, 0, min(len(paths), most))
	for _, p := range paths[:min(len(paths), most)] {
		n = append(n, "`"+p+"`")
	}
	s := strings.Join(n, ", ")
	if len(paths) > most {
		s += fmt.Sprintf(" and %d more", len(paths)-most)
	}
	return s
}

// readTree reads the checkout the working directory is in. own are the
// files the report writes (its -o and -raw), which are left out of the
// changes: a report not yet committed does not change the figures of the
// next one.
func readTree(own ...string) (tree, error) {
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		return tree{}, err
	}
	top = strings.TrimSpace(top)
	rev, err := git("rev-parse", "--short=12", "HEAD")
	if err != nil {
		return tree{}, err
	}
	status, err := git("status", "--porcelain=v1", "-z", "--untracked-files=all")
	if err != nil {
		return tree{}, err
	}
	var skip []string
	for _, o := range own {
		if rel, ok := relTo(top, o); ok {
			skip = append(skip, rel)
		}
	}
	return tree{commit: strings.TrimSpace(rev), changed: changedPaths([]byte(status), skip)}, nil
}

// relTo returns path, relative to the working directory, as a path
// relative to top with forward slashes, as git status names it.
func relTo(top, path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	// The top git names may differ from the working directory's spelling
	// of it (a symbolic link): compare resolved paths.
	if t, err := filepath.EvalSymlinks(top); err == nil {
		top = t
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(d, filepath.Base(abs))
	}
	rel, err := filepath.Rel(top, abs)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// changedPaths returns the paths of `git status --porcelain=v1 -z`'s
// output, sorted, less those in skip. Each entry is "XY path", and a
// rename or copy is followed by its source path, which is changed too.
func changedPaths(status []byte, skip []string) []string {
	var paths []string
	fields := bytes.Split(status, []byte{0})
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		xy, path := f[:2], string(f[3:])
		paths = append(paths, path)
		if (xy[0] == 'R' || xy[0] == 'C') && i+1 < len(fields) {
			i++
			paths = append(paths, string(fields[i]))
		}
	}
	paths = slices.DeleteFunc(paths, func(p string) bool { return slices.Contains(skip, p) })
	slices.Sort(paths)
	return slices.Compact(paths)
}

// git runs git with args in the working directory and returns its output.
func git(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
	}
	return string(out), nil
}

// errDirty is why a run on a tree that is not a commit's is refused.
var errDirty = errors.New("the report's figures must be those of a commit")

// checkTree refuses t unless it is clean or dirty is set: the report
// stamps its figures with a commit, and a stamp must not hide that the
// code measured was not that commit's.
func checkTree(t tree, dirty bool) error {
	if t.clean() || dirty {
		return nil
	}
	if t.commit == "" {
		return fmt.Errorf("%w: %s; run it from a git checkout, or pass -dirty to mark every ratelease row as not a commit's", errDirty, t)
	}
	return fmt.Errorf("%w: %s; commit or set them aside first, or pass -dirty to mark every ratelease row as not a commit's", errDirty, t)
}
