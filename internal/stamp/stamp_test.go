package stamp

import (
	"os"
	"path/filepath"
	"testing"
)

// A comment or spacing changes nothing; code does.
func TestEngineFollowsCodeNotComments(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fp := func() string {
		t.Helper()
		s, err := Engine(root)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write("a.go", "package a\n\n// A is one.\nconst A = 1\n")
	write("remote/lua/x.lua", "local a = 1 -- one\nreturn a\n")
	write("a_test.go", "package a\n")
	base := fp()
	write("a.go", "package a\n\n// A is one, said otherwise.\nconst A   = 1\n")
	write("remote/lua/x.lua", "-- a comment first\nlocal a =   1 -- uno\n\nreturn a\n")
	write("a_test.go", "package a\n\nfunc f() {}\n")
	if got := fp(); got != base {
		t.Errorf("comments, spacing and tests changed the fingerprint: %s, was %s", got, base)
	}
	write("remote/lua/x.lua", "local a = '--' -- a string that looks like a comment\nreturn a\n")
	if got := fp(); got == base {
		t.Error("a change to the Lua left the fingerprint")
	}
	write("remote/lua/x.lua", "local a = 1 -- one\nreturn a\n")
	write("a.go", "package a\n\n// A is one.\nconst A = 2\n")
	if got := fp(); got == base {
		t.Error("a change to the Go left the fingerprint")
	}
	if _, err := Engine(t.TempDir()); err == nil {
		t.Error("no code: no error")
	}
}
