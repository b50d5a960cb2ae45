// Package stamp fingerprints the engine, the code whose behaviour the
// generated figures of docs/ measure, so that a figure older than the code
// it describes is caught (the root package's TestGeneratedDocsAreCurrent):
// each generator writes Engine's value into its file, and the test
// compares it with the code's.
//
// The fingerprint covers the non-test Go code of the root package, clock,
// local, remote, sync, tier and internal/door and internal/guard, and the
// Lua of remote/lua, less their comments and spacing: a change to a doc
// comment leaves it as it was, a change to code does not. It is part of
// ratelease's tests and tools, not a stable API.
package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Dirs are the engine's directories, relative to the module's root.
var Dirs = []string{".", "clock", "local", "remote", "remote/lua", "sync", "tier", "internal/door", "internal/guard"}

// Engine returns the fingerprint of the engine under root, the main
// module's directory: 12 hex digits.
func Engine(root string) (string, error) {
	var files []string
	for _, d := range Dirs {
		for _, pat := range []string{"*.go", "*.lua"} {
			m, err := filepath.Glob(filepath.Join(root, d, pat))
			if err != nil {
				return "", err
			}
			for _, f := range m {
				if !strings.HasSuffix(f, "_test.go") {
					files = append(files, f)
				}
			}
		}
	}
	if len(files) == 0 {
		return "", fmt.Errorf("stamp: no engine code under %s", root)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s\n", filepath.ToSlash(rel))
		if strings.HasSuffix(f, ".lua") {
			h.Write([]byte(luaCode(string(src))))
		} else {
			h.Write([]byte(goCode(src)))
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// goCode returns src's tokens, one a line, without comments.
func goCode(src []byte) string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
	var b strings.Builder
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return b.String()
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // an automatic semicolon: a line's end
		}
		b.WriteString(tok.String())
		b.WriteString(" ")
		b.WriteString(lit)
		b.WriteString("\n")
	}
}

// luaCode returns src without its comments (from "--" outside a string to
// the line's end) and with its spacing folded.
func luaCode(src string) string {
	var b strings.Builder
	for _, line := range strings.Split(src, "\n") {
		var quote byte
		cut := len(line)
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case quote != 0:
				if c == '\\' {
					i++
				} else if c == quote {
					quote = 0
				}
			case c == '\'' || c == '"':
				quote = c
			case c == '-' && i+1 < len(line) && line[i+1] == '-':
				cut = i
				i = len(line)
			}
		}
		if code := strings.Join(strings.Fields(line[:cut]), " "); code != "" {
			b.WriteString(code)
			b.WriteString("\n")
		}
	}
	return b.String()
}
