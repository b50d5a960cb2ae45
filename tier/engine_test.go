package tier_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
	"github.com/ratelease/ratelease/tier"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newEngine returns an engine on a fresh miniredis: leasing leases of
// exactly lease units, or exact when lease is 0.
func newEngine(t *testing.T, lease int64) (*tier.Engine, *redistest.Mini) {
	t.Helper()
	e, mr, _ := newEngineClock(t, lease)
	return e, mr
}

// newEngineClock is newEngine, with the engine's clock.
func newEngineClock(t *testing.T, lease int64) (*tier.Engine, *redistest.Mini, *clock.Manual) {
	t.Helper()
	mr := redistest.StartMini(t)
	store := remote.NewStore(mr.Client(t), "t")
	clk := clock.NewManual(mr.Now())
	var lc *leasesync.Config
	if lease > 0 {
		lc = &leasesync.Config{Min: lease, Max: lease, Refresh: time.Second, TTL: time.Hour, LowWater: 0.01, MaxKeys: 10}
	}
	e, err := tier.New(tier.Config{Store: store, Clock: clk, Timeout: 300 * time.Millisecond, Guard: true, Lease: lc, FailureMode: tier.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, mr, clk
}

func perHour(t *testing.T, n int64) *remote.Policy {
	t.Helper()
	// Named by its rate: two policies of one name with other limits are
	// not used side by side (see TestRedefinition).
	p, err := remote.NewPolicy(fmt.Sprintf("p%d", n), []remote.Limit{{Algorithm: remote.TokenBucket, Rate: n, Period: time.Hour, Burst: n}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The order of a leased decision: a lease (Remote) first, then the
// allowance (Local), and once Redis has denied, the cached denial (Cached).
// Stats counts each by source.
func TestDecisionSources(t *testing.T) {
	e, _ := newEngine(t, 4)
	p := perHour(t, 8)
	ctx := context.Background()
	count := map[tier.Source]int{}
	var last tier.Source
	for i := 0; i < 10; i++ {
		d, err := e.Allow(ctx, p, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 8) || (i == 0 && d.Source != tier.SourceRemote) {
			t.Fatalf("request %d: %+v", i, d)
		}
		count[d.Source]++
		last = d.Source
	}
	// Of the 8 units, 2 leases of 4, each bringing 3 for later requests
	// (the second may be a prefetch, made in the background before the
	// miss); once Redis has denied, the rest is Cached.
	if count[tier.SourceLocal] < 6 || last != tier.SourceCached {
		t.Fatalf("sources %v, last %v", count, last)
	}
	s := e.Stats()
	if s.Allowed != 8 || s.Denied != 2 || s.Local != uint64(count[tier.SourceLocal]) || s.Remote != uint64(count[tier.SourceRemote]) ||
		s.Cached != uint64(count[tier.SourceCached]) || s.UnitsLeased != 8 {
		t.Fatalf("Stats %+v, sources %v", s, count)
	}
}

// The local table of a policy is found by its slot in the engine; a
// policy past the engine's slots is found in a map: either leases once and
// then hits. Slots are the engine's own: policies other code made, or
// another engine's slots, change nothing, and a policy used by two
// engines is found by each.
func TestTablesBySlot(t *testing.T) {
	for range 1100 { // made by other code, never used here
		perHour(t, 8)
	}
	e, _ := newEngine(t, 4)
	other, _ := newEngine(t, 4)
	ctx := context.Background()
	first := perHour(t, 1000)
	allow := func(e *tier.Engine, p *remote.Policy, who string) {
		t.Helper()
		for i, want := range []tier.Source{tier.SourceRemote, tier.SourceLocal, tier.SourceLocal, tier.SourceLocal} {
			if d, err := e.Allow(ctx, p, "k", 1); err != nil || d.Source != want {
				t.Fatalf("%s, request %d: %+v, %v; want %v", who, i, d, err, want)
			}
		}
	}
	allow(e, first, "the engine's first policy")
	if i, ok := tier.SlotOf(e, first); !ok || i != 0 {
		t.Fatalf("the engine's first policy, made after 1100 others, has slot %d (%v); want 0", i, ok)
	}
	tier.FillSlots(e)
	last := perHour(t, 8)
	allow(e, last, "a policy past the slots")
	if _, ok := tier.SlotOf(e, last); ok {
		t.Fatal("a policy past the engine's slots was given one")
	}
	allow(other, last, "another engine's first policy")
	if i, ok := tier.SlotOf(other, last); !ok || i != 0 {
		t.Fatalf("another engine's first policy has slot %d (%v); want 0", i, ok)
	}
	// Back and forth: each engine finds its own state of first, whose
	// cached slot the other engine takes over in turn.
	allow(other, first, "first, in the other engine")
	before := e.Stats().Local + other.Stats().Local
	for i := range 3 {
		for _, x := range []*tier.Engine{e, other} {
			if d, err := x.Allow(ctx, first, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("round %d: %+v, %v; want admitted", i, d, err)
			}
		}
	}
	if hits := e.Stats().Local + other.Stats().Local - before; hits < 4 {
		t.Fatalf("%d of 6 decisions back and forth were local hits; want most", hits)
	}
}

// A cached denial of n units holds for n or more, not for fewer: those may
// still fit.
func TestCachedDenialIsPerSize(t *testing.T) {
	e, _ := newEngine(t, 1)
	p := perHour(t, 12)
	ctx := context.Background()
	for _, c := range []struct {
		n      int64
		allow  bool
		source tier.Source
	}{{5, true, tier.SourceRemote}, {5, true, tier.SourceRemote}, {5, false, tier.SourceRemote}, {6, false, tier.SourceCached}, {2, true, tier.SourceRemote}} {
		d, err := e.Allow(ctx, p, "k", c.n)
		if err != nil || d.Allowed != c.allow || d.Source != c.source {
			t.Fatalf("Allow(%d) = %+v, %v; want allowed=%v from %v", c.n, d, err, c.allow, c.source)
		}
	}
}

func TestClosed(t *testing.T) {
	for _, lease := range []int64{0, 10} {
		e, _ := newEngine(t, lease)
		p := perHour(t, 10)
		if _, err := e.Allow(context.Background(), p, "k", 1); err != nil {
			t.Fatal(err)
		}
		_ = e.Close()
		if _, err := e.Allow(context.Background(), p, "k", 1); !errors.Is(err, door.ErrClosed) {
			t.Fatalf("lease %d: Allow after Close: %v", lease, err)
		}
		if err := e.Wait(context.Background(), p, "k", 1); !errors.Is(err, door.ErrClosed) {
			t.Fatalf("lease %d: Wait after Close: %v", lease, err)
		}
	}
}

// With Redis gone, a miss is an error wrapping ErrUnavailable; the caller's
// own context errors come back unwrapped. Units already leased still serve.
func TestRedisGone(t *testing.T) {
	for _, lease := range []int64{0, 10} {
		e, mr := newEngine(t, lease)
		p := perHour(t, 100)
		if _, err := e.Allow(context.Background(), p, "held", 1); err != nil {
			t.Fatal(err)
		}
		mr.Close()
		if d, err := e.Allow(context.Background(), p, "held", 1); lease > 0 && (err != nil || d.Source != tier.SourceLocal) {
			t.Fatalf("leased units with Redis gone: %+v, %v", d, err)
		}
		if _, err := e.Allow(context.Background(), p, "new", 1); !errors.Is(err, door.ErrUnavailable) {
			t.Fatalf("lease %d: %v, want door.ErrUnavailable", lease, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.Allow(ctx, p, "new", 1); err != context.Canceled {
			t.Fatalf("lease %d: cancelled context: %v, want context.Canceled unwrapped", lease, err)
		}
	}
}

// newDegrading returns a leasing engine in mode m on a miniredis, with a
// manual clock, counting every breaker state it reports.
func newDegrading(t *testing.T, m tier.FailureMode, instances int64) (*tier.Engine, *redistest.Mini, *clock.Manual, *[]door.BreakerState) {
	t.Helper()
	mr := redistest.StartMini(t)
	store := remote.NewStore(mr.Client(t), "t")
	clk := clock.NewManual(mr.Now())
	var mu sync.Mutex
	states := &[]door.BreakerState{}
	e, err := tier.New(tier.Config{Store: store, Clock: clk, Timeout: 300 * time.Millisecond, Guard: true,
		Lease:       &leasesync.Config{Min: 5, Max: 5, Refresh: time.Second, TTL: time.Hour, LowWater: 0.01, MaxKeys: 10},
		FailureMode: m, Instances: instances, Events: func(ev door.Event) {
			if ev.Kind == door.EventBreaker {
				mu.Lock()
				*states = append(*states, ev.Breaker)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, mr, clk, states
}

// The breaker opens after five failures in a row, stops calling Redis,
// probes after its backoff (doubling after a failed probe), and closes when
// a probe succeeds.
func TestBreaker(t *testing.T) {
	e, mr, clk, states := newDegrading(t, tier.FailOpen, 1)
	p := perHour(t, 1000)
	ctx := context.Background()
	mr.Close()
	for i := 0; i < 5; i++ {
		if d, err := e.Allow(ctx, p, fmt.Sprint("k", i), 1); err != nil || !d.Allowed || d.Source != tier.SourceFallback {
			t.Fatalf("request %d with Redis down: %+v, %v", i, d, err)
		}
	}
	if s := e.Stats(); s.Breaker != door.BreakerOpen || s.BreakerOpens != 1 {
		t.Fatalf("after 5 failures: %+v", s)
	}
	calls := e.Stats().RoundTrips
	for i := 0; i < 100; i++ {
		if d, _ := e.Allow(ctx, p, "k", 1); d.Source != tier.SourceFallback {
			t.Fatalf("open breaker: %+v", d)
		}
	}
	if got := e.Stats().RoundTrips - calls; got != 0 {
		t.Fatalf("an open breaker made %d round trips", got)
	}
	clk.Advance(100 * time.Millisecond) // the backoff: one probe, which fails
	e.Allow(ctx, p, "k", 1)
	if s := e.Stats(); s.Breaker != door.BreakerOpen {
		t.Fatalf("after a failed probe: %v", s.Breaker)
	}
	clk.Advance(100 * time.Millisecond) // the backoff doubled: not yet
	calls = e.Stats().RoundTrips
	e.Allow(ctx, p, "k", 1)
	if got := e.Stats().RoundTrips - calls; got != 0 {
		t.Fatalf("probed before the doubled backoff (%d round trips)", got)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond)
	if d, err := e.Allow(ctx, p, "k", 1); err != nil || d.Source != tier.SourceRemote {
		t.Fatalf("the probe after Redis came back: %+v, %v", d, err)
	}
	want := []door.BreakerState{door.BreakerOpen, door.BreakerHalfOpen, door.BreakerOpen, door.BreakerHalfOpen, door.BreakerClosed}
	if fmt.Sprint(*states) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", *states, want)
	}
}

// FailLocal limits each key to this instance's share; FailClosed fails with
// ErrUnavailable; units already leased are used first in every mode.
func TestFailureModes(t *testing.T) {
	p := perHour(t, 10)
	ctx := context.Background()

	e, mr, _, _ := newDegrading(t, tier.FailLocal, 2)
	mr.Close()
	allowed := 0
	for i := 0; i < 10; i++ {
		d, err := e.Allow(ctx, p, "k", 1)
		if err != nil || d.Source != tier.SourceFallback {
			t.Fatalf("FailLocal: %+v, %v", d, err)
		}
		if d.Allowed {
			allowed++
		} else if d.RetryAfter <= 0 {
			t.Fatalf("FailLocal denial without RetryAfter: %+v", d)
		}
	}
	if allowed != 5 {
		t.Fatalf("FailLocal admitted %d, want Burst/instances = 5", allowed)
	}

	e, mr, _, _ = newDegrading(t, tier.FailClosed, 1)
	big := perHour(t, 100)
	if d, err := e.Allow(ctx, big, "held", 1); err != nil || d.Source != tier.SourceRemote {
		t.Fatal(d, err) // a lease of 5: 4 held
	}
	mr.Close()
	if _, err := e.Allow(ctx, p, "k", 1); !errors.Is(err, door.ErrUnavailable) {
		t.Fatalf("FailClosed: %v, want door.ErrUnavailable", err)
	}
	for i := 0; i < 4; i++ {
		if d, err := e.Allow(ctx, big, "held", 1); err != nil || d.Source != tier.SourceLocal {
			t.Fatalf("FailClosed, leased unit %d: %+v, %v", i, d, err)
		}
	}
	if _, err := e.Allow(ctx, big, "held", 1); !errors.Is(err, door.ErrUnavailable) {
		t.Fatalf("FailClosed, past the leased units: %v, want door.ErrUnavailable", err)
	}
}

// What FailLocal admits during an outage is charged to Redis when the
// breaker closes again: the limit does not start afresh on top of it.
func TestOutageIsCharged(t *testing.T) {
	e, mr, clk, _ := newDegrading(t, tier.FailLocal, 1)
	p := perHour(t, 10)
	ctx := context.Background()
	mr.Close()
	for i := 0; i < 6; i++ { // 1 failure per call: the breaker opens at 5
		e.Allow(ctx, p, "k", 1)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if d, err := e.Allow(ctx, p, "other", 1); err != nil || d.Source != tier.SourceRemote {
		t.Fatalf("after recovery: %+v, %v", d, err)
	}
	waitFor(t, func() bool { return e.Stats().UnitsCharged == 6 })
	// 6 of k's 10 are gone: 4 are left.
	for i := 0; i < 5; i++ {
		d, err := e.Allow(ctx, p, "k", 1)
		if err != nil || d.Allowed != (i < 4) {
			t.Fatalf("after the charge, request %d: %+v, %v", i, d, err)
		}
	}
}

// What FailLocal admits during an outage is charged to each limit up to
// that limit's own capacity and room, not the policy's smallest burst: a
// 5-a-second bucket with a 15-an-hour window, 12 admitted over three
// seconds of outage, leaves the hour 3 units, not 10.
func TestOutageIsChargedToEachLimit(t *testing.T) {
	e, mr, clk, _ := newDegrading(t, tier.FailLocal, 1)
	p, err := remote.NewPolicy("sec5hour15", []remote.Limit{
		{Algorithm: remote.TokenBucket, Rate: 5, Period: time.Second, Burst: 5},
		{Algorithm: remote.FixedWindow, Rate: 15, Period: time.Hour, Burst: 15},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mr.Close()
	admitted := 0
	for s := 0; s < 3; s++ {
		for i := 0; i < 6 && admitted < 12; i++ { // the breaker opens at the fifth failure
			if d, _ := e.Allow(ctx, p, "k", 1); d.Allowed {
				admitted++
			}
		}
		clk.Advance(time.Second)
	}
	if admitted != 12 {
		t.Fatalf("the outage admitted %d, want 12", admitted)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if d, err := e.Allow(ctx, perHour(t, 10), "other", 1); err != nil || d.Source != tier.SourceRemote {
		t.Fatalf("after recovery: %+v, %v", d, err)
	}
	waitFor(t, func() bool { return e.Stats().UnitsCharged > 0 })
	if got := e.Stats().UnitsCharged; got != 12 {
		t.Fatalf("UnitsCharged = %d, want the 12 admitted (the most any limit took)", got)
	}
	mr.Advance(10 * time.Second) // the bucket refills; the hour's window stays
	d, err := remote.NewStore(mr.Client(t), "t").Peek(ctx, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != 3 || d.Decider != 1 {
		t.Fatalf("after the charge: %+v, want the hour's window deciding with 3 left", d)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 5s")
		}
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[tier.Source]string{0: "none", tier.SourceLocal: "local", tier.SourceRemote: "remote",
		tier.SourceFallback: "fallback", tier.SourceCached: "cached", 99: "none"} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String() = %q, want %q", s, got, want)
		}
	}
}

// In lease mode a key's first two decisions are made as exact mode makes
// them, the request's units alone (through the door's combiner; counted as
// a lease of those units), and keep no entry: a key used once or twice
// costs what exact decisions cost. From its third decision on the key has
// an entry and leases. The first decisions count with their policy. A
// lease size set by hand (Min above 1) holds from the first decision.
func TestFirstUsesKeepNoEntry(t *testing.T) {
	ctx := context.Background()
	e, _ := newEngine(t, 1)
	p := perHour(t, 100)
	for use := uint64(1); use <= 2; use++ {
		if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed || d.Source != tier.SourceRemote {
			t.Fatalf("use %d: %+v, %v", use, d, err)
		}
		if s := e.Stats(); s.Keys != 0 || s.Policies[p.Name()].Remote != use || s.Leases != use || s.UnitsUsed != use || s.UnitsHeld != 0 {
			t.Fatalf("after use %d: %+v, want no key held, the decisions counted with their policy", use, s)
		}
	}
	if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("third use: %+v, %v", d, err)
	}
	if s := e.Stats(); s.Keys != 1 {
		t.Fatalf("after a third use: %d keys, want 1", s.Keys)
	}

	e5, _ := newEngine(t, 5)
	if d, err := e5.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first use, Min 5: %+v, %v", d, err)
	}
	if s := e5.Stats(); s.Keys != 1 || s.UnitsLeased != 5 {
		t.Fatalf("first use, Min 5: %+v, want a lease of 5 held", s)
	}
}

// The entry made at a key's third use leases for the demand its first
// uses showed, as one made at its second use would have: uses half a
// second apart lease ahead at the third (units held after it). Uses that
// came together are no rate: the third asks for its own units alone.
func TestThirdUseLeasesForTheFirstUsesDemand(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		gap  time.Duration
		held bool
	}{{500 * time.Millisecond, true}, {0, false}} {
		t.Run(tc.gap.String(), func(t *testing.T) {
			mr := redistest.StartMini(t)
			clk := clock.NewManual(mr.Now())
			e, err := tier.New(tier.Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clk, Timeout: 300 * time.Millisecond, Guard: true,
				Lease: &leasesync.Config{Min: 1, Refresh: time.Second, TTL: 2 * time.Second, LowWater: 0.01, MaxKeys: 10}, FailureMode: tier.FailClosed})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			p := perHour(t, 1000)
			for use := range 3 {
				if use > 0 {
					clk.Advance(tc.gap)
					mr.Advance(tc.gap)
				}
				if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("use %d: %+v, %v", use+1, d, err)
				}
			}
			if s := e.Stats(); (s.UnitsHeld > 0) != tc.held || s.Keys != 1 {
				t.Fatalf("uses %v apart: %+v, want units held %v", tc.gap, s, tc.held)
			}
		})
	}
}
