package remote

import (
	"maps"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// globalsOf returns the globals the chunk src reads and writes, in any
// of its functions.
func globalsOf(t *testing.T, name, src string) (reads, writes map[string]bool) {
	t.Helper()
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	reads, writes = map[string]bool{}, map[string]bool{}
	var walk func(p *lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, inst := range p.Code {
			op, bx := int(inst>>26), int(inst&0x3ffff)
			switch op {
			case lua.OP_GETGLOBAL:
				reads[p.Constants[bx].String()] = true
			case lua.OP_SETGLOBAL:
				writes[p.Constants[bx].String()] = true
			}
		}
		for _, c := range p.FunctionPrototypes {
			walk(c)
		}
	}
	walk(proto)
	return reads, writes
}

// Redis runs scripts and function libraries with their globals
// protected: a script that writes a global, or reads one Redis does not
// define, fails on the path that does it. Every library and script of
// every set of algorithms, the permits' too, writes none and reads only
// what the prelude's globals() reads (and a library's redis).
func TestScriptsUseNoOtherGlobals(t *testing.T) {
	allowed := map[string]bool{"redis": true, "math": true, "string": true, "table": true, "tonumber": true, "unpack": true, "select": true, "KEYS": true, "ARGV": true, "error": true, "pairs": true, "ipairs": true, "tostring": true, "type": true}
	check := func(name, src string) {
		src = strings.TrimPrefix(src, "#!")
		if i := strings.IndexByte(src, '\n'); strings.HasPrefix(src, "lua name=") {
			src = src[i+1:]
		}
		reads, writes := globalsOf(t, name, src)
		if len(writes) > 0 {
			t.Errorf("%s writes globals %v", name, slices.Sorted(maps.Keys(writes)))
		}
		for g := range reads {
			if !allowed[g] {
				t.Errorf("%s reads global %s", name, g)
			}
		}
	}
	// Every set of the user's algorithms, and the pool's, which is always
	// alone (a pooled policy has one limit).
	for mask := range uint8(1<<Pool + 1) {
		if mask == 0 || mask > 1<<Pool-1 && mask != 1<<Pool {
			continue
		}
		s := scriptsFor(mask)
		check(s.acquire.lib.name, s.acquire.lib.code)
		for _, e := range entries {
			if has(mask, e.within) {
				check(e.name, assemble(mask, append(e.helpers, e.main)...))
			}
		}
	}
	p := permitProgram()
	check(p.lib.name, p.lib.code)
	pp := poolProgram()
	check(pp[0].lib.name, pp[0].lib.code)
	check("permit", assemble(0, "fairshare.lua", "permit.lua"))
}
