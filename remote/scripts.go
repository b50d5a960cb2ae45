package remote

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algorithmFiles holds each algorithm's script file, by Algorithm.
var algorithmFiles = [numAlgorithms]string{"tokenbucket.lua", "fixedwindow.lua", "slidingwindowlog.lua", "slidingwindowcounter.lua", "leakybucket.lua", "calendarwindow.lua", "pool.lua"}

// scripts are the entry points for one set of algorithms: acquire (with
// the members and their fair share), exact (acquire for a call that names
// no member: every exact decision), refund, and, for a set of buckets
// only, bucket (exact for one bucket without reserve).
type scripts struct {
	acquire, exact, refund, bucket program
}

// program is an entry point of a library, runnable two ways (see
// docs/scripts.md): as the function fn of the set's library (FCALL), its
// definitions made once when the library is loaded; or as a script
// (EVALSHA), which makes them anew on every call. The first is cheaper
// for Redis; the second runs on every server.
type program struct {
	script *redis.Script
	fn     string
	fnArg  any // fn, boxed once
	lib    *library
}

// library is the Redis function library of one set of algorithms, or of
// the permits: its name, from its code's hash (two releases of ratelease
// that differ each load their own), and its code.
type library struct{ name, code string }

// scriptCache holds the scripts of every algorithm set used so far, by the
// set's bit mask (bit a for Algorithm a).
var scriptCache [1 << numAlgorithms]atomic.Pointer[scripts]

// entry is an entry point of a library: its name, its body (main), the
// files its definitions need beyond the set's (helpers), and the
// algorithms it can serve (0 for any set; else only a set within them has
// it).
type entry struct {
	name, main string
	helpers    []string
	within     uint8
}

// entries are the entry points of a set of algorithms' library.
var entries = []entry{
	{"acquire", "acquire.lua", []string{"members.lua", "fairshare.lua"}, 0},
	{"exact", "exact.lua", nil, 0},
	{"refund", "refund.lua", []string{"members.lua"}, 0},
	{"bucket", "bucket.lua", nil, 1<<TokenBucket | 1<<LeakyBucket},
}

// has reports whether the library of the set mask has an entry point that
// serves the algorithms within (see entries).
func has(mask, within uint8) bool { return within == 0 || mask&^within == 0 }

// scriptsFor returns the scripts for the algorithms in mask, assembling
// them on first use.
func scriptsFor(mask uint8) *scripts {
	if s := scriptCache[mask].Load(); s != nil {
		return s
	}
	progs := build(mask, entries)
	s := &scripts{acquire: progs[0], exact: progs[1], refund: progs[2], bucket: progs[3]}
	scriptCache[mask].CompareAndSwap(nil, s)
	return scriptCache[mask].Load()
}

// permitProgram is permit.lua's program, in a library of its own: the
// definitions of no algorithm (mask 0), and fairshare.lua's water level.
var permitProgram = sync.OnceValue(func() *program {
	return &build(0, []entry{{"permit", "permit.lua", []string{"fairshare.lua"}, 0}})[0]
})

// build assembles the library of es over the definitions for mask, and
// returns the program of each entry point (the zero program for one that
// does not serve mask).
func build(mask uint8, es []entry) []program {
	// The library: the definitions once, then each entry point as a
	// function whose arguments become the KEYS and ARGV the files read.
	// Its name is its code's hash (the code written with a placeholder
	// for it): a release whose code differs in any way loads its own.
	const placeholder = "ratelease_LIBRARY"
	code := "#!lua name=" + placeholder + "\nlocal KEYS, ARGV\n" + definitions(mask)
	// (Each helper once: a file two entry points need is read once.)
	var helpers []string
	for _, e := range es {
		if has(mask, e.within) {
			for _, h := range e.helpers {
				if !slices.Contains(helpers, h) {
					helpers = append(helpers, h)
				}
			}
		}
	}
	code += read(helpers...)
	for _, e := range es {
		if !has(mask, e.within) {
			continue
		}
		code += "redis.register_function('" + placeholder + "_" + e.name + "', function(keys, args)\nKEYS, ARGV = keys, args\n" +
			read("now.lua", e.main) + "end)\n"
	}
	sum := sha1.Sum([]byte(code))
	lib := &library{name: "ratelease_" + hex.EncodeToString(sum[:10])}
	lib.code = strings.ReplaceAll(code, placeholder, lib.name)
	progs := make([]program, len(es))
	for i, e := range es {
		if has(mask, e.within) {
			fn := lib.name + "_" + e.name
			progs[i] = program{script: redis.NewScript(assemble(mask, append(e.helpers, e.main)...)), fn: fn, fnArg: fn, lib: lib}
		}
	}
	return progs
}

// assemble returns one script: the definitions for the algorithms in mask,
// then, in order, the files in main but its last, now.lua, and the last
// (the script's body).
func assemble(mask uint8, main ...string) string {
	last := len(main) - 1
	return definitions(mask) + read(main[:last]...) + read("now.lua", main[last])
}

// definitions returns the prelude, the GCRA helpers when a bucket is in
// mask, and each algorithm in mask.
func definitions(mask uint8) string {
	files := []string{"prelude.lua"}
	if mask&(1<<TokenBucket|1<<LeakyBucket) != 0 {
		files = append(files, "gcra.lua")
	}
	for a, f := range algorithmFiles {
		if mask&(1<<a) != 0 {
			files = append(files, f)
		}
	}
	return read(files...)
}

// read returns the files, each followed by a newline.
func read(files ...string) string {
	var src []byte
	for _, f := range files {
		src = append(append(src, mustRead(f)...), '\n')
	}
	return string(src)
}

func mustRead(f string) string {
	b, err := luaFiles.ReadFile("lua/" + f)
	if err != nil {
		panic("remote: embedded script missing: " + f) // a build defect, not input
	}
	return string(b)
}
