package systest_test

import (
	"context"
	"flag"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// TestMain checks that no goroutine outlives the tests, but go-redis's
// tryDial: after as many failed dials as its pool has connections, a
// go-redis pool probes its server on a goroutine of its own, once a second,
// until a dial works or the pool is closed, which it sees only after its
// sleep (or a dial, up to DialTimeout). The fault tests kill servers, so
// one may still be finishing when the last test ends (a CI run failed on
// it); it ends by itself, and it is go-redis's, not a Limiter's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// loadFor, when set, makes every timed load of this package's benchmarks
// last that long instead of its own length: to see that they run, not for
// figures.
var loadFor = flag.Duration("loadfor", 0, "run each timed load of a benchmark for this long instead of its own length (0: its own)")

// loadLength is d, or loadFor when it is set.
func loadLength(d time.Duration) time.Duration {
	if *loadFor > 0 {
		return *loadFor
	}
	return d
}

func policy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dial returns a client for addr made as the README says
// (ContextTimeoutEnabled), closed when t ends.
func dial(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// clientsTo returns a function that dials addr (see dial) at each call:
// for newInstances.
func clientsTo(t testing.TB, addr string) func() redis.UniversalClient {
	return func() redis.UniversalClient { return dial(t, addr) }
}

// clusterClients returns a function that makes a cluster client for cl at
// each call: for newInstances.
func clusterClients(t testing.TB, cl *redistest.Cluster) func() redis.UniversalClient {
	return func() redis.UniversalClient {
		return cl.Client(t, &redis.ClusterOptions{ContextTimeoutEnabled: true})
	}
}

// engine are the options of a Limiter whose figures measure the lease
// engine (lc): a Redis timeout of 2 s, so that a loaded machine's slow
// replies are waited for, not decided by the failure mode.
func engine(lc ratelease.LeaseConfig) []ratelease.Option {
	return []ratelease.Option{ratelease.WithLease(lc), ratelease.WithRedisTimeout(2 * time.Second)}
}

// instance is one Limiter with a Redis client of its own, the client's
// traffic counted on the wire (wire), and the decisions made through allowN
// (or counted with count) counted. Safe for concurrent use.
type instance struct {
	l    *ratelease.Limiter
	wire *redistest.Trips

	decisions, admitted, units atomic.Int64
	// fallback counts decisions made by the failure mode (Redis did not
	// answer in time, or the breaker was open), fallbackUnits the units
	// they admitted: the failure mode's, not the engine's.
	fallback, fallbackUnits atomic.Int64
	errs                    atomic.Int64
	firstErr                atomic.Pointer[error]
}

// newInstance makes a Limiter with opts on client, whose traffic it counts
// (client must not have been used yet). The Limiter is closed when t ends,
// before the client; closing it sooner is fine (Close is idempotent).
func newInstance(t testing.TB, client redis.UniversalClient, opts ...ratelease.Option) *instance {
	t.Helper()
	wire := &redistest.Trips{}
	client.AddHook(wire)
	l, err := ratelease.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &instance{l: l, wire: wire}
}

// newInstances makes n instances with opts, each on a client of its own
// from newClient.
func newInstances(t testing.TB, n int, newClient func() redis.UniversalClient, opts ...ratelease.Option) []*instance {
	t.Helper()
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = newInstance(t, newClient(), opts...)
	}
	return ins
}

// limiters returns the instances' Limiters.
func limiters(ins []*instance) []*ratelease.Limiter {
	ls := make([]*ratelease.Limiter, len(ins))
	for i, in := range ins {
		ls[i] = in.l
	}
	return ls
}

// closeAll closes the instances' Limiters (giving leased units back).
func closeAll(ins []*instance) {
	for _, in := range ins {
		_ = in.l.Close()
	}
}

// allowN makes one decision of n units on key, counts it, and reports
// whether it admitted them.
func (in *instance) allowN(p *ratelease.Policy, key string, n int) bool {
	res, err := in.l.AllowN(context.Background(), p, key, n)
	if err != nil {
		in.fail(err)
		return false
	}
	return in.count(res, n)
}

// count counts a decision of n units, and reports whether it admitted.
func (in *instance) count(res ratelease.Result, n int) bool {
	in.decisions.Add(1)
	if res.Allowed {
		in.admitted.Add(1)
		in.units.Add(int64(n))
	}
	if res.Source == ratelease.SourceFallback {
		in.fallback.Add(1)
		if res.Allowed {
			in.fallbackUnits.Add(int64(n))
		}
	}
	return res.Allowed
}

// fail counts a call that failed.
func (in *instance) fail(err error) {
	in.errs.Add(1)
	in.firstErr.CompareAndSwap(nil, &err)
}

// check fails t if any call through in failed.
func (in *instance) check(t testing.TB, who string) {
	t.Helper()
	if n := in.errs.Load(); n > 0 {
		t.Errorf("%s: %d decisions failed, the first with: %v", who, n, *in.firstErr.Load())
	}
}

// totals are the counts of several instances added up.
type totals struct {
	decisions, admitted, units int64
	trips, cmds                int64 // Redis round trips and commands, on the wire
	fallback, fallbackUnits    int64
}

// sum adds up the counts of ins.
func sum(ins []*instance) totals {
	var s totals
	for _, in := range ins {
		s.decisions += in.decisions.Load()
		s.admitted += in.admitted.Load()
		s.units += in.units.Load()
		s.trips += in.wire.Trips.Load()
		s.cmds += in.wire.Cmds.Load()
		s.fallback += in.fallback.Load()
		s.fallbackUnits += in.fallbackUnits.Load()
	}
	return s
}

// engineTrips adds up the Redis round trips the instances' Limiters count
// (Stats.RoundTrips: a pipeline to each master counts one).
func engineTrips(ins []*instance) uint64 {
	var n uint64
	for _, in := range ins {
		n += in.l.Stats().RoundTrips
	}
	return n
}

// ratio is a/b, 0 when b is 0.
func ratio[N int64 | uint64 | float64](a, b N) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// redisClock returns a function that reads Redis's clock (TIME) through c,
// in µs since the epoch: the clock every bound is measured on. It reads it
// once before it returns, so that the connection is made and a reading
// later costs one round trip.
func redisClock(t testing.TB, c redis.Cmdable) func() int64 {
	t.Helper()
	now := func() int64 {
		t.Helper()
		tm, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		return tm.UnixMicro()
	}
	now()
	return now
}

// span is a stretch of Redis's clock, in µs since the epoch: read right
// before a load starts and right after it ends, it holds every Redis call
// the load made.
type span struct{ start, end int64 }

// seconds is the span's length.
func (s span) seconds() float64 { return float64(s.end-s.start) / 1e6 }

// A bound is what a limit admits over a span of Redis time, for a
// one-second period.
type bound func(s span) float64

// bucket is a token bucket's Burst + Rate·T: tokens leave the bucket when
// they are leased, and every lease of a run falls within its span, so no
// run admits more, however slow the machine (exact: GCRA's integer debt
// does not drift).
func bucket(rate, burst float64) bound {
	return func(s span) float64 { return burst + rate*s.seconds() }
}

// windows is Rate per one-second window touched by the span: windows start
// on whole seconds of Redis time.
func windows(rate float64) bound {
	return func(s span) float64 { return rate * float64(s.end/1e6-s.start/1e6+1) }
}

// windowsOpenFor is Rate per one-second window that is open for at least
// open µs (less than a window) of the span: one that opened that long
// before the span's end, and that ends that long after its start.
func windowsOpenFor(rate float64, open int64) bound {
	return func(s span) float64 { return rate * float64(max(0, (s.end-open)/1e6-(s.start+open)/1e6+1)) }
}

// rateTimes is Rate·T: what a limit that spreads its units evenly admits.
func rateTimes(rate float64) bound {
	return func(s span) float64 { return rate * s.seconds() }
}

// atMost fails t when got, what a run admitted, is above max, the most
// its bound allows: a bound holds on any machine.
func atMost(t testing.TB, what string, got, max float64) {
	t.Helper()
	if got > max {
		t.Errorf("%s: admitted %.0f > the bound %.0f", what, got, max)
	}
}

// atLeast fails t when got, what a run admitted, is under the fraction
// held of least, what the limit lets a run with demand enough admit. held
// is what the engine reaches on a loaded 2-core CI machine sharing its
// cores with Redis and the load, not what an idle one reaches: how much of
// the machine a run gets moves the figure, and the benchmarks report it.
func atLeast(t *testing.T, what string, got, least, held float64) {
	t.Helper()
	if got < held*least {
		t.Errorf("%s: admitted %.0f, %.3f of %.0f; want at least %.2f", what, got, got/least, least, held)
	}
}
