package remote

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// loading is a library load in flight: err is set before done closes.
type loading struct {
	done chan struct{}
	err  error
}

// scriptsSpell is how long a Store runs scripts after a server said it
// has no functions, before it tries them again. It is wall-clock time
// (not the Store's clock): it waits for the servers to change, which a
// Limiter's manual clock does not move.
const scriptsSpell = time.Minute

// scripts reports whether the entry points run as scripts now.
func (s *Store) scripts() bool {
	until := s.scriptsUntil.Load()
	return until != 0 && (until == math.MaxInt64 || time.Now().UnixNano() < until) // wall clock: see scriptsSpell
}

// noFunctionsSaid records that a server said it has no functions: scripts
// for scriptsSpell.
func (s *Store) noFunctionsSaid() {
	s.scriptsUntil.Store(time.Now().Add(scriptsSpell).UnixNano()) // wall clock: see scriptsSpell
}

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
