package ratelease_test

// The economy of leasing: what a Limiter with the default settings costs
// Redis, and what it admits, in the regimes a real deployment meets. Each
// test measures one regime on a real redis-server through the public API
// only, with defaults (no WithLease, no WithClock), and asserts the target
// the lease engine is meant to reach there; the one exception is
// TestEconomyCachedDenialRemaining, a check of one Result on an in-memory
// Redis whose clock stands still. Each logs its figures in one line, so
// that
//
//	go test -run 'TestEconomy' -v -count 1 .
//
// prints a table. These are acceptance tests for the lease engine: a target
// that today's engine misses fails here on purpose.
//
// Redis work is counted on the wire, by a hook on each Limiter's own client
// (tripCounter), not by Limiter.Stats: one round trip per command sent alone
// and one per pipeline, whatever it holds. The connection handshake that
// go-redis makes on each new connection (HELLO, CLIENT ...) is not counted:
// no Limiter can avoid it, and it would blur small counts.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

// tripCounter is a go-redis hook that counts what a client sends to Redis:
// trips, the round trips (one per command sent alone, one per pipeline),
// and cmds, the commands (a pipeline's count of them). The connection
// handshake is counted apart, in handshakes. It is safe for concurrent use;
// add it with client.AddHook before the client is first used.
type tripCounter struct {
	trips, cmds, handshakes atomic.Int64
}

var _ redis.Hook = (*tripCounter)(nil)

// DialHook counts nothing: a dial is not a command.
func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone: one round trip, one command.
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isHandshake(cmd) {
			c.handshakes.Add(1)
		} else {
			c.trips.Add(1)
			c.cmds.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline: one round trip, len(cmds) commands.
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return !isHandshake(cmd) }) {
			c.handshakes.Add(1)
		} else {
			c.trips.Add(1)
			c.cmds.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// isHandshake reports whether cmd is one go-redis sends when it sets up a
// connection (the Limiter itself sends only scripts).
func isHandshake(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// instance is one Limiter with a Redis client of its own, the client's
// traffic counted by trips, and the decisions made through allowN counted.
// Safe for concurrent use.
type instance struct {
	l     *ratelease.Limiter
	trips *tripCounter

	decisions, admitted, units atomic.Int64
	// fallback counts decisions made by the failure mode: Redis did not
	// answer in time. A run with many is not measuring the engine.
	fallback atomic.Int64
	errs     atomic.Int64
	firstErr atomic.Pointer[error]
}

// newInstance makes a Limiter with defaults (and opts) on a new client to
// addr, made as the README says (ContextTimeoutEnabled). Both are closed
// when t ends; closing the Limiter sooner is fine (Close is idempotent).
func newInstance(t testing.TB, addr string, opts ...ratelease.Option) *instance {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	tc := &tripCounter{}
	client.AddHook(tc)
	l, err := ratelease.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() }) // runs before the client's Close
	return &instance{l: l, trips: tc}
}

// newInstances makes n instances on addr.
func newInstances(t testing.TB, n int, addr string, opts ...ratelease.Option) []*instance {
	t.Helper()
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = newInstance(t, addr, opts...)
	}
	return ins
}

// modeOpts are the options of a mode: leasing (the defaults) or exact.
func modeOpts(exact bool) []ratelease.Option {
	if exact {
		return []ratelease.Option{ratelease.WithExact()}
	}
	return nil
}

// modeName names a mode in logs.
func modeName(exact bool) string {
	if exact {
		return "exact"
	}
	return "lease"
}

// allowN makes one decision of n units on key, counts it, and reports
// whether it admitted them.
func (in *instance) allowN(p *ratelease.Policy, key string, n int) bool {
	res, err := in.l.AllowN(context.Background(), p, key, n)
	if err != nil {
		in.errs.Add(1)
		in.firstErr.CompareAndSwap(nil, &err)
		return false
	}
	in.decisions.Add(1)
	if res.Allowed {
		in.admitted.Add(1)
		in.units.Add(int64(n))
	}
	if res.Source == ratelease.Fallback {
		in.fallback.Add(1)
	}
	return res.Allowed
}

// check fails t if any call of allowN on in failed.
func (in *instance) check(t *testing.T, who string) {
	t.Helper()
	if n := in.errs.Load(); n > 0 {
		t.Errorf("%s: %d decisions failed, the first with: %v", who, n, *in.firstErr.Load())
	}
}

// totals are the counts of several instances added up.
type totals struct {
	decisions, admitted, units int64
	trips, cmds                int64 // Redis round trips and commands
	fallback                   int64
}

// sum adds up the counts of ins.
func sum(ins []*instance) totals {
	var s totals
	for _, in := range ins {
		s.decisions += in.decisions.Load()
		s.admitted += in.admitted.Load()
		s.units += in.units.Load()
		s.trips += in.trips.trips.Load()
		s.cmds += in.trips.cmds.Load()
		s.fallback += in.fallback.Load()
	}
	return s
}

// ratio is a/b, 0 when b is 0.
func ratio[N int64 | float64](a, b N) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// paceTick is the shortest sleep of pace: a load faster than one call per
// paceTick is issued in small batches, every paceTick, of the calls due.
// (A sleep on Linux oversleeps by some 50-100µs and costs a wakeup: pacing
// thousands of calls a second one sleep each would fall behind.)
const paceTick = time.Millisecond

// TargetsEnv, set to 1, makes every economy target a failure when missed.
// Without it, a target the engine does not meet yet is logged as such, and
// the test fails only past a looser bound that holds what the engine has
// reached: a regression guard that a loaded CI machine cannot trip.
const TargetsEnv = "RATELEASE_TARGETS"

// target reports a figure against its target (met) and its regression
// guard (held): see TargetsEnv.
func target(t *testing.T, met, held bool, format string, args ...any) {
	t.Helper()
	switch {
	case met:
	case !held || os.Getenv(TargetsEnv) == "1":
		t.Errorf(format, args...)
	default:
		t.Logf("TARGET NOT MET: "+format, args...)
	}
}

// pace calls fn rate times a second in all, from goroutines goroutines
// (goroutine g calls fn(g)), evenly spaced, from start until start+d: the
// calls due before start+d are made. Each goroutine sleeps until its next
// call is due, at least paceTick, then makes every call that has come due;
// so the rate holds when a call is slow or a sleep long, as long as the
// machine keeps up. A goroutine more than a tenth of a second behind at the
// end gives up the rest. pace returns when every goroutine is done, with
// the number of calls made: compare it with intended.
func pace(start time.Time, rate float64, d time.Duration, goroutines int, fn func(g int)) (calls int64) {
	end := start.Add(d)
	var made atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			// Goroutine g's i-th call is due at start + (g + i·goroutines)/rate.
			due := func(i int) time.Time {
				return start.Add(time.Duration((float64(g) + float64(i)*float64(goroutines)) / rate * float64(time.Second)))
			}
			for i := 0; due(i).Before(end); {
				if w := time.Until(due(i)); w > 0 {
					time.Sleep(max(w, paceTick))
				}
				now := time.Now()
				if now.After(end.Add(100 * time.Millisecond)) {
					return
				}
				for ; !due(i).After(now) && due(i).Before(end); i++ {
					fn(g)
					made.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return made.Load()
}

// intended is the number of calls pace is asked for: rate·d.
func intended(rate float64, d time.Duration) float64 { return rate * d.Seconds() }

// checkOffered fails t when a paced load did not offer what was intended
// within 5%: then the run did not measure the regime it names.
func checkOffered(t *testing.T, who string, offered int64, rate float64, d time.Duration) {
	t.Helper()
	if want := intended(rate, d); math.Abs(float64(offered)-want) > 0.05*want {
		t.Errorf("harness: %s offered %d decisions, intended %.0f (%.0f/s for %v): the machine did not keep up",
			who, offered, want, rate, d)
	}
}

// goroutinesFor is how many goroutines pace a load of rate per second: one
// per 750/s, so that a call that waits on Redis does not hold up the rest.
func goroutinesFor(rate float64) int { return max(1, int(math.Ceil(rate/750))) }

// flatOut calls fn(g) from goroutines goroutines as fast as they can, for d.
func flatOut(d time.Duration, goroutines int, fn func(g int)) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			for time.Now().Before(end) {
				fn(g)
			}
		})
	}
	wg.Wait()
}

// waterFill returns the max-min fair shares of capacity among demands: each
// gets its demand or an equal part of what the smaller demands left,
// whichever is less.
func waterFill(capacity float64, demands []float64) []float64 {
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(demands[a], demands[b]) })
	shares := make([]float64, len(demands))
	left := capacity
	for k, i := range idx {
		part := left / float64(len(idx)-k)
		shares[i] = min(demands[i], part)
		left -= shares[i]
	}
	return shares
}

// An everyday key: a per-user limit of 5/s that two replicas each see a
// request on every half second, well under the limit. Exact mode pays one
// round trip per decision; leasing must pay at most half that, and never
// more than exact mode. Nothing may be denied: the load is under the limit.
// Round trips are all that the two clients send from New to the end of the
// load (leases and refunds): what the key costs Redis. Both modes
// run at once, each on a Redis of its own.
func TestEconomyEverydayKey(t *testing.T) {
	const (
		perInstance = 2.0 // requests per second, each instance
		runFor      = 10 * time.Second
		offset      = 250 * time.Millisecond // the second instance's start
	)
	p := policy(t, "everyday", ratelease.PerSecond(5))
	type run struct {
		exact bool
		ins   []*instance
	}
	runs := []*run{{exact: false}, {exact: true}}
	for _, r := range runs {
		r.ins = newInstances(t, 2, redistest.Start(t).Addr, modeOpts(r.exact)...)
	}
	start := time.Now().Add(10 * time.Millisecond)
	offered := make([][]int64, len(runs))
	var wg sync.WaitGroup
	for k, r := range runs {
		offered[k] = make([]int64, len(r.ins))
		for i, in := range r.ins {
			wg.Go(func() {
				offered[k][i] = pace(start.Add(time.Duration(i)*offset), perInstance, runFor, 1, func(int) {
					in.allowN(p, "user:42", 1)
				})
			})
		}
	}
	wg.Wait()
	perDecision := map[bool]float64{}
	for k, r := range runs {
		for i, in := range r.ins {
			in.check(t, fmt.Sprintf("%s instance %d", modeName(r.exact), i))
			checkOffered(t, fmt.Sprintf("%s instance %d", modeName(r.exact), i), offered[k][i], perInstance, runFor)
		}
		tot := sum(r.ins) // round trips from New to the end of the load
		perDecision[r.exact] = ratio(tot.trips, tot.decisions)
		t.Logf("%s: %d decisions, %d admitted, %d round trips: %.3f round trips per decision",
			modeName(r.exact), tot.decisions, tot.admitted, tot.trips, perDecision[r.exact])
		if tot.admitted != tot.decisions {
			t.Errorf("%s: admitted %d of %d decisions, want all: the load is under the limit", modeName(r.exact), tot.admitted, tot.decisions)
		}
	}
	t.Logf("everyday key: lease %.3f round trips per decision, exact %.3f (target: lease <= 0.5 and <= exact)",
		perDecision[false], perDecision[true])
	target(t, perDecision[false] <= 0.5, perDecision[false] <= 0.65,
		"lease mode: %.3f round trips per decision, target at most 0.5 (held at 0.65)", perDecision[false])
	if perDecision[false] > perDecision[true] {
		t.Errorf("lease mode: %.3f round trips per decision, more than exact mode's %.3f", perDecision[false], perDecision[true])
	}
}

// A fleet of idle instances must not make a busy key dearer. Two instances
// drive one key of 1000/s at four times its limit; then the same, with 30
// more instances created beside them that never touch the key. The pair's
// round trips per decision, counted over the load only, may grow by at most
// 20% (plus 0.002, so that a baseline near zero does not make the test
// flaky): what a key costs must depend on the instances that use it, not
// on every instance alive.
func TestEconomyFleet(t *testing.T) {
	const (
		perInstance = 2000.0
		runFor      = 4 * time.Second
		settle      = 1500 * time.Millisecond
	)
	p := policy(t, "fleet", ratelease.PerSecond(1000))
	measure := func(idle int) float64 {
		addr := redistest.Start(t).Addr
		pair := newInstances(t, 2, addr)
		fleet := newInstances(t, idle, addr)
		time.Sleep(settle) // membership, if any, settles
		before := sum(pair)
		start := time.Now()
		var offered [2]int64
		var wg sync.WaitGroup
		for i, in := range pair {
			wg.Go(func() {
				offered[i] = pace(start, perInstance, runFor, 4, func(int) { in.allowN(p, "busy", 1) })
			})
		}
		wg.Wait()
		tot := sum(pair)
		trips := tot.trips - before.trips // over the load only
		for i, in := range pair {
			in.check(t, fmt.Sprintf("idle=%d: pair instance %d", idle, i))
			checkOffered(t, fmt.Sprintf("idle=%d: pair instance %d", idle, i), offered[i], perInstance, runFor)
		}
		for _, in := range append(pair, fleet...) {
			_ = in.l.Close()
		}
		per := ratio(trips, tot.decisions)
		t.Logf("%2d idle instances: the pair made %d decisions (%d admitted, %d by fallback) in %d round trips: %.4f per decision",
			idle, tot.decisions, tot.admitted, tot.fallback, trips, per)
		return per
	}
	alone := measure(0)
	withFleet := measure(30)
	limit := 1.2*alone + 0.002
	t.Logf("fleet: the pair's round trips per decision %.4f alone, %.4f beside 30 idle instances (target <= %.4f = 1.2x + 0.002)",
		alone, withFleet, limit)
	if withFleet > limit {
		t.Errorf("beside 30 idle instances the pair made %.4f round trips per decision, %.2fx the %.4f without them; target at most 1.2x + 0.002 = %.4f",
			withFleet, ratio(withFleet, alone), alone, limit)
	}
}

// A binding limit: five instances with demands 1:1:2:4:8, 6000/s in all,
// on one key of 3000/s (burst 3000), for 6 s. Leasing must stay cheap
// (at most 0.01 round trips per decision, every Allow counted, admitted or
// not), admit what the limit allows (0.97 to 1.01 of Burst + Rate·T, T in
// Redis time), and share the rate max-min fairly: water-filling 3000/s over
// the demands gives 375, 375, 750, 750, 750, and each instance must be
// admitted at least 0.9 of its share. Round trips are all that the five
// clients send from New to the end of the load. Exact mode runs the same
// load after, for comparison only.
func TestEconomyBindingLimit(t *testing.T) {
	const (
		rate   = 3000
		runFor = 6 * time.Second
	)
	demands := []float64{375, 375, 750, 1500, 3000}
	fair := waterFill(rate, demands)
	p := policy(t, "binding", ratelease.PerSecond(rate))
	for _, exact := range []bool{false, true} {
		srv := redistest.Start(t)
		ins := newInstances(t, len(demands), srv.Addr, modeOpts(exact)...)
		offered := make([]int64, len(ins))
		startRedis := redisMicros(t, srv)
		start := time.Now()
		var wg sync.WaitGroup
		for i, in := range ins {
			wg.Go(func() {
				offered[i] = pace(start, demands[i], runFor, goroutinesFor(demands[i]), func(int) { in.allowN(p, "shared", 1) })
			})
		}
		wg.Wait()
		endRedis := redisMicros(t, srv)
		tot := sum(ins) // round trips from New to the end of the load
		secs := float64(endRedis-startRedis) / 1e6
		bound := rate + rate*secs
		accuracy := float64(tot.admitted) / bound
		perDecision := ratio(tot.trips, tot.decisions)
		var perInstance, offeredRatio []string
		lowest := math.Inf(1) // the least admitted rate over fair share
		for i, in := range ins {
			in.check(t, fmt.Sprintf("%s instance %d", modeName(exact), i))
			checkOffered(t, fmt.Sprintf("%s instance %d", modeName(exact), i), offered[i], demands[i], runFor)
			got := float64(in.admitted.Load()) / secs
			perInstance = append(perInstance, fmt.Sprintf("%.0f/%.0f", got, fair[i]))
			offeredRatio = append(offeredRatio, fmt.Sprintf("%.3f", float64(offered[i])/intended(demands[i], runFor)))
			lowest = min(lowest, got/fair[i])
		}
		for _, in := range ins {
			_ = in.l.Close()
		}
		t.Logf("%s: accuracy %.4f (admitted %d of Burst+Rate·T %.0f, T %.2fs), %.4f round trips per decision (%d in %d decisions, %d by fallback), admitted/s per instance over fair share [%s], least %.2f of fair; offered ÷ intended [%s]",
			modeName(exact), accuracy, tot.admitted, bound, secs, perDecision, tot.trips, tot.decisions, tot.fallback,
			strings.Join(perInstance, " "), lowest, strings.Join(offeredRatio, " "))
		if exact {
			continue // for comparison only
		}
		target(t, perDecision <= 0.01, perDecision <= 0.03,
			"lease mode: %.4f round trips per decision, target at most 0.01 (held at 0.03)", perDecision)
		if accuracy > 1.01 {
			t.Errorf("lease mode: accuracy %.4f (admitted ÷ Burst+Rate·T), above 1.01", accuracy)
		}
		target(t, accuracy >= 0.97, accuracy >= 0.93,
			"lease mode: accuracy %.4f (admitted ÷ Burst+Rate·T), target at least 0.97 (held at 0.93)", accuracy)
		for i, in := range ins {
			got := float64(in.admitted.Load()) / secs
			target(t, got >= 0.9*fair[i], got >= 0.6*fair[i],
				"lease mode: instance %d (demand %.0f/s) admitted %.0f/s, %.2f of its max-min fair share %.0f/s; target at least 0.9 (held at 0.6)",
				i, demands[i], got, got/fair[i], fair[i])
		}
	}
}

// The window algorithms at twice their rate: a fixed window and a sliding
// window counter of 200/s, with one instance and with three sharing the
// demand, 400/s in all, for 4 s. Leasing must admit at least 0.97 of what
// exact mode admits from the same load. The two modes run at once, each on
// a Redis of its own, so that both see the same windows. The run covers
// four whole windows of Redis time, less 20ms at either end: a run that
// stopped inside a window would end with leased units not yet used, which
// a real deployment would go on to use, and count them as lost.
func TestEconomyWindows(t *testing.T) {
	const (
		total  = 400.0
		edge   = 20 * time.Millisecond
		runFor = 4*time.Second - 2*edge
	)
	for _, alg := range []ratelease.Algorithm{ratelease.FixedWindow, ratelease.SlidingWindowCounter} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/instances=%d", alg, n), func(t *testing.T) {
				p := policy(t, "windows", ratelease.Limit{Rate: 200, Period: time.Second, Algorithm: alg})
				perInstance := total / float64(n)
				srv := redistest.Start(t)
				modes := [][]*instance{
					newInstances(t, n, srv.Addr),
					newInstances(t, n, redistest.Start(t).Addr, ratelease.WithExact()),
				}
				offered := make([][]int64, len(modes))
				start := nextRedisSecond(t, srv).Add(edge) // both servers run on this machine's clock
				var wg sync.WaitGroup
				for m, ins := range modes {
					offered[m] = make([]int64, n)
					for i, in := range ins {
						wg.Go(func() {
							offered[m][i] = pace(start, perInstance, runFor, 1, func(int) { in.allowN(p, "win", 1) })
						})
					}
				}
				wg.Wait()
				var admitted [2]int64
				var perDecision [2]float64
				for m, ins := range modes {
					for i, in := range ins {
						in.check(t, fmt.Sprintf("%s instance %d", modeName(m == 1), i))
						checkOffered(t, fmt.Sprintf("%s instance %d", modeName(m == 1), i), offered[m][i], perInstance, runFor)
					}
					tot := sum(ins)
					admitted[m], perDecision[m] = tot.admitted, ratio(tot.trips, tot.decisions)
				}
				t.Logf("%v, instances=%d: lease admitted %d, exact %d: %.3f of exact (target >= 0.97); round trips per decision lease %.4f, exact %.4f",
					alg, n, admitted[0], admitted[1], ratio(admitted[0], admitted[1]), perDecision[0], perDecision[1])
				of := ratio(admitted[0], admitted[1])
				target(t, of >= 0.97, of >= 0.93,
					"lease mode admitted %d, %.3f of exact mode's %d; target at least 0.97 (held at 0.93)", admitted[0], of, admitted[1])
			})
		}
	}
}

// nextRedisSecond returns the local time at which srv's clock next reaches
// a whole second, at least 100ms from now.
func nextRedisSecond(t *testing.T, srv *redistest.Server) time.Time {
	t.Helper()
	before := time.Now()
	now := redisMicros(t, srv)
	local := before.Add(time.Since(before) / 2) // when Redis read its clock, about
	next := (now/1e6 + 1) * 1e6
	if next-now < 100_000 {
		next += 1e6
	}
	return local.Add(time.Duration(next-now) * time.Microsecond)
}

// A denial answered from the cache must report the Remaining that Redis
// reported with the denial it repeats, not 0 while units are free. On an
// in-memory Redis whose time stands still (so nothing refills and the
// cached denial cannot lapse): a fixed window of 10, of which an exact
// Limiter takes 7; a leasing Limiter asks for 5 and Redis denies it, with
// 3 remaining; asked again, the leasing Limiter denies from its cache (or
// asks Redis again) and must say 3 remaining. Once the leasing Limiter is
// closed (any units it took are given back), an exact Limiter checks that
// Redis does hold exactly 3.
func TestEconomyCachedDenialRemaining(t *testing.T) {
	mr := redistest.StartMini(t)
	// The leasing Limiter's clock stands still with Redis's: its cached
	// denial lasts as long as the test needs it.
	clk := clock.NewManual(mr.Now())
	ctx := context.Background()
	p := policy(t, "cached", ratelease.Limit{Rate: 10, Period: time.Second, Algorithm: ratelease.FixedWindow})
	exact := newInstance(t, mr.Addr(), ratelease.WithExact(), ratelease.WithRedisTimeout(5*time.Second))
	lease := newInstance(t, mr.Addr(), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5*time.Second))

	if res, err := exact.l.AllowN(ctx, p, "k", 7); err != nil || !res.Allowed || res.Remaining != 3 {
		t.Fatalf("exact AllowN(7) on a fresh window of 10: %+v, %v; want admitted with 3 remaining", res, err)
	}
	first, err := lease.l.AllowN(ctx, p, "k", 5)
	if err != nil || first.Allowed {
		t.Fatalf("leasing AllowN(5) with 3 left: %+v, %v; want denied", first, err)
	}
	second, err := lease.l.AllowN(ctx, p, "k", 5)
	if err != nil || second.Allowed {
		t.Fatalf("leasing AllowN(5) again: %+v, %v; want denied", second, err)
	}
	t.Logf("cached denial: first denial source %v remaining %d; repeated denial source %v remaining %d (target: 3, what Redis holds)",
		first.Source, first.Remaining, second.Source, second.Remaining)
	if first.Remaining != 3 {
		t.Errorf("the first denial (source %v) reports %d remaining; Redis holds 3", first.Source, first.Remaining)
	}
	if second.Remaining != 3 {
		t.Errorf("the repeated denial (source %v) reports %d remaining; Redis said 3 with the denial it repeats", second.Source, second.Remaining)
	}
	// What Redis holds: 3, neither more nor less (a denied AllowN takes nothing).
	_ = lease.l.Close() // gives back any units it holds
	if res, err := exact.l.AllowN(ctx, p, "k", 4); err != nil || res.Allowed {
		t.Fatalf("exact AllowN(4) after: %+v, %v; want denied", res, err)
	}
	if res, err := exact.l.AllowN(ctx, p, "k", 3); err != nil || !res.Allowed {
		t.Fatalf("exact AllowN(3) after: %+v, %v; want admitted", res, err)
	}
}

// Bandwidth: a limit of 10^9 bytes per second (burst as much), charged 64
// KiB per call by four instances, two goroutines each, flat out for 3 s.
// What is admitted, in bytes, must be 0.97 to 1.01 of Burst + Rate·T (T in
// Redis time). Exact mode, from the same load after, must not go over 1.01.
// Today NewPolicy refuses such a limit (more than one unit per
// microsecond): the test fails at once with its error.
func TestEconomyBandwidth(t *testing.T) {
	const (
		rate   = 1_000_000_000 // bytes per second
		chunk  = 65536
		runFor = 3 * time.Second
	)
	p, err := ratelease.NewPolicy("bandwidth", ratelease.Limit{Rate: rate, Period: time.Second})
	if err != nil {
		t.Fatalf("NewPolicy(%d bytes/s): %v; the engine must take rates up to 10^9 units per second", rate, err)
	}
	for _, exact := range []bool{false, true} {
		srv := redistest.Start(t)
		ins := newInstances(t, 4, srv.Addr, modeOpts(exact)...)
		startRedis := redisMicros(t, srv)
		var wg sync.WaitGroup
		for _, in := range ins {
			wg.Go(func() { flatOut(runFor, 2, func(int) { in.allowN(p, "upload", chunk) }) })
		}
		wg.Wait()
		endRedis := redisMicros(t, srv)
		tot := sum(ins)
		for i, in := range ins {
			in.check(t, fmt.Sprintf("%s instance %d", modeName(exact), i))
			_ = in.l.Close()
		}
		secs := float64(endRedis-startRedis) / 1e6
		bound := rate + rate*secs
		accuracy := float64(tot.units) / bound
		t.Logf("%s: accuracy %.4f (%d bytes admitted of Burst+Rate·T %.0f, T %.2fs), %d decisions (%d by fallback), %.4f round trips per decision",
			modeName(exact), accuracy, tot.units, bound, secs, tot.decisions, tot.fallback, ratio(tot.trips, tot.decisions))
		if accuracy > 1.01 {
			t.Errorf("%s mode: accuracy %.3f, target at most 1.01", modeName(exact), accuracy)
		}
		if !exact {
			target(t, accuracy >= 0.97, accuracy >= 0.95, "lease mode: accuracy %.3f, target at least 0.97 (held at 0.95)", accuracy)
		}
	}
}

// TestEconomyFleetFigures is a measurement with one check: 10, 30 and 100
// instances in one process on one Redis, 1000 keys of 100/s each whose
// popularity follows Zipf's law (s = 1.1), a fixed total demand of 20,000
// decisions per second spread evenly over the instances, 3 s per count; the
// same load in exact mode after, for what an exact limiter admits. It logs
// a markdown table: Redis commands per second (the hook's count: a script
// is one command), round trips per decision, what leasing admitted over
// what exact mode admitted, and units admitted past each key's own bound
// Burst + Rate·T. The check: round trips per decision at 100 instances at
// most 1.5 times those at 10, so that a decision does not get dearer as the
// fleet grows. Run it with
//
//	RATELEASE_MEASURE=1 go test -run TestEconomyFleetFigures -v .
func TestEconomyFleetFigures(t *testing.T) {
	if os.Getenv("RATELEASE_MEASURE") == "" {
		t.Skip("a measurement: set RATELEASE_MEASURE=1 to run it")
	}
	const (
		keys    = 1000
		perKey  = 100
		total   = 20_000.0
		runFor  = 3 * time.Second
		zipfS   = 1.1
		seedTag = 11
	)
	p := policy(t, "zipf", ratelease.PerSecond(perKey))
	type result struct {
		totals
		secs    float64
		offered int64
		perKey  []int64 // admitted per key
	}
	run := func(n int, exact bool) result {
		srv := redistest.Start(t)
		ins := newInstances(t, n, srv.Addr, modeOpts(exact)...)
		perInstance := total / float64(n)
		goroutines := goroutinesFor(perInstance)
		perKeyAdm := make([]atomic.Int64, keys)
		var offered atomic.Int64
		startRedis := redisMicros(t, srv)
		start := time.Now()
		var wg sync.WaitGroup
		for i, in := range ins {
			// The same key sequence in both modes: one Zipf source per
			// goroutine, seeded by instance and goroutine.
			zs := make([]*rand.Zipf, goroutines)
			for g := range zs {
				zs[g] = rand.NewZipf(rand.New(rand.NewPCG(seedTag, uint64(i*64+g))), zipfS, 1, keys-1)
			}
			wg.Go(func() {
				offered.Add(pace(start, perInstance, runFor, goroutines, func(g int) {
					k := zs[g].Uint64()
					if in.allowN(p, fmt.Sprintf("z%03d", k), 1) {
						perKeyAdm[k].Add(1)
					}
				}))
			})
		}
		wg.Wait()
		endRedis := redisMicros(t, srv)
		r := result{secs: float64(endRedis-startRedis) / 1e6, offered: offered.Load()}
		r.totals = sum(ins)
		for i, in := range ins {
			in.check(t, fmt.Sprintf("N=%d %s instance %d", n, modeName(exact), i))
			_ = in.l.Close()
		}
		for k := range perKeyAdm {
			r.perKey = append(r.perKey, perKeyAdm[k].Load())
		}
		return r
	}
	t.Logf("| instances | decisions/s | Redis commands/s (lease) | round trips per decision (lease) | admitted ÷ exact's | units past a key's bound | Redis commands/s (exact) | offered ÷ intended |")
	t.Logf("|---|---|---|---|---|---|---|---|")
	perDecision := map[int]float64{}
	for _, n := range []int{10, 30, 100} {
		lease, exact := run(n, false), run(n, true)
		var over int64
		bound := float64(perKey) + perKey*lease.secs
		for _, a := range lease.perKey {
			over += max(0, a-int64(math.Floor(bound)))
		}
		perDecision[n] = ratio(lease.trips, lease.decisions)
		t.Logf("| %d | %.0f | %.0f | %.4f | %.3f | %d | %.0f | %.3f / %.3f |", n, float64(lease.decisions)/lease.secs,
			float64(lease.cmds)/lease.secs, perDecision[n], ratio(lease.admitted, exact.admitted), over,
			float64(exact.cmds)/exact.secs, float64(lease.offered)/intended(total, runFor), float64(exact.offered)/intended(total, runFor))
		if lease.fallback+exact.fallback > 0 {
			t.Logf("N=%d: %d lease and %d exact decisions by fallback (Redis late)", n, lease.fallback, exact.fallback)
		}
	}
	// The target: no growth with N. Held at 1.7x: at a fixed
	// total demand each (instance, key) pair's demand falls as N grows,
	// and a pair that sees less than a request per TTL pays a lease per
	// request, as exact mode does (docs/scaling.md).
	growth := ratio(perDecision[100], perDecision[10])
	target(t, growth <= 1, growth <= 1.7,
		"round trips per decision: %.4f at 100 instances, %.2fx the %.4f at 10; target no growth (held at 1.7x)",
		perDecision[100], growth, perDecision[10])
}
