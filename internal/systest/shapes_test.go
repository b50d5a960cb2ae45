package systest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// The demand-shape matrix: lease mode and exact mode on the same demand,
// cell by cell (a shape of demand, a number of instances, an algorithm),
// each instance a Limiter with a Redis client of its own, one real Redis.
// Per cell it reports what lease mode admitted over what exact mode
// admitted and over the bound, the Redis round trips and commands per
// decision of each, the p99 latency of a decision, and the worst
// instance's share of its max-min fair share of what was admitted.
//
// Every cell asserts, in lease and exact mode alike, that what was
// admitted stays within the algorithm's bound over the run's span of
// Redis time (per key), whatever the machine; and what lease mode must
// reach against exact mode on a loaded 2-core machine: 0.8 of its
// admitted units, round trips and commands per decision at most 1.1x its,
// every instance at least half its fair share (an idle machine reaches
// 0.97, no more than exact's, and 0.9: BenchmarkShapeMatrix reports them).
//
// The test runs a covering subset of cells, a short run each; every cell,
// the figures of docs/shapes.md, is BenchmarkShapeMatrix.
// RATELEASE_SHAPES_DEBUG=1 logs each instance's figures, and each Wait
// that gave up long before a run's end.
func TestShapeMatrix(t *testing.T) {
	srv := redistest.Start(t)
	clockOf := redisClock(t, srv.Client(t))
	// Runs start 20ms into a second of Redis time and end 20ms before
	// one: whole windows only, so that a window's first moments, when
	// whoever asks first takes its room, do not weigh more than the rest.
	const runFor = 2*time.Second - 40*time.Millisecond
	for _, c := range shortCells() {
		t.Run(c.String(), func(t *testing.T) {
			lease := runCell(t, srv.Addr, clockOf, c, runFor, false)
			exact := runCell(t, srv.Addr, clockOf, c, runFor, true)
			row := shapeRow{cell: c, lease: lease, exact: exact}
			t.Logf("%s", row.line())
			row.check(t)
		})
	}
}

// The limit every cell runs under: the flood limit, 3000 units a
// second with a burst of 300 for the bucket (windows use Rate).
const shapeRate, shapeBurst = 3000, 300

// A shapeCell is one cell of the matrix.
type shapeCell struct {
	shape     shape
	instances int
	alg       ratelease.Algorithm
}

func (c shapeCell) String() string {
	return fmt.Sprintf("%s/%dx/%s", c.shape.name, c.instances, c.alg)
}

// A shape is a kind of demand. Its goroutines (per instance) each call
// decide, one decision at a time, as its kind says.
type shape struct {
	name string
	// kind: paced (evenly spaced at rate), poisson (exponential gaps at
	// rate), flood (back to back), wait (Wait back to back).
	kind string
	// rate is the demand offered by all instances together, in multiples
	// of the limit's rate, at time x (0..1) of the run, sec seconds into
	// it; nil for a flood.
	rate func(x, sec float64) float64
	// rateOf, when set, is instance i's own rate instead, in the same
	// units: what all instances would offer together were each at i's.
	rateOf func(i int, x, sec float64) float64
	// n is the units of each decision, as a fraction of the burst (0: 1).
	n float64
	// keys: 0 is one key; -1 a new key every decision; k > 0 keys drawn
	// by a Zipf law over k.
	keys int
	// goroutines per instance for a flood or wait; a paced or poisson
	// shape has as many as its peak rate needs (see shapeGoroutines).
	goroutines int
	peak       float64 // the most of rate, in multiples of the limit's
}

// shapeGoroutines is how many goroutines each of c's instances runs: a
// flood's or wait's own number; for demand at a rate, one per 750/s of its
// peak (goroutinesFor), at least two, so that exact mode, a round trip per
// decision, keeps up with the same demand as lease mode.
func shapeGoroutines(c shapeCell) int {
	if c.shape.kind == "flood" || c.shape.kind == "wait" {
		return c.shape.goroutines
	}
	return max(2, int(math.Ceil(float64(goroutinesFor(c.shape.peak*shapeRate))/float64(c.instances))))
}

func constant(r float64) func(float64, float64) float64 {
	return func(float64, float64) float64 { return r }
}

var shapes = []shape{
	{name: "paced", kind: "paced", rate: constant(2), peak: 2},
	{name: "flood", kind: "flood", goroutines: 2},
	{name: "flood-n", kind: "flood", n: 1.0 / 16, goroutines: 2},
	{name: "wait", kind: "wait", goroutines: 2},
	// 10x the limit for a second, then nothing for a second, in turn, in
	// step with the windows of Redis's clock (a run starts 20ms into one).
	{name: "on-off", kind: "paced", rate: func(_, sec float64) float64 { return 10 * float64(1-int(sec+0.02)%2) }, peak: 10},
	{name: "poisson-0.5", kind: "poisson", rate: constant(0.5), peak: 0.5},
	{name: "poisson-1", kind: "poisson", rate: constant(1), peak: 1},
	{name: "poisson-3", kind: "poisson", rate: constant(3), peak: 3},
	// 0.1x up to 5x at mid-run, and down again.
	{name: "ramp", kind: "paced", rate: func(x, _ float64) float64 { return 0.1 + 4.9*(1-math.Abs(2*x-1)) }, peak: 5},
	{name: "single-use", kind: "paced", rate: constant(1), keys: -1, peak: 1},
	{name: "zipf", kind: "paced", rate: constant(2), keys: 10_000, peak: 2},
	// Each instance in turn idle and at ten times its share, for spans of
	// 50 to 400ms of its own: units leased to an instance whose demand
	// just fell wait there while another asks.
	{name: "shifting", kind: "paced", rateOf: shifting, peak: 10},
}

// shiftSpans are the ends, in seconds, of each instance's spans of the
// shifting shape, drawn once for a minute (seeded by the instance, so that
// both modes meet the same demand); the first span is on for even
// instances, off for odd ones.
var shiftSpans = func() [][]float64 {
	spans := make([][]float64, 16)
	for i := range spans {
		rng := rand.New(rand.NewPCG(uint64(i)+1, 0x5eed))
		for t := 0.0; t < 60; {
			t += 0.05 + 0.35*rng.Float64()
			spans[i] = append(spans[i], t)
		}
	}
	return spans
}()

// shifting is instance i's rate in the shifting shape, sec seconds into a
// run: 10 in its on spans, 0 in its off spans.
func shifting(i int, _, sec float64) float64 {
	ends := shiftSpans[i%len(shiftSpans)]
	span, _ := slices.BinarySearch(ends, sec)
	if (span+i)%2 == 0 {
		return 10
	}
	return 0
}

var (
	shapeInstances  = []int{1, 2, 6, 16}
	shapeAlgorithms = []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowCounter}
)

// fullCells is every cell: each shape, instance count and algorithm.
func fullCells() []shapeCell {
	var cells []shapeCell
	for _, s := range shapes {
		for _, n := range shapeInstances {
			for _, a := range shapeAlgorithms {
				cells = append(cells, shapeCell{s, n, a})
			}
		}
	}
	return cells
}

// shortCells covers every shape, every instance count and every algorithm
// at least once, the flood with all three algorithms at six instances
// (where the engine has been weakest), in some 20 cells.
func shortCells() []shapeCell {
	var cells []shapeCell
	for i, s := range shapes {
		cells = append(cells, shapeCell{s, shapeInstances[i%len(shapeInstances)], shapeAlgorithms[i%len(shapeAlgorithms)]})
	}
	flood := shapes[1]
	for _, a := range shapeAlgorithms {
		cells = append(cells, shapeCell{flood, 6, a})
	}
	return append(cells, shapeCell{flood, 16, ratelease.TokenBucket}, shapeCell{shapes[3], 6, ratelease.TokenBucket})
}

// cellResult is what one mode did in a cell.
type cellResult struct {
	span                span
	decisions, admitted int64 // units admitted
	trips, cmds         int64
	fallbackUnits       int64
	p99                 time.Duration
	// worst is the least, over the instances, of what one admitted over
	// its max-min fair share of all that was admitted.
	worst float64
	// most is the most the bound allows any key over the span, over
	// (most admitted to one key): at least 1.
	bound, keyMost float64
}

// runCell runs c's demand for d in one mode on fresh instances.
func runCell(t testing.TB, addr string, clockOf func() int64, c shapeCell, d time.Duration, exact bool) cellResult {
	t.Helper()
	opts := []ratelease.Option{ratelease.WithRedisTimeout(2 * time.Second)}
	if exact {
		opts = append(opts, ratelease.WithExact())
	}
	l := ratelease.Limit{Rate: shapeRate, Period: time.Second, Algorithm: c.alg}
	if c.alg == ratelease.TokenBucket {
		l.Burst = shapeBurst
	}
	capacity := l.Burst
	if capacity == 0 {
		capacity = l.Rate
	}
	n := max(1, int(c.shape.n*float64(capacity)))
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	p := policy(t, "shape-"+run, l)
	ins := newInstances(t, c.instances, clientsTo(t, addr), opts...)
	// Each instance connects before the clock starts.
	for _, in := range ins {
		if err := in.l.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The server has the policy's function library before the clock
	// starts, as a server in service does: the first call of all loads
	// it, once per server, and would count in whichever mode ran first.
	warm, err := ratelease.New(dial(t, addr), ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Allow(context.Background(), p, "warm-"+run); err != nil {
		t.Fatal(err)
	}
	_ = warm.Close()
	keyOf, perKey := shapeKeys(c.shape.keys, run)
	var lat latencies
	// Both modes start 20ms into a second of Redis time, so that their
	// runs touch the same windows.
	if now := clockOf(); now%1e6 != 20_000 {
		time.Sleep(time.Duration((1e6-now%1e6+20_000)%1e6) * time.Microsecond)
	}
	// What each mode sends per decision counts from here: the connections,
	// the Ping and the warm-up above are the same in both and would weigh
	// on a cell of a few thousand decisions by a command or two.
	for _, in := range ins {
		in.wire.Trips.Store(0)
		in.wire.Cmds.Store(0)
	}
	s := span{start: clockOf()}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(d))
	defer cancel()
	goroutines := shapeGoroutines(c)
	var wg sync.WaitGroup
	for i, in := range ins {
		for g := range goroutines {
			wg.Go(func() {
				seed := uint64(i*1000 + g)
				rng := rand.New(rand.NewPCG(seed, uint64(len(run))))
				var mine []time.Duration
				done := false // a Wait gave up: its deadline comes before the units
				decide := func() {
					if done {
						return
					}
					k := keyOf(rng)
					t0 := time.Now()
					ok := false
					if c.shape.kind == "wait" {
						err := in.l.WaitN(ctx, p, k, n)
						if errors.Is(err, context.DeadlineExceeded) {
							done = true
							if left := time.Until(start.Add(d)); left > 50*time.Millisecond && os.Getenv("RATELEASE_SHAPES_DEBUG") != "" {
								t.Logf("exact=%v instance %d: a Wait gave up %v before the end", exact, i, left)
							}
							return
						}
						if err != nil {
							in.fail(err)
						}
						ok = err == nil
						in.count(ratelease.Result{Allowed: ok}, n)
					} else {
						ok = in.allowN(p, k, n)
					}
					if el := time.Since(t0); len(mine) < 1<<16 && (len(mine) < 256 || rng.IntN(16) == 0) {
						mine = append(mine, el)
					}
					if ok && perKey != nil {
						perKey.add(k, int64(n))
					}
				}
				drive(ctx, start, d, c, i, g, goroutines, rng, decide, func() bool { return done })
				lat.add(mine)
			})
		}
	}
	wg.Wait()
	s.end = clockOf()
	tot := sum(ins)
	if os.Getenv("RATELEASE_SHAPES_DEBUG") != "" {
		for i, in := range ins {
			st := in.l.Stats()
			t.Logf("exact=%v instance %d: decisions %d admitted units %d; leases %d units leased %d held %d refunded %d expired %d; decided local %d remote %d cached %d allowed %d",
				exact, i, in.decisions.Load(), in.units.Load(), st.Leases, st.UnitsLeased, st.UnitsHeld, st.UnitsRefunded, st.UnitsExpired, st.Local, st.Remote, st.Cached, st.Allowed)
		}
	}
	closeAll(ins)
	for i, in := range ins {
		in.check(t, fmt.Sprintf("instance %d", i))
	}
	r := cellResult{span: s, decisions: tot.decisions, admitted: tot.units, trips: tot.trips, cmds: tot.cmds,
		fallbackUnits: tot.fallbackUnits, p99: lat.quantile(0.99)}
	r.worst = worstShare(ins, n, c.shape.kind == "wait")
	most := shapeBound(c.alg, l)(s)
	r.bound = most
	if perKey != nil {
		r.keyMost = float64(perKey.most())
	} else {
		r.keyMost = float64(tot.units)
	}
	return r
}

// drive makes goroutine g of instance i decide as c's shape says, until ctx
// ends.
func drive(ctx context.Context, start time.Time, d time.Duration, c shapeCell, i, g, goroutines int, rng *rand.Rand, decide func(), stop func() bool) {
	if c.shape.kind == "flood" || c.shape.kind == "wait" {
		for ctx.Err() == nil && !stop() {
			decide()
		}
		return
	}
	// Each goroutine offers its part of the rate: the whole over every
	// goroutine of every instance.
	parts := float64(c.instances * goroutines)
	at := time.Duration(float64(i*goroutines+g) / parts * 1e6) // spread the starts over a ms
	// gap is the time to the next decision at time at, for the rate then.
	gap := func() (time.Duration, bool) {
		x, sec := float64(at)/float64(d), at.Seconds()
		var r float64
		if c.shape.rateOf != nil {
			r = c.shape.rateOf(i, x, sec)
		} else {
			r = c.shape.rate(x, sec)
		}
		r *= shapeRate / parts // per second
		if r <= 0 {
			return d / 100, false // off: look again in a moment
		}
		g := 1 / r
		if c.shape.kind == "poisson" {
			g = rng.ExpFloat64() / r
		}
		return time.Duration(g * 1e9), true
	}
	for ctx.Err() == nil && at < d {
		if w := time.Until(start.Add(at)); w > 0 {
			time.Sleep(max(w, paceTick))
		}
		// Every decision that has come due is made now (so the rate holds
		// when a call is slow or a sleep long), but one more than lateBy
		// late is dropped: a mode that cannot keep up must not carry its
		// demand into a later window.
		for now := time.Since(start); at <= now && at < d && ctx.Err() == nil; {
			g, on := gap()
			if on && now-at <= lateBy {
				decide()
			}
			at += g
		}
	}
}

// lateBy is how late a paced decision may be made (see drive).
const lateBy = 10 * time.Millisecond

// shapeKeys returns how a goroutine picks its key for shape keys k (see
// shape.keys), and a per-key tally of admitted units where more than one
// key is used (nil for one key: the totals are that key's).
func shapeKeys(k int, run string) (func(*rand.Rand) string, *tally) {
	switch {
	case k == 0:
		return func(*rand.Rand) string { return "k" }, nil
	case k < 0:
		var next atomic.Int64
		return func(*rand.Rand) string { return "once-" + strconv.FormatInt(next.Add(1), 10) }, &tally{}
	default:
		names := make([]string, k)
		for j := range names {
			names[j] = "z" + strconv.Itoa(j)
		}
		// Zipf with s = 1.1 over k keys: the first key takes about a
		// tenth of the demand, the tail a unit now and then.
		cdf := make([]float64, k)
		var total float64
		for j := range cdf {
			total += 1 / math.Pow(float64(j+1), 1.1)
			cdf[j] = total
		}
		return func(rng *rand.Rand) string {
			u := rng.Float64() * total
			j, _ := slices.BinarySearch(cdf, u)
			return names[min(j, k-1)]
		}, &tally{}
	}
}

// tally counts units by key.
type tally struct{ m sync.Map }

func (tl *tally) add(k string, n int64) {
	v, _ := tl.m.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

// most is the most units any key had.
func (tl *tally) most() int64 {
	var m int64
	tl.m.Range(func(_, v any) bool { m = max(m, v.(*atomic.Int64).Load()); return true })
	return m
}

// shapeBound is the most l admits on one key over a span.
func shapeBound(alg ratelease.Algorithm, l ratelease.Limit) bound {
	if alg == ratelease.TokenBucket {
		return bucket(float64(l.Rate), float64(l.Burst))
	}
	return windows(float64(l.Rate))
}

// worstShare is the least, over ins, of what an instance admitted over its
// max-min fair share of all that was admitted (the demand each offered:
// its decisions of n units; a waiter's is unbounded).
func worstShare(ins []*instance, n int, wait bool) float64 {
	offered := make([]float64, len(ins))
	var all float64
	for i, in := range ins {
		offered[i] = float64(in.decisions.Load() * int64(n))
		if wait {
			offered[i] = math.Inf(1)
		}
		all += float64(in.units.Load())
	}
	if all == 0 {
		return 1
	}
	fair := redistest.WaterFill(all, offered)
	worst := math.Inf(1)
	for i, in := range ins {
		if fair[i] > 0 {
			worst = min(worst, float64(in.units.Load())/fair[i])
		}
	}
	return worst
}

// latencies collects samples of decision latency from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(q*float64(len(l.d))))]
}

// shapeRow is a cell's two results.
type shapeRow struct {
	cell         shapeCell
	lease, exact cellResult
}

func (r shapeRow) vsExact() float64 {
	return ratio(float64(r.lease.admitted), float64(r.exact.admitted))
}

func (r shapeRow) line() string {
	return fmt.Sprintf("lease/exact %.3f; of the bound: lease %.3f exact %.3f; round trips/decision lease %.4f exact %.4f; commands/decision lease %.4f exact %.4f; p99 lease %v exact %v; worst fair share lease %.2f exact %.2f; admitted lease %d exact %d, decisions lease %d exact %d",
		r.vsExact(), r.lease.keyMost/r.lease.bound, r.exact.keyMost/r.exact.bound,
		ratio(float64(r.lease.trips), float64(r.lease.decisions)), ratio(float64(r.exact.trips), float64(r.exact.decisions)),
		ratio(float64(r.lease.cmds), float64(r.lease.decisions)), ratio(float64(r.exact.cmds), float64(r.exact.decisions)),
		r.lease.p99.Round(time.Microsecond), r.exact.p99.Round(time.Microsecond), r.lease.worst, r.exact.worst,
		r.lease.admitted, r.exact.admitted, r.lease.decisions, r.exact.decisions)
}

// check asserts the bound in both modes, and what lease mode must reach
// against exact mode on a loaded 2-core machine.
func (r shapeRow) check(t *testing.T) {
	t.Helper()
	for _, m := range []struct {
		name string
		res  cellResult
	}{{"lease", r.lease}, {"exact", r.exact}} {
		atMost(t, m.name+" mode, the most admitted to one key", m.res.keyMost, m.res.bound+float64(m.res.fallbackUnits))
	}
	if r.vsExact() < 0.8 {
		t.Errorf("lease mode admitted %.3f of exact mode's (%d of %d); want at least 0.8", r.vsExact(), r.lease.admitted, r.exact.admitted)
	}
	lt, et := ratio(float64(r.lease.trips), float64(r.lease.decisions)), ratio(float64(r.exact.trips), float64(r.exact.decisions))
	lc, ec := ratio(float64(r.lease.cmds), float64(r.lease.decisions)), ratio(float64(r.exact.cmds), float64(r.exact.decisions))
	if lt > 1.1*et || lc > 1.1*ec {
		t.Errorf("lease mode: %.4f round trips and %.4f commands per decision, exact mode %.4f and %.4f: want at most 1.1x exact's", lt, lc, et, ec)
	}
	// (Not for Wait on a window: in the last window, a waiter denied until
	// its end gives up at once, its deadline coming first, and which
	// waiters those are is chance, not a share.)
	if r.exact.worst >= 0.9 && !(r.cell.shape.kind == "wait" && r.cell.alg != ratelease.TokenBucket) {
		// Half a share: a cell lasts a few seconds, and a window's room
		// comes a window at a time, so chance (which member's lease comes
		// back first as a window opens, or its parts are released) moves a
		// share by more than a bucket's.
		if r.lease.worst < 0.5 {
			t.Errorf("lease mode: the worst instance got %.2f of its max-min fair share; want at least 0.5", r.lease.worst)
		}
	}
}
