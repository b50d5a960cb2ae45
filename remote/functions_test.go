package remote

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// TestExactAgreesWithAcquire: exact.lua, and bucket.lua for a policy of
// one bucket, are acquire.lua for a call that names no member. Random
// policies (one to three limits of every algorithm) and random calls (min,
// max, reserve, units given back, blocks), the same on two keys at the
// same Redis time, one decided by each script: every Decision must be the
// same.
func TestExactAgreesWithAcquire(t *testing.T) {
	ctx := context.Background()
	m := redistest.StartMini(t)
	s := NewStore(m.Client(t), "agree")
	rng := rand.New(rand.NewPCG(7, 11))
	periods := []time.Duration{time.Second, 10 * time.Second, time.Minute}
	var trials, grants, denials, buckets, blocked int
	for trial := 0; trial < 60; trial++ {
		var limits []Limit
		var longest time.Duration
		for range 1 + rng.IntN(3) {
			a := Algorithm(rng.IntN(int(numAlgorithms)))
			rate := 1 + rng.Int64N(40)
			l := Limit{Algorithm: a, Rate: rate, Burst: rate, Period: periods[rng.IntN(len(periods))] * time.Duration(1+len(limits))}
			if a == TokenBucket || a == LeakyBucket {
				l.Burst = 1 + rng.Int64N(40)
			}
			limits = append(limits, l)
			longest = max(longest, l.Period)
		}
		p, err := NewPolicy(fmt.Sprint("p", trial), limits)
		if err != nil {
			continue // limits that clash (the same algorithm and period twice)
		}
		var lastAt int64
		trials++
		for step := 0; step < 40; step++ {
			least := 1 + rng.Int64N(min(4, p.Capacity()))
			r := Request{Policy: p, Min: least, Max: least + rng.Int64N(6), Reserve: rng.IntN(4) == 0}
			if lastAt > 0 && rng.IntN(5) == 0 {
				r.Back, r.BackAt = 1+rng.Int64N(3), lastAt
			}
			if rng.IntN(12) == 0 {
				d := time.Millisecond * time.Duration(1+rng.Int64N(int64(longest/8/time.Millisecond)))
				for _, k := range []string{"exact", "acquire"} {
					if err := s.Block(ctx, p, k, d); err != nil {
						t.Fatal(err)
					}
				}
			}
			if r.bucket() {
				buckets++
			}
			r.Key = "exact"
			got, err := s.Acquire(ctx, r) // no member: exact.lua or bucket.lua
			if err != nil {
				t.Fatal(err)
			}
			r.Key = "acquire"
			keys := s.acquireKeys(r)
			v, err := s.run(ctx, &p.scripts.acquire, keys, s.acquireArgs(r, room(keys))).Text()
			if err != nil {
				t.Fatal(err)
			}
			want, err := parseDecision(p, v)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("policy %v, step %d, %+v:\nexact.lua   %+v\nacquire.lua %+v", limits, step, r, got, want)
			}
			if got.Granted > 0 {
				lastAt = got.At
				grants++
			} else if got.Blocked {
				blocked++
			} else {
				denials++
			}
			m.Advance(time.Duration(rng.Int64N(int64(longest / 8))))
		}
	}
	if trials < 30 || grants < 300 || denials < 300 || buckets < 100 || blocked < 50 {
		t.Errorf("%d policies, %d grants, %d denials, %d blocked, %d calls of bucket.lua: too few of one to compare the scripts",
			trials, grants, denials, blocked, buckets)
	}
	t.Logf("%d policies, %d grants, %d denials, %d blocked, %d calls of bucket.lua", trials, grants, denials, blocked, buckets)
}

// TestFunctions: on a server with functions (Redis 7), the entry points
// run as functions (FCALL), their library loaded by the first call, and
// loaded again when the server loses it (FUNCTION FLUSH: a new server, a
// failover to a replica that never had it), by a single call and by a
// pipeline; on a server without them (miniredis), and for a user that may
// not use them (ACL), as scripts, with the same decisions.
func TestFunctions(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	p, err := NewPolicy("fn", []Limit{{Algorithm: TokenBucket, Rate: 10, Period: time.Minute, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	calls := func(cmd string) int {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if stats, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				var n int
				fmt.Sscan(strings.SplitN(stats, ",", 2)[0], &n)
				return n
			}
		}
		return 0
	}
	granted := func(s *Store, key string, want int64) {
		t.Helper()
		d, err := s.Acquire(ctx, Request{Policy: p, Key: key, Min: 1, Max: 3})
		if err != nil || d.Granted != want {
			t.Fatalf("Acquire(%q): %+v, %v; want %d granted", key, d, err, want)
		}
	}

	s := NewStore(c, "fn")
	granted(s, "k", 3)
	if s.scripts() || calls("fcall") != 2 || calls("evalsha") != 0 {
		t.Fatalf("scripts only %v, %d FCALL, %d EVALSHA; want 2 FCALL (one before the library was loaded)",
			s.scripts(), calls("fcall"), calls("evalsha"))
	}
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: p.scripts.exact.lib.name}).Result()
	if err != nil || len(libs) != 1 || len(libs[0].Functions) != len(entries) {
		t.Fatalf("FUNCTION LIST: %+v, %v; want the library with %d functions", libs, err, len(entries))
	}
	// Lost: a single call, a pipeline and a refund load it again.
	c.FunctionFlush(ctx)
	granted(s, "k", 3)
	c.FunctionFlush(ctx)
	ds, errs := s.AcquireBatch(ctx, []Request{{Policy: p, Key: "k", Min: 1, Max: 3}, {Policy: p, Key: "other", Min: 1, Max: 3}})
	if errs[0] != nil || errs[1] != nil || ds[0].Granted != 3 || ds[1].Granted != 3 {
		t.Fatalf("AcquireBatch after FUNCTION FLUSH: %+v, %v", ds, errs)
	}
	c.FunctionFlush(ctx)
	if err := s.Refund(ctx, p, "other", 3, ds[1].At); err != nil {
		t.Fatal(err)
	}
	granted(s, "other", 3)
	if s.scripts() || calls("evalsha") != 0 {
		t.Fatalf("scripts only %v, %d EVALSHA: a lost library is loaded again, not given up", s.scripts(), calls("evalsha"))
	}

	// A user that may run scripts but not functions.
	if err := c.Do(ctx, "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nofn", Password: "pw"})
	defer limited.Close()
	ls := NewStore(limited, "fn")
	granted(ls, "acl", 3)
	if !ls.scripts() {
		t.Fatal("a user without functions: not moved to scripts")
	}
	granted(ls, "acl", 3)

	// Its first call a pipeline.
	ls = NewStore(limited, "fn")
	ds, errs = ls.AcquireBatch(ctx, []Request{{Policy: p, Key: "acl2", Min: 1, Max: 3}})
	if errs[0] != nil || ds[0].Granted != 3 || !ls.scripts() {
		t.Fatalf("AcquireBatch of a user without functions: %+v, %v, scripts only %v", ds, errs, ls.scripts())
	}

	// A server without functions, first a single call, then a pipeline.
	m := redistest.StartMini(t)
	ms := NewStore(m.Client(t), "fn")
	granted(ms, "mini", 3)
	if !ms.scripts() {
		t.Fatal("miniredis: not moved to scripts")
	}
	granted(ms, "mini", 3)
	ms = NewStore(m.Client(t), "fn")
	ds, errs = ms.AcquireBatch(ctx, []Request{{Policy: p, Key: "mini", Min: 1, Max: 3}, {Policy: p, Key: "mini2", Min: 1, Max: 3}})
	if errs[0] != nil || errs[1] != nil || ds[0].Granted != 3 || ds[1].Granted != 3 || !ms.scripts() {
		t.Fatalf("AcquireBatch on miniredis: %+v, %v, scripts only %v", ds, errs, ms.scripts())
	}
}

// TestNoFunctionsWording: the replies that mean "no functions here", as
// servers and proxies word them, and replies that do not.
func TestNoFunctionsWording(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR unknown command `fcall`, with args beginning with: ":                          true,
		"ERR unknown command 'FCALL'":                                                      true,
		"ERR unknown subcommand 'load'. Try FUNCTION HELP.":                                true,
		"ERR unsupported command 'fcall'":                                                  true,
		"ERR FCALL is not supported":                                                       true,
		"NOPERM User nofn has no permissions to run the 'fcall' command":                   true,
		"NOPERM User nofn has no permissions to run the 'function|load' command":           true,
		"NOPERM No permissions to access a key":                                            false,
		"ERR Function not found":                                                           false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                false,
		"OOM command not allowed when used memory > 'maxmemory'.":                          false,
		"ERR user_function:12: Script attempted to access nonexistent global variable 'x'": false,
	} {
		if got := noFunctions(proto(msg)); got != want {
			t.Errorf("noFunctions(%q) = %v, want %v", msg, got, want)
		}
	}
	if noFunctions(context.DeadlineExceeded) || noFunctions(nil) {
		t.Error("an error that is not Redis's reply said no functions")
	}
}

// proto is a Redis error reply with the message msg.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}

// TestFunctionsAgain: a Store that a server told it has no functions runs
// scripts for a while, then tries functions again (an upgrade, a failover
// to a server that has them, an ACL change).
func TestFunctionsAgain(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	p, err := NewPolicy("again", []Limit{{Algorithm: FixedWindow, Rate: 100, Period: time.Minute, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(c, "again")
	s.noFunctionsSaid()
	if _, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || !s.scripts() {
		t.Fatalf("within the spell: %v, scripts %v", err, s.scripts())
	}
	s.scriptsUntil.Store(time.Now().Add(-time.Millisecond).UnixNano()) // the spell is over
	if _, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || s.scripts() || !s.fnWorked.Load() {
		t.Fatalf("after the spell: %v, scripts %v, a function worked %v", err, s.scripts(), s.fnWorked.Load())
	}
}

// TestProxyThatDropsFunctions: a proxy that closes the connection on a
// command it does not know (twemproxy does) fails the first function
// call; the Store then finds that the server answers PING and runs
// scripts from then on.
func TestProxyThatDropsFunctions(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	proxy.Refuse([]byte("\r\nfcall\r\n"))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	defer c.Close()
	p, err := NewPolicy("proxied", []Limit{{Algorithm: TokenBucket, Rate: 10, Period: time.Minute, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(c, "proxied")
	if _, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err == nil {
		t.Fatal("the proxy passed a function call on")
	}
	if !s.scripts() {
		t.Fatal("after a dropped function call, with the server answering PING: not moved to scripts")
	}
	for i := 0; i < 3; i++ {
		if d, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || d.Granted != 1 {
			t.Fatalf("through the proxy, as a script: %+v, %v", d, err)
		}
	}
	if ds, errs := s.AcquireBatch(ctx, []Request{{Policy: p, Key: "k", Min: 1, Max: 1}}); errs[0] != nil || ds[0].Granted != 1 {
		t.Fatalf("a pipeline through the proxy: %+v, %v", ds, errs)
	}
}

// TestConcurrentLoads: calls that find the library missing at once load
// it once between them or each, and all are decided.
func TestConcurrentLoads(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer c.Close()
	p, err := NewPolicy("loads", []Limit{{Algorithm: TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(c, "loads")
	for round := 0; round < 3; round++ {
		if err := c.FunctionFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g%2 == 0 {
					_, err := s.Acquire(ctx, Request{Policy: p, Key: fmt.Sprint("k", g), Min: 1, Max: 1})
					errs <- err
					return
				}
				_, es := s.AcquireBatch(ctx, []Request{{Policy: p, Key: fmt.Sprint("k", g), Min: 1, Max: 1}})
				errs <- es[0]
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	if s.scripts() {
		t.Fatal("moved to scripts")
	}
}

// TestLoneMemberTakesWhatAWindowHasLeft: a member alone on a key, its
// demand above the key's rate, that finds fewer units left in a fixed
// window than a batch takes them: the window makes no more before it
// ends, and nobody else wants them.
func TestLoneMemberTakesWhatAWindowHasLeft(t *testing.T) {
	ctx := context.Background()
	m := redistest.StartMini(t)
	s := NewStore(m.Client(t), "lone")
	p, err := NewPolicy("lone", []Limit{{Algorithm: FixedWindow, Rate: 20, Period: time.Hour, Burst: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 16, Max: 16}); err != nil || d.Granted != 16 {
		t.Fatalf("16 units: %+v, %v", d, err)
	}
	m.Advance(time.Second)
	for _, lease := range []Request{
		{Policy: p, Key: "k", Min: 1, Max: 8, Member: "m", Demand: 100, Horizon: time.Second},
	} {
		d, err := s.Acquire(ctx, lease)
		if err != nil || d.Granted != 4 {
			t.Fatalf("a lease of 1..8 with 4 left, alone: %+v, %v; want the 4", d, err)
		}
	}
}

// failFirstLoad is a go-redis hook that fails the first FUNCTION LOAD it
// sees without sending it, as a master whose load fails for a moment.
type failFirstLoad struct{ failed atomic.Bool }

func (*failFirstLoad) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstLoad) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "function") &&
			strings.EqualFold(fmt.Sprint(args[1]), "load") && h.failed.CompareAndSwap(false, true) {
			cmd.SetErr(errors.New("ERR a load that failed for a moment"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (*failFirstLoad) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFunctionLoadedTwice: a call that finds its library missing loads it
// and calls again, and does so once more when the load reached no server
// (or missed the call's master, whose load failed): the call then works,
// alone and in a pipeline.
func TestFunctionLoadedTwice(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	p, err := NewPolicy("twice", []Limit{{Algorithm: TokenBucket, Rate: 10, Period: time.Minute, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func(s *Store) error
	}{
		{"alone", func(s *Store) error {
			if d, err := s.Acquire(ctx, Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || d.Granted != 1 {
				return fmt.Errorf("Acquire: %+v, %v; want a grant", d, err)
			}
			return nil
		}},
		{"in a pipeline", func(s *Store) error {
			ds, errs := s.AcquireBatch(ctx, []Request{{Policy: p, Key: "a", Min: 1, Max: 1}, {Policy: p, Key: "b", Min: 1, Max: 1}})
			if errs[0] != nil || errs[1] != nil || ds[0].Granted != 1 || ds[1].Granted != 1 {
				return fmt.Errorf("AcquireBatch: %+v, %v; want two grants", ds, errs)
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rc.Close()
			if err := rc.FunctionFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			h := &failFirstLoad{}
			rc.AddHook(h)
			s := NewStore(rc, "twice")
			if err := c.call(s); err != nil {
				t.Fatalf("with the first load failing: %v", err)
			}
			if !h.failed.Load() || s.scripts() {
				t.Fatalf("the first load failed: %v; scripts only: %v", h.failed.Load(), s.scripts())
			}
		})
	}
}

// TestPermitFunction: permit.lua runs as the one function of a library of
// its own, loaded by the first call and again after FUNCTION FLUSH.
func TestPermitFunction(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := NewStore(c, "pf")
	acquire := func(id string, want bool) {
		t.Helper()
		r, err := s.Permit(ctx, PermitCall{Name: "p", Key: "k", ID: id, Op: PermitAcquire, Limit: 1, TTL: time.Minute})
		if err != nil || r.Done != want || r.Held != 1 {
			t.Fatalf("Permit(%q): %+v, %v; want done %v, 1 held", id, r, err, want)
		}
	}
	acquire("a", true)
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: permitProgram().lib.name}).Result()
	if err != nil || len(libs) != 1 || len(libs[0].Functions) != 1 {
		t.Fatalf("FUNCTION LIST: %+v, %v; want the permits' library with one function", libs, err)
	}
	c.FunctionFlush(ctx)
	acquire("b", false) // the limit is 1, and a holds it
	if s.scripts() {
		t.Fatal("the Store runs scripts after a FUNCTION FLUSH; want functions")
	}
}
