package tier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// newRegional returns an exact-mode engine of region "r1" on a fresh
// miniredis, with another as its global Redis.
func newRegional(t *testing.T) (e *tier.Engine, regional, global *redistest.Mini, clk *clock.Manual) {
	return newRegionalMode(t, tier.FailLocal)
}

// newRegionalMode is newRegional with the failure mode m.
func newRegionalMode(t *testing.T, m tier.FailureMode) (e *tier.Engine, regional, global *redistest.Mini, clk *clock.Manual) {
	t.Helper()
	regional, global = redistest.StartMini(t), redistest.StartMini(t)
	clk = clock.NewManual(regional.Now())
	e, err := tier.New(tier.Config{Store: remote.NewStore(regional.Client(t), "t"), Clock: clk, Timeout: 300 * time.Millisecond,
		Guard: true, FailureMode: m, Global: remote.NewStore(global.Client(t), "t:world"), GlobalGuard: true, Region: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, regional, global, clk
}

// worldwide returns the pooled policy of a worldwide token bucket of
// rate a second.
func worldwide(t *testing.T, rate int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("w", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: rate, Period: time.Second, Burst: rate}})
	if err != nil {
		t.Fatal(err)
	}
	return p.Pooled()
}

// allowedOnceRefilled is allowed for a key's first decision, which sets
// off its pool's first refill and waits for it only a couple of measured
// round trips (regions.Refill): on a loaded machine the refill can land
// later, and the decision is denied by the empty pool meanwhile (Source
// remote, a short RetryAfter), as designed. The request is then asked
// again, as its caller would after RetryAfter: the refill in flight is
// joined or has landed, so that no global round trip is added.
func allowedOnceRefilled(t *testing.T, e *tier.Engine, p *remote.Policy, key string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d, err := e.Allow(context.Background(), p, key, 1)
		if err == nil && d.Allowed {
			return
		}
		if err != nil || d.Source != tier.SourceRemote || time.Now().After(end) {
			t.Fatalf("Allow(%q): %+v, %v", key, d, err)
		}
	}
}

func allowed(t *testing.T, e *tier.Engine, p *remote.Policy, key string) {
	t.Helper()
	if d, err := e.Allow(context.Background(), p, key, 1); err != nil || !d.Allowed {
		t.Fatalf("Allow(%q): %+v, %v", key, d, err)
	}
}

// What a partition's failure-mode share put in a pool is owed to the
// global key until a refill reaches it, however many pools were refilled
// meanwhile: owed units are not what the tier may forget of a pool.
func TestOwedOutlivesWhatIsKnown(t *testing.T) {
	e, regional, global, clk := newRegional(t)
	p := worldwide(t, 100)
	global.SetError("ERR partitioned")
	allowed(t, e, p, "a") // from the share: half the rate for a second, 50
	global.SetError("")
	tier.KnowPools(e, 1)
	allowed(t, e, p, "b")                     // its refill is known, a's forgotten
	regional.Advance(4100 * time.Millisecond) // the share lapses (a second and the global timeout, 3s)
	clk.Advance(4100 * time.Millisecond)
	allowed(t, e, p, "a")
	if got := e.Stats().UnitsCharged; got != 50 {
		t.Fatalf("UnitsCharged = %d once the global Redis answered a's refill, want the share's 50", got)
	}
}

// With FailClosed a partition gives the region no failure-mode share: it
// admits what its pool holds, then nothing, and owes nothing.
func TestPartitionFailClosedGivesNoShare(t *testing.T) {
	e, _, global, _ := newRegionalMode(t, tier.FailClosed)
	p := worldwide(t, 100)
	global.SetError("ERR partitioned")
	if d, err := e.Allow(context.Background(), p, "k", 1); err != nil || d.Allowed {
		t.Fatalf("FailClosed, partitioned before any refill: %+v, %v; want denied", d, err)
	}
	if s := e.Stats(); s.UnitsPooled != 0 || tier.Owing(e, p, "k") != 0 {
		t.Fatalf("FailClosed: %d units pooled, %d owed; want none", s.UnitsPooled, tier.Owing(e, p, "k"))
	}
}

// A partition's failure-mode share is what the global key gave the region
// lately, as a rate: never more than the worldwide rate, however close
// together the refills it is measured on came (a pool drained at once
// is refilled at once).
func TestPartitionShareIsARate(t *testing.T) {
	e, regional, global, clk := newRegional(t)
	p, err := remote.NewPolicy("w", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 100, Period: time.Second, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	pp := p.Pooled()
	ctx := context.Background()
	allowed(t, e, pp, "k") // the first refill: 35, the rate over the lead
	step := func(d time.Duration) {
		regional.Advance(d)
		clk.Advance(d)
	}
	step(10 * time.Millisecond)
	pooled := e.Stats().UnitsPooled
	if d, err := e.Allow(ctx, pp, "k", 34); err != nil || !d.Allowed {
		t.Fatalf("the rest of the pool: %+v, %v", d, err)
	}
	waitFor(t, func() bool { return e.Stats().UnitsPooled > pooled }) // refilled in the background, 10ms after the first
	step(10 * time.Millisecond)
	global.SetError("ERR partitioned")
	pooled = e.Stats().UnitsPooled
	for e.Stats().UnitsPooled == pooled {
		if d, err := e.Allow(ctx, pp, "k", 1); err != nil {
			t.Fatal(err)
		} else if !d.Allowed {
			time.Sleep(time.Millisecond)
		}
	}
	if got := e.Stats().UnitsPooled - pooled; got > 100 {
		t.Fatalf("the partition's share put %d units in the pool for a second, want at most the worldwide 100", got)
	}
}

// Nor is it lost to a refill denied at the instant of the last: the
// share of a partition after it is a count of units, not garbage.
func TestPartitionShareAfterADenial(t *testing.T) {
	e, regional, global, _ := newRegional(t) // (the engine's clock stands still)
	pp := worldwide(t, 10)
	ctx := context.Background()
	allowed(t, e, pp, "k")                                 // the first refill: 4
	if _, err := e.Charge(ctx, pp, "k", 100); err != nil { // the worldwide key is spent, and owes
		t.Fatal(err)
	}
	if d, err := e.Allow(ctx, pp, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("the rest of the pool: %+v, %v", d, err)
	}
	waitFor(t, func() bool { return e.Stats().GlobalRoundTrips >= 3 }) // refill, charge, and the denied refill
	global.SetError("ERR partitioned")
	regional.Advance(20 * time.Second) // past the denial (the debt's 10s) in the pool's time
	pooled := e.Stats().UnitsPooled
	for range 100 {
		if d, _ := e.Allow(ctx, pp, "k", 1); d.Allowed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got := e.Stats().UnitsPooled - pooled; got > 10 {
		t.Fatalf("the partition's share put %d units in the pool, want at most the worldwide 10", int64(got))
	}
}

// What the failure mode admitted of a worldwide key while the region's
// Redis was down is charged to the global key once it is back, as a
// partition's share is: the pool holds only what the global key gave it,
// and charging it there would take nothing from a pool never refilled.
func TestRegionalOutageIsChargedWorldwide(t *testing.T) {
	e, regional, _, clk := newRegionalMode(t, tier.FailLocal)
	pp := worldwide(t, 10)
	ctx := context.Background()
	regional.Close()
	for i := range 6 { // 1 failure per call: the breaker opens at 5
		if d, err := e.Allow(ctx, pp, "k", 1); err != nil || !d.Allowed || d.Source != tier.SourceFallback {
			t.Fatalf("request %d in the outage: %+v, %v", i, d, err)
		}
	}
	if err := regional.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	allowed(t, e, pp, "other") // the breaker closes: the outage is charged
	waitFor(t, func() bool { return tier.Owing(e, pp, "k") == 6 })
	allowed(t, e, pp, "k") // k's refill
	if got := e.Stats().UnitsCharged; got != 6 {
		t.Fatalf("UnitsCharged = %d after k's refill, want the 6 the outage admitted", got)
	}
}

// Close does not wait for a refill on its way to the global Redis (its
// calls have ten timeouts; Close, about one): it ends the refill's claim,
// so that the region's other instances refill at once rather than after
// the claim's hold, and the refill's grant, landing after Close, is lost
// (docs/regions.md): the engine makes no regional call once Close has
// returned.
func TestCloseEndsItsRefills(t *testing.T) {
	regional, global := redistest.StartMini(t), redistest.StartMini(t)
	px := redistest.NewProxy(t, global.Addr())
	gc := redis.NewClient(&redis.Options{Addr: px.Addr})
	t.Cleanup(func() { _ = gc.Close() })
	cfg := tier.Config{Store: remote.NewStore(regional.Client(t), "t"), Clock: clock.NewManual(regional.Now()),
		Timeout: 50 * time.Millisecond, Guard: true, FailureMode: tier.FailClosed,
		Global: remote.NewStore(gc, "t:world"), GlobalGuard: true, Region: "r1"}
	e, err := tier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pp := worldwide(t, 100)
	ctx := context.Background()
	allowed(t, e, pp, "k") // the first refill
	px.SetDelay(300 * time.Millisecond)
	for {
		d, err := e.Allow(ctx, pp, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			break // the pool ran dry: its refill is on its way
		}
	}
	_ = e.Close()
	closed := e.Stats()
	px.SetDelay(0)
	// Another instance of the region refills at once: the claim is gone.
	other, err := tier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	allowed(t, other, pp, "k")
	time.Sleep(400 * time.Millisecond) // the first refill's grant lands
	if s := e.Stats(); s.RoundTrips != closed.RoundTrips {
		t.Fatalf("regional round trips after Close returned: %d then %d", closed.RoundTrips, s.RoundTrips)
	}
}

// A caller that leaves while its refill's claim is on its way does not
// leave the claim behind: the pool's next decision refills it, rather
// than wait the claim's hold (two global timeouts) for a deposit that
// never comes.
func TestClaimOutlivesItsCaller(t *testing.T) {
	regional, global := redistest.StartMini(t), redistest.StartMini(t)
	px := redistest.NewProxy(t, regional.Addr())
	rc := redis.NewClient(&redis.Options{Addr: px.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	e, err := tier.New(tier.Config{Store: remote.NewStore(rc, "t"), Clock: clock.NewManual(regional.Now()),
		Timeout: time.Second, Guard: true, FailureMode: tier.FailClosed,
		Global: remote.NewStore(global.Client(t), "t:world"), GlobalGuard: true, Region: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	pp := worldwide(t, 100)
	allowed(t, e, pp, "warm") // the scripts are loaded
	px.SetDelay(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond) // past the decision, within the claim
	defer cancel()
	if d, _ := e.Allow(ctx, pp, "k", 1); d.Allowed {
		t.Fatalf("a caller gone before its refill: %+v", d)
	}
	px.SetDelay(0)
	regional.Advance(200 * time.Millisecond) // past the claim's expected landing, well within its hold (20s)
	allowed(t, e, pp, "k")
}

// A request for more than a refill's usual size is admitted once the
// worldwide key has room for it, as it is from a policy of the region
// alone: a pool that holds less than it asks, however many, is refilled.
func TestLargeRequestIsRefilledFor(t *testing.T) {
	e, regional, _, clk := newRegional(t)
	pp := worldwide(t, 100)
	ctx := context.Background()
	for range 20 {
		d, err := e.Allow(ctx, pp, "k", 50)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			return
		}
		regional.Advance(500 * time.Millisecond)
		clk.Advance(500 * time.Millisecond)
	}
	t.Fatal("50 of a worldwide 100/s (burst 100) key: denied for 10s")
}

// A background refill asked for by a decision that raced Close starts
// only if Close has not: none begins once Close has waited for them.
func TestNoRefillAfterClose(t *testing.T) {
	e, _, _, _ := newRegional(t)
	pp := worldwide(t, 100)
	allowed(t, e, pp, "k")
	_ = e.Close()
	closed := e.Stats()
	tier.RefillPastCheck(e, pp, "k")
	time.Sleep(50 * time.Millisecond)
	if s := e.Stats(); s.RoundTrips != closed.RoundTrips {
		t.Fatalf("a refill began after Close: %d round trips, then %d", closed.RoundTrips, s.RoundTrips)
	}
}

// A region's failure-mode share is the region's, not each instance's: its
// instances taking turns at the refills of a partitioned pool give it the
// share over the partition, a second and the global timeout, as one
// instance refilling alone does (docs/regions.md, "Partitions").
func TestPartitionShareIsTheRegions(t *testing.T) {
	regional, global := redistest.StartMini(t), redistest.StartMini(t)
	var es []*tier.Engine
	var clks []*clock.Manual
	for range 3 {
		clk := clock.NewManual(regional.Now())
		e, err := tier.New(tier.Config{Store: remote.NewStore(regional.Client(t), "t"), Clock: clk, Timeout: 300 * time.Millisecond,
			Guard: true, FailureMode: tier.FailLocal, Global: remote.NewStore(global.Client(t), "t:world"), GlobalGuard: true, Region: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		es, clks = append(es, e), append(clks, clk)
	}
	pp := worldwide(t, 100) // the share: half the rate, 50/s
	ctx := context.Background()
	global.SetError("ERR partitioned")
	const steps = 12
	admitted := 0
	for i := range steps {
		e := es[i%len(es)] // this step's refills are e's
		for range 1000 {
			d, err := e.Allow(ctx, pp, "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
			admitted++
		}
		regional.Advance(time.Second + time.Millisecond)
		for _, c := range clks {
			c.Advance(time.Second + time.Millisecond)
		}
	}
	// The partition lasts steps seconds; the share may run a second and
	// the global timeout (3s) beyond it.
	if bound := 50 * (steps + 1 + 3); admitted > bound {
		t.Fatalf("three instances admitted %d from the share over a %ds partition, want at most %d", admitted, steps, bound)
	}
}

// A window's pool wakes to refill as the next window opens, but only while
// its key is in use: a key used once (per-IP limits under a crawl) stops
// crossing to the global Redis once its region's demand has lapsed (a
// couple of seconds), not window after window for ever.
func TestUnusedPoolIsNotRefilledEachWindow(t *testing.T) {
	e, regional, global, clk := newRegional(t)
	pp := windowPolicy(t)
	allowed(t, e, pp, "once")
	step := stepper(regional, global, clk)
	step(25) // the region's demand lapses (it counts the last two seconds)
	before := e.Stats().GlobalRoundTrips
	step(10)
	if n := e.Stats().GlobalRoundTrips - before; n > 1 {
		t.Fatalf("%d global round trips over 10 windows of a key nobody used for 2.5s, want none", n)
	}
}

// Keys used once (a per-IP limit under a crawl) cost a global round trip
// each, the refill their one decision set off: none after it, though its
// region's demand still counts that decision, neither as the decision
// leaves the pool low nor as the next windows open: nothing more was
// taken from what the refill deposited.
func TestKeyUsedOnceCostsOneGlobalRoundTrip(t *testing.T) {
	e, regional, global, clk := newRegional(t)
	pp := windowPolicy(t)
	const keys = 20
	for i := range keys {
		allowedOnceRefilled(t, e, pp, fmt.Sprint("ip", i))
	}
	stepper(regional, global, clk)(3)
	if n := e.Stats().GlobalRoundTrips; n != keys {
		t.Fatalf("%d global round trips for %d keys used once each, want one each", n, keys)
	}
}

// windowPolicy is the pooled policy of a worldwide fixed window of 10 a
// 100ms.
func windowPolicy(t *testing.T) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("w", []remote.Limit{{Algorithm: remote.FixedWindow, Rate: 10, Burst: 10, Period: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return p.Pooled()
}

// stepper returns a func that moves the clocks n windows of 100ms on, each
// waiting for the window's wake, which fires on the wall clock.
func stepper(regional, global *redistest.Mini, clk *clock.Manual) func(n int) {
	return func(n int) {
		for range n {
			regional.Advance(100 * time.Millisecond)
			global.Advance(100 * time.Millisecond)
			clk.Advance(100 * time.Millisecond)
			time.Sleep(110 * time.Millisecond)
		}
	}
}
