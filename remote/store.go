package remote

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algorithmFiles holds each algorithm's script file, by Algorithm.
var algorithmFiles = [numAlgorithms]string{"tokenbucket.lua", "fixedwindow.lua", "slidingwindowlog.lua", "slidingwindowcounter.lua", "leakybucket.lua", "calendarwindow.lua"}

// scripts are the entry points for one set of algorithms: acquire (with
// the members and their fair share), exact (acquire for a call that names
// no member: every exact decision), refund, and, for a set of buckets
// only, bucket (exact for one bucket without reserve).
type scripts struct {
	acquire, exact, refund, bucket program
}

// program is an entry point of a set's scripts, runnable two ways (see
// prelude.lua): as the function fn of the set's library (FCALL), its
// definitions made once when the library is loaded; or as a script
// (EVALSHA), which makes them anew on every call. The first is cheaper
// for Redis (TestScriptCost); the second runs on every server.
type program struct {
	script *redis.Script
	fn     string
	fnArg  any // fn, boxed once
	lib    *library
}

// library is the Redis function library of one set of algorithms: its
// name, from its code's hash (two releases of ratelease that differ each
// load their own), and its code.
type library struct{ name, code string }

// scriptCache holds the scripts of every algorithm set used so far, by the
// set's bit mask (bit a for Algorithm a).
var scriptCache [1 << numAlgorithms]atomic.Pointer[scripts]

// The entry points of a set's library: the files each one's definitions
// need beyond the set's (helpers), its body (main), and the algorithms it
// can serve (0 for any set; else only a set within them has it).
var entries = []struct {
	name, main string
	helpers    []string
	within     uint8
}{
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
	// The library: the definitions once, then each entry point as a
	// function whose arguments become the KEYS and ARGV the files read.
	// Its name is its code's hash (the code written with a placeholder
	// for it): a release whose code differs in any way loads its own.
	const placeholder = "ratelease_LIBRARY"
	code := "#!lua name=" + placeholder + "\nlocal KEYS, ARGV\n" + definitions(mask)
	// (Each helper once: a file two entry points need is read once.)
	var helpers []string
	for _, e := range entries {
		if has(mask, e.within) {
			for _, h := range e.helpers {
				if !slices.Contains(helpers, h) {
					helpers = append(helpers, h)
				}
			}
		}
	}
	code += read(helpers...)
	for _, e := range entries {
		if !has(mask, e.within) {
			continue
		}
		code += "redis.register_function('" + placeholder + "_" + e.name + "', function(keys, args)\nKEYS, ARGV = keys, args\n" +
			read("now.lua", e.main) + "end)\n"
	}
	sum := sha1.Sum([]byte(code))
	lib := &library{name: "ratelease_" + hex.EncodeToString(sum[:10])}
	lib.code = strings.ReplaceAll(code, placeholder, lib.name)
	progs := make([]program, len(entries))
	for i, e := range entries {
		if has(mask, e.within) {
			fn := lib.name + "_" + e.name
			progs[i] = program{script: redis.NewScript(assemble(mask, append(e.helpers, e.main)...)), fn: fn, fnArg: fn, lib: lib}
		}
	}
	s := &scripts{acquire: progs[0], exact: progs[1], refund: progs[2], bucket: progs[3]}
	scriptCache[mask].CompareAndSwap(nil, s)
	return scriptCache[mask].Load()
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

// Store runs the limit scripts on one Redis deployment. It is safe for
// concurrent use; the zero value is not usable: call NewStore.
type Store struct {
	client redis.UniversalClient
	prefix string
	dials  *dialHook // nil: the client's dials are not watched
	// clock places calendar windows (see Policy.calendarArgs); Redis's
	// TIME decides which one a call is in.
	clock clock.Clock
	// layout: Node has named a master, so a ClusterClient has loaded the
	// cluster's layout (which it keeps from then on).
	layout atomic.Bool
	// scriptsUntil: a server said it has no functions (before Redis 7,
	// miniredis, a proxy) or that this client may not use them (ACL): the
	// entry points run as scripts (see program) until then (Unix ns; the
	// maximum: for good), when functions are tried again (an upgrade, a
	// failover, an ACL change). 0: functions.
	scriptsUntil atomic.Int64
	// fnWorked: a function call has succeeded through this Store.
	fnWorked atomic.Bool
	// loads: the library loads in flight (library name -> *loading), which
	// concurrent calls that find it missing wait for rather than send
	// their own.
	loads sync.Map
}

// loading is a library load in flight: err is set before done closes.
type loading struct {
	done chan struct{}
	err  error
}

// scriptsSpell is how long a Store runs scripts after a server said it
// has no functions, before it tries them again.
const scriptsSpell = time.Minute

// scripts reports whether the entry points run as scripts now.
func (s *Store) scripts() bool {
	until := s.scriptsUntil.Load()
	return until != 0 && (until == math.MaxInt64 || time.Now().UnixNano() < until)
}

// noFunctionsSaid records that a server said it has no functions: scripts
// for scriptsSpell.
func (s *Store) noFunctionsSaid() { s.scriptsUntil.Store(time.Now().Add(scriptsSpell).UnixNano()) }

// failedFunction looks at err, a failed function call's error that is not
// Redis's reply. Before any function call has succeeded through this
// Store, a server that answers PING at once, though it dropped the
// function call, is a proxy that drops the connection on a command it
// does not know (twemproxy): scripts from then on, for good. The call's
// own error stands (the call may have run).
func (s *Store) failedFunction(ctx context.Context, err error) {
	var re redis.Error
	if s.fnWorked.Load() || errors.As(err, &re) || ctx.Err() != nil {
		return
	}
	if s.client.Ping(ctx).Err() == nil {
		s.scriptsUntil.Store(math.MaxInt64)
	}
}

// NewStore returns a Store that keeps its keys under prefix on client, which
// may be any redis.UniversalClient: a Client, ClusterClient, Ring or failover
// client. To a Client or a ClusterClient it adds a hook (once per client,
// whatever the Stores made on it) that tells the DialWatchers of the
// client's failed dials (see Watch), and leaves every dial and command as
// it is.
func NewStore(client redis.UniversalClient, prefix string) *Store {
	return &Store{client: client, prefix: prefix, dials: watchDials(client), clock: clock.System{}}
}

// SetClock sets the clock that places the windows of CalendarWindow limits
// (the system's by default): the Limiter's, so that a manual clock moves
// them with Redis's TIME. Call it before the Store is used.
func (s *Store) SetClock(c clock.Clock) { s.clock = c }

// Request asks for units from every limit of one key. Min <= Max, and
// 1 <= Min <= Policy.Capacity(); the caller checks.
type Request struct {
	Policy *Policy
	Key    string
	// Min is the least grant worth having: fewer and nothing is granted.
	Min int64
	// Max is the most units to grant.
	Max int64
	// Reserve lets a leaky or token bucket queue the request (the
	// Decision's Wait says until when) instead of admitting only what
	// conforms now: up to Burst units wait in a leaky bucket, up to Burst
	// or a Period's Rate (whichever is more) beyond a token bucket.
	// Windows ignore it.
	Reserve bool
	// Member, when not empty, names the instance that leases, and makes
	// the call count it among the key's members with its Demand (units per
	// second it wants of the key): while the members together want more
	// than the key's rate, each is held to its max-min fair share (see
	// acquire.lua). Empty in exact mode, and for a key whose demand is not
	// known yet (or is zero): such a call leaves the members alone.
	Member string
	Demand int64
	// Horizon is how long a lease of Member is meant to last: it sizes the
	// batch a member held to its fair share waits for, and how long it
	// counts as a member after this call (three horizons, at least 1s).
	Horizon time.Duration
	// Back gives back, first and in the same call, Back units of an earlier
	// grant of this key made at BackAt (Decision.At) and never used.
	Back, BackAt int64
}

// Decision is the reply of one acquire call.
type Decision struct {
	// Granted is the number of units charged to every limit; 0 means
	// denied, and nothing was charged.
	Granted int64
	// At is the Redis time of the decision, in microseconds since the Unix
	// epoch. A Refund of these units names it.
	At int64
	// Decider is the index in Policy.Limits() of the limit that decided:
	// when denied, the denying limit that frees up last; when granted, the
	// one with the fewest units left.
	Decider int
	// Wait is how long the granted units must wait before use (a leaky
	// bucket's queue in Reserve mode); 0 otherwise.
	Wait time.Duration
	// Remaining is the number of units the decider could still grant now.
	Remaining int64
	// RetryAfter is, when denied, when Min units could next be granted; 0
	// when granted.
	RetryAfter time.Duration
	// Next is, for a member held to its fair share beside other members,
	// how long until its share holds its next batch: a lease asked for
	// sooner is denied. When denied, it is set only when later than
	// RetryAfter (the limits had room for Min units before the share
	// does), and never past the end of a window of the key's. 0 otherwise.
	Next time.Duration
	// ResetAfter is when the decider is fully replenished.
	ResetAfter time.Duration
	// ValidFor is how long the granted units may be used before they lapse
	// (the end of the current window of a window algorithm), or -1 when no
	// limit of the policy bounds it. 0 when denied.
	ValidFor time.Duration
	// Members is the number of live members of the key, the caller
	// included, when the request named a Member with demand; else 0.
	Members int64
	// Blocked reports a denial because the key is blocked (Store.Block):
	// RetryAfter and ResetAfter are then the block's time left (to the
	// millisecond), Decider 0, Remaining 0 and Members 0.
	Blocked bool
	// FairShare reports a denial of a member by its fair share of the key
	// while the limits had room for Min units: RetryAfter is then this
	// member's wait for its share, not the limits'.
	FairShare bool
	// Debt is, after a Charge, the units the decider owes beyond its room;
	// 0 otherwise.
	Debt int64
}

// Acquire grants between r.Min and r.Max units to every limit of r.Key, or
// nothing, in one atomic script call. Errors are Redis's or ctx's, naming
// the server (see Addr).
func (s *Store) Acquire(ctx context.Context, r Request) (Decision, error) {
	keys := s.acquireKeys(r)
	v, err := s.run(ctx, r.program(), keys, s.args(r, room(keys))).Text()
	if err != nil {
		return Decision{}, s.named(r.Policy, r.Key, err)
	}
	d, err := parseDecision(r.Policy, v)
	return d, s.named(r.Policy, r.Key, err)
}

// named returns err naming the server of key under p (see Addr), and
// wrapping ErrClock when it is a calendar window's.
func (s *Store) named(p *Policy, key string, err error) error {
	if err == nil {
		return nil
	}
	return named(s.Addr(p, key), clockErr(err))
}

// AcquireBatch makes many acquire calls in one pipeline (one round trip per
// Redis node), and returns a Decision or an error for each request, in
// order. Scripts missing from a server (NOSCRIPT) are loaded and the calls
// that needed them made again, once.
func (s *Store) AcquireBatch(ctx context.Context, rs []Request) ([]Decision, []error) {
	ds, errs, _ := s.Batch(ctx, rs, nil)
	return ds, errs
}

// Batch makes the refunds gs and the acquire calls rs in one pipeline (one
// round trip per Redis node), refunds first, as AcquireBatch does, and
// returns a Decision or an error for each request and an error for each
// refund, in order. Errors name the server (see Addr).
func (s *Store) Batch(ctx context.Context, rs []Request, gs []Grant) ([]Decision, []error, []error) {
	ds, errs, gerrs := make([]Decision, len(rs)), make([]error, len(rs)), make([]error, len(gs))
	cmds := s.pipeline(ctx, len(gs)+len(rs), func(i int) (*program, []string, []any) {
		if i < len(gs) {
			g := gs[i]
			keys := g.Policy.keys(s.prefix, g.Key, g.Member != "", false)
			return &g.Policy.scripts.refund, keys, s.refundArgs(g.Policy, g.Units, g.At, g.Member, room(keys))
		}
		r := rs[i-len(gs)]
		keys := s.acquireKeys(r)
		return r.program(), keys, s.args(r, room(keys))
	})
	for i, c := range cmds[:len(gs)] {
		gerrs[i] = s.named(gs[i].Policy, gs[i].Key, c.Err())
	}
	for i, c := range cmds[len(gs):] {
		v, err := c.Text()
		if err == nil {
			ds[i], err = parseDecision(rs[i].Policy, v)
		}
		errs[i] = s.named(rs[i].Policy, rs[i].Key, err)
	}
	return ds, errs, gerrs
}

// Grant names units granted at time At (Decision.At) for a refund. With a
// Member, the refund also takes that instance out of the key's members.
type Grant struct {
	Policy *Policy
	Key    string
	Units  int64
	At     int64
	Member string
}

// RefundBatch makes many refund calls in one pipeline, as AcquireBatch
// does, and returns an error for each, in order.
func (s *Store) RefundBatch(ctx context.Context, gs []Grant) []error {
	_, _, errs := s.Batch(ctx, nil, gs)
	return errs
}

// run calls pr with keys and args (with room(keys) for FCALL's own
// arguments ahead of them): as a function (FCALL) unless a server said it
// has none, loading the library where it is missing; else as a script
// (EVALSHA, then EVAL after NOSCRIPT).
func (s *Store) run(ctx context.Context, pr *program, keys []string, args []any) *redis.Cmd {
	if !s.scripts() {
		c := fcall(ctx, s.client, pr, keys, args)
		switch err := c.Err(); {
		case err == nil: // (HasErrorPrefix allocates, even for nil)
			s.fnWorked.Store(true)
			return c
		case notLoaded(err):
			// Loaded, then called again, even if the load failed somewhere
			// (a Cluster master down): this call's master may have it now.
			// Twice: a load reports success once any master took it, and a
			// master it missed (its load failed for a moment, or the
			// client's view of the masters was short of it) gets another.
			var lerr error
			for range loadRounds {
				if lerr = s.load(ctx, pr.lib); noFunctions(lerr) {
					break
				}
				if c = fcall(ctx, s.client, pr, keys, args); !notLoaded(c.Err()) {
					break
				}
			}
			if noFunctions(lerr) {
				s.noFunctionsSaid()
				break
			}
			switch err := c.Err(); {
			case err == nil:
				s.fnWorked.Store(true)
			case lerr != nil && notLoaded(err):
				c.SetErr(lerr)
			}
			return c
		case noFunctions(err):
			s.noFunctionsSaid()
		default:
			s.failedFunction(ctx, err)
			return c
		}
	}
	return pr.script.Run(ctx, s.client, keys, args[room(keys):]...)
}

// loadRounds is how many times a call that finds its library missing
// loads it and calls again (run, pipeline): a load reports success once
// any master took it, and a master it missed gets another.
const loadRounds = 2

// room is the number of FCALL's own arguments ahead of a call's with
// keys: the command, the function, the number of keys, the keys. A call's
// arguments are made with it free (Store.args, Store.refundArgs), so that
// FCALL's are one slice, not a copy of the call's.
func room(keys []string) int { return 3 + len(keys) }

// fcall makes the FCALL of pr with keys, its arguments args, whose room
// it fills, through p (a client, or a pipeline that queues it), and
// returns it.
func fcall(ctx context.Context, p interface {
	Process(context.Context, redis.Cmder) error
}, pr *program, keys []string, args []any) *redis.Cmd {
	args[0], args[1], args[2] = "fcall", pr.fnArg, len(keys)
	for i, k := range keys {
		args[3+i] = k
	}
	c := redis.NewCmd(ctx, args...)
	c.SetFirstKeyPos(3)
	_ = p.Process(ctx, c) // the error is c's
	return c
}

// pipeline runs n calls in one pipeline, call(i) giving each one's entry
// point, keys and args, as run does one: calls that find their library
// missing are sent again in a second pipeline once it is loaded, and so
// are calls that find no functions, as scripts, as are those that find
// their script missing (NOSCRIPT), with EVAL (which also caches it). Every
// call comes back with a reply or an error.
func (s *Store) pipeline(ctx context.Context, n int, call func(i int) (*program, []string, []any)) []*redis.Cmd {
	fns := !s.scripts()
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	cmds := make([]*redis.Cmd, n)
	progs := make([]*program, n) // each call's, as the first send made it
	s.send(ctx, cmds, all, func(i int) (*program, []string, []any) {
		pr, keys, args := call(i)
		progs[i] = pr
		return pr, keys, args
	}, func(p redis.Pipeliner, pr *program, keys []string, args []any) *redis.Cmd {
		if fns {
			return fcall(ctx, p, pr, keys, args)
		}
		return pr.script.EvalSha(ctx, p, keys, args[room(keys):]...)
	})
	var again, scripts []int
	var failed error // the first that is not Redis's reply
	libs := map[*library]error{}
	for i, c := range cmds {
		switch err := c.Err(); {
		case err == nil: // (HasErrorPrefix allocates, even for nil)
			if fns {
				s.fnWorked.Store(true)
			}
		case fns && notLoaded(err):
			libs[progs[i].lib] = nil
			again = append(again, i)
		case fns && noFunctions(err), redis.HasErrorPrefix(err, "NOSCRIPT"):
			scripts = append(scripts, i)
		case fns && failed == nil:
			failed = err
		}
	}
	if failed != nil {
		s.failedFunction(ctx, failed)
	}
	if len(scripts) > 0 && fns {
		s.noFunctionsSaid()
	}
	// Loaded, then called again even where a load failed somewhere (a
	// Cluster master down): their masters may have it now; twice, as run
	// does. Where a server said it has no functions, as scripts.
	for round := 0; round < loadRounds && len(again) > 0; round++ {
		for lib := range libs {
			libs[lib] = s.load(ctx, lib)
		}
		var fnAgain []int
		for _, i := range again {
			if noFunctions(libs[progs[i].lib]) {
				s.noFunctionsSaid()
				scripts = append(scripts, i)
			} else {
				fnAgain = append(fnAgain, i)
			}
		}
		s.send(ctx, cmds, fnAgain, call, func(p redis.Pipeliner, pr *program, keys []string, args []any) *redis.Cmd {
			return fcall(ctx, p, pr, keys, args)
		})
		again = again[:0]
		for _, i := range fnAgain {
			lerr, err := libs[progs[i].lib], cmds[i].Err()
			switch {
			case err == nil:
				s.fnWorked.Store(true)
			case !notLoaded(err):
			case round < loadRounds-1:
				again = append(again, i)
			case lerr != nil:
				cmds[i].SetErr(lerr)
			}
		}
		clear(libs) // the next round loads only what is still missing
		for _, i := range again {
			libs[progs[i].lib] = nil
		}
	}
	s.send(ctx, cmds, scripts, call, func(p redis.Pipeliner, pr *program, keys []string, args []any) *redis.Cmd {
		return pr.script.Eval(ctx, p, keys, args[room(keys):]...)
	})
	return cmds
}

// send makes the calls which (indices into cmds) in one pipeline, each
// with do, and puts their Cmds in cmds.
func (s *Store) send(ctx context.Context, cmds []*redis.Cmd, which []int, call func(i int) (*program, []string, []any),
	do func(p redis.Pipeliner, pr *program, keys []string, args []any) *redis.Cmd) {
	if len(which) == 0 {
		return
	}
	sent := make([]*redis.Cmd, 0, len(which))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range which {
			pr, keys, args := call(i)
			cmds[i] = do(p, pr, keys, args)
			sent = append(sent, cmds[i])
		}
		return nil
	})
	unanswered(sent, err)
	cutOff(sent)
}

// notLoaded reports whether err says a function is not loaded: the
// server has functions, not this library (a new server, a failover to
// a replica that never had it, FUNCTION FLUSH).
func notLoaded(err error) bool { return redis.HasErrorPrefix(err, "Function not found") }

// noFunctions reports whether err says the server runs no functions
// (before Redis 7, miniredis, a proxy that does not pass them on: each
// words it its own way) or will not let this client load or call them
// (ACL: a NOPERM for the command, not for a key, which a script would
// meet as well). Never an error raised inside a function, which may have
// written before it (its message names the function or the script).
func noFunctions(err error) bool {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	for _, inside := range []string{"user_function", "user_script", "script:"} {
		if strings.Contains(msg, inside) {
			return false
		}
	}
	if strings.HasPrefix(msg, "noperm") {
		return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function")
	}
	for _, none := range []string{"unknown command", "unknown subcommand", "unsupported command", "not supported"} {
		if strings.Contains(msg, none) {
			return true
		}
	}
	return false
}

// load loads lib into every master, or waits for a load of it in flight.
// A library loaded before, by another instance, is as good. It returns an
// error that says the server has no functions (see noFunctions) if a
// master said so, else nil if any master loaded it, else the first error.
func (s *Store) load(ctx context.Context, lib *library) error {
	l := &loading{done: make(chan struct{})}
	if v, busy := s.loads.LoadOrStore(lib.name, l); busy {
		in := v.(*loading)
		select {
		case <-in.done:
			return in.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() {
		s.loads.Delete(lib.name)
		close(l.done)
	}()
	var mu sync.Mutex
	var loaded bool
	var first, none error
	one := func(ctx context.Context, c redis.Cmdable) error {
		err := c.FunctionLoad(ctx, lib.code).Err()
		if redis.HasErrorPrefix(err, "Library '"+lib.name+"' already exists") {
			err = nil
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			loaded = true
		case noFunctions(err):
			none = err
		case first == nil:
			first = err
		}
		return nil // every master is tried
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	case *redis.Ring:
		_ = c.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	default:
		_ = one(ctx, s.client)
	}
	switch {
	case none != nil:
		l.err = none
	case !loaded:
		l.err = first
	}
	return l.err
}

// cutOff gives the calls of a pipeline that failed with EOF after Redis
// answered an earlier one with a protocol error that error: Redis closes
// the connection after one (as it does to a client that has not
// authenticated, at its first long command), and it is why they failed.
func cutOff(cmds []*redis.Cmd) {
	var cause error
	for _, c := range cmds {
		switch err := c.Err(); {
		case err == nil: // (HasErrorPrefix allocates, even for nil)
		case cause == nil:
			if redis.HasErrorPrefix(err, "Protocol error") {
				cause = err
			}
		case errors.Is(err, io.EOF):
			c.SetErr(cause)
		}
	}
}

// unanswered gives err, the error of the pipeline that carried cmds, to
// each of them that has neither a reply nor an error of its own. go-redis
// leaves the calls of a pipeline that never got a connection without
// either when the connection failed with an error reply of Redis's
// (WRONGPASS to the AUTH or HELLO that opens it), so that reading one
// would say only "unexpected type=<nil> for Slice", and a refund would
// seem to have succeeded. (Every script replies: a Lua nil is the error
// redis.Nil.)
func unanswered(cmds []*redis.Cmd, err error) {
	if err == nil {
		return
	}
	for _, c := range cmds {
		if c.Err() == nil && c.Val() == nil {
			c.SetErr(err)
		}
	}
}

// acquireKeys returns the keys of r: its limits' state, the members hash
// when r names a member with demand, and the key's block.
func (s *Store) acquireKeys(r Request) []string {
	return r.Policy.keys(s.prefix, r.Key, r.member() != "", true)
}

// program is the entry point that decides r: exact.lua's when r names no
// member, which has no members or fair share to read, and bucket.lua's
// when, besides, r's policy is one bucket and r does not reserve.
func (r Request) program() *program {
	switch {
	case r.member() != "":
		return &r.Policy.scripts.acquire
	case r.bucket():
		return &r.Policy.scripts.bucket
	}
	return &r.Policy.scripts.exact
}

// bucket reports whether bucket.lua decides r.
func (r Request) bucket() bool { return r.Policy.oneBucket && !r.Reserve && r.member() == "" }

// member is the member r names to the script: none without a demand.
func (r Request) member() string {
	if r.Demand <= 0 {
		return ""
	}
	return r.Member
}

// header is the number of ARGV values before the limits (acquire.lua,
// refund.lua); exactHeader, exact.lua's, which has no member's values
// (bucket.lua's is one fewer: no reserve).
const (
	header      = 8
	exactHeader = 3
)

// args returns the ARGV of r's program, after lead values left free (see
// room).
func (s *Store) args(r Request, lead int) []any {
	if r.member() == "" {
		return s.exactArgs(r, lead)
	}
	return s.acquireArgs(r, lead)
}

// acquireArgs returns acquire.lua's ARGV for r, after lead values left free.
func (s *Store) acquireArgs(r Request, lead int) []any {
	limits := s.limitArgs(r.Policy)
	args := make([]any, lead, lead+header+len(limits))
	args = append(args, r.Min, r.Max, r.reserve(), r.member(), max(0, r.Demand), max(0, r.Back), r.BackAt, r.Horizon.Microseconds())
	return append(args, limits...)
}

// exactArgs returns exact.lua's (or bucket.lua's) ARGV for r, after lead
// values left free: back and back_at follow the limits only when units go
// back.
func (s *Store) exactArgs(r Request, lead int) []any {
	limits := s.limitArgs(r.Policy)
	back := 0
	if r.Back > 0 {
		back = 2
	}
	args := make([]any, lead, lead+exactHeader+len(limits)+back)
	args = append(args, r.Min, r.Max)
	if !r.bucket() {
		args = append(args, r.reserve())
	}
	args = append(args, limits...)
	if back > 0 {
		args = append(args, r.Back, r.BackAt)
	}
	return args
}

// limitArgs returns the ARGV values of p's limits (see prelude.lua's
// limit), those of a CalendarWindow for the window of this host's time
// (see Policy.calendarArgs).
func (s *Store) limitArgs(p *Policy) []any {
	if len(p.calendars) == 0 {
		return p.args
	}
	return p.calendarArgs(s.clock.Now())
}

// reserve is r.Reserve as the scripts read it.
func (r Request) reserve() int {
	if r.Reserve {
		return 1
	}
	return 0
}

// refundArgs returns the ARGV of a refund, after lead values left free
// (see room).
func (s *Store) refundArgs(p *Policy, units, at int64, member string, lead int) []any {
	limits := s.limitArgs(p)
	args := make([]any, lead, lead+header+len(limits))
	args = append(args, units, at, member, 0, 0, 0, 0, 0)
	return append(args, limits...)
}

// parseDecision reads a decision's reply (see prelude.lua's reply): four
// to ten integers, those left off 0, and charge.lua's eleventh, the debt,
// in decimal, separated by spaces.
func parseDecision(p *Policy, reply string) (Decision, error) {
	var n [11]int64
	k := 0
	for rest := reply; rest != ""; k++ {
		field, tail, _ := strings.Cut(rest, " ")
		if k == len(n) {
			return Decision{}, fmt.Errorf("remote: acquire replied %q, more than %d values", reply, len(n))
		}
		x, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return Decision{}, fmt.Errorf("remote: acquire replied %q: %w", reply, err)
		}
		n[k], rest = x, tail
	}
	if k < 4 {
		return Decision{}, fmt.Errorf("remote: acquire replied %q, %d values, want 4 to %d", reply, k, len(n))
	}
	d := Decision{
		Granted:    n[0],
		At:         n[1],
		Remaining:  n[2],
		ResetAfter: time.Duration(n[3]) * time.Microsecond,
		ValidFor:   time.Duration(n[4]) * time.Microsecond,
		RetryAfter: time.Duration(n[5]) * time.Microsecond,
		Decider:    int(n[6]),
		Wait:       time.Duration(n[7]) * time.Microsecond,
		Members:    n[8],
		Blocked:    n[9] == 1,
		FairShare:  n[9] == 2,
		Debt:       n[10],
	}
	if d.Granted == 0 {
		// The script's wait of a denial is when the member asks again.
		d.Next, d.Wait = d.Wait, 0
	} else {
		// The script's retry_after of a grant is the next batch's time.
		d.Next, d.RetryAfter = d.RetryAfter, 0
		if n[4] == 0 { // the script's 0: no limit of its own
			d.ValidFor = -1
		}
	}
	if d.Decider < 0 || d.Decider >= len(p.limits) {
		return Decision{}, fmt.Errorf("remote: acquire named limit %d of %d", n[6], len(p.limits))
	}
	return d, nil
}

// Refund gives back units of a grant made at time at (Decision.At) to every
// limit of key, never above capacity. Where an algorithm cannot take units
// back the refund is a no-op for that limit: a fixed or sliding window
// counter after the grant's window has passed.
func (s *Store) Refund(ctx context.Context, p *Policy, key string, units, at int64) error {
	if units <= 0 {
		return nil
	}
	keys := p.Keys(s.prefix, key)
	return s.named(p, key, s.run(ctx, &p.scripts.refund, keys, s.refundArgs(p, units, at, "", room(keys))).Err())
}

func mustRead(f string) string {
	b, err := luaFiles.ReadFile("lua/" + f)
	if err != nil {
		panic("remote: embedded script missing: " + f) // a build defect, not input
	}
	return string(b)
}

// Node names the server that holds key's state under p, for failure
// accounting per server: with a *redis.ClusterClient, the address of the
// master of the key's slot as the client last saw the cluster; with any
// other client "", one name for all (a single server, a failover client,
// or a Ring, which itself moves the keys of a shard it finds down to the
// others). It may load the cluster's layout on first use, within ctx; ""
// when it cannot tell, and with a nil p.
func (s *Store) Node(ctx context.Context, p *Policy, key string) string {
	if p == nil {
		return ""
	}
	return s.NodeOf(ctx, p.Keys(s.prefix, key)[0])
}

// NodeOf is Node for one Redis key, named whole.
func (s *Store) NodeOf(ctx context.Context, redisKey string) string {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	m, err := c.MasterForKey(ctx, redisKey)
	if err != nil {
		return ""
	}
	s.layout.Store(true)
	return m.Options().Addr
}

// Ping asks every server that holds limiter state whether it answers, and
// lets this client run scripts: with a Redis Cluster every master, with a
// Ring every shard, else the one server. It returns the first failure,
// naming the server: its reply (NOPERM for a user who may not run
// scripts, WRONGPASS...), or the client's error.
func (s *Store) Ping(ctx context.Context) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return named(m.Options().Addr, ping(ctx, m))
		})
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			return named(sh.Options().Addr, ping(ctx, sh))
		})
	}
	return s.named(nil, "", ping(ctx, s.client))
}

// pingScript is what Ping runs besides PING: a script that touches no
// key, which Redis refuses (NOPERM) to a user who may not run scripts.
var pingScript = redis.NewScript("return 1")

// ping sends PING and runs pingScript on c, in one pipeline (and a second
// the first time, to load the script).
func ping(ctx context.Context, c redis.Cmdable) error {
	var run *redis.Cmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		run = pingScript.EvalSha(ctx, p, nil)
		return nil
	})
	if redis.HasErrorPrefix(run.Err(), "NOSCRIPT") {
		err = pingScript.Eval(ctx, c, nil).Err()
	}
	return err
}

// MaxmemoryPolicies reads the maxmemory-policy of the servers that node
// names (see Node), with CONFIG GET: with a *redis.ClusterClient the master
// at that address (none for ""); with a Ring every shard; else the one
// server. It returns each server's policy by its address ("" for the one
// server of a Client or a failover client). The error is the first
// failure: Redis's own reply (a redis.Error) when it refuses CONFIG (an ACL
// without +config|get: NOPERM; a managed Redis without CONFIG), or the
// client's.
func (s *Store) MaxmemoryPolicies(ctx context.Context, node string) (map[string]string, error) {
	var mu sync.Mutex
	policies := map[string]string{}
	read := func(ctx context.Context, c redis.Cmdable, addr string) error {
		v, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		p, ok := v["maxmemory-policy"]
		if !ok {
			return fmt.Errorf("CONFIG GET maxmemory-policy: no such parameter in %v", v)
		}
		mu.Lock()
		policies[addr] = p
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if node == "" {
			return policies, nil
		}
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if addr := m.Options().Addr; addr == node {
				return read(ctx, m, addr)
			}
			return nil
		})
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, sh *redis.Client) error {
			return read(ctx, sh, sh.Options().Addr)
		})
	default:
		err = read(ctx, s.client, "")
	}
	return policies, err
}

// Refused reports whether err is Redis's own error reply (a redis.Error:
// NOPERM, an unknown command...), rather than a failure to reach Redis.
func Refused(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// Sharded reports whether Node can name more than one server.
func (s *Store) Sharded() bool {
	_, ok := s.client.(*redis.ClusterClient)
	return ok
}

// HonoursDeadlines reports whether client cuts a call short at its
// context's deadline. go-redis does so only when the client was made with
// ContextTimeoutEnabled: true; otherwise a read waits for the client's own
// ReadTimeout (seconds by default) whatever the context says. Clients of
// other types are assumed not to.
func HonoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}
