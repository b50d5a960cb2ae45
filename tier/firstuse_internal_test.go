package tier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// Every key, at any time (ticks wrapping included), is decided exactly at
// its first two uses and leases from its third, which knows its first
// use's time to a tick (and later ones, which make an entry only if the
// first was evicted, do not); a first use too long ago (past seedTicks)
// is not known. Keys pushed out of their slot start over.
func TestFirstUsesCountsEachKey(t *testing.T) {
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	const tick = int64(1) << tickShift
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFirstUses()
	for i := range 20000 {
		key := fmt.Sprint("k", i)
		now := rng.Int64N(1 << 62)
		gap := rng.Int64N(int64(seedTicks-1) * tick)
		for use := 1; use <= 2; use++ {
			if exact, _, _ := f.use(p, key, now+int64(use-1)*gap/2); !exact {
				t.Fatalf("%s: use %d not exact", key, use)
			}
		}
		exact, first, known := f.use(p, key, now+gap)
		if exact || !known || first > now || first <= now-tick {
			t.Fatalf("%s: third use %v ago: exact %v, first %d known %v; want not exact, first within a tick before %d", key, time.Duration(gap), exact, first, known, now)
		}
		// Its entry made, evicted and made again: not exact, nothing known.
		if exact, _, known := f.use(p, key, now+gap+1); exact || known {
			t.Fatalf("%s: fourth use: exact %v, known %v; want neither", key, exact, known)
		}
	}
	// Long ago, or after the clock was set back: not known, and still not
	// exact.
	now := int64(1) << 50
	for _, third := range []int64{now + int64(seedTicks+2)*tick, now + int64(tickMask/2)*tick, now - int64(time.Second)} {
		f.use(p, "old", now)
		f.use(p, "old", now)
		if exact, _, known := f.use(p, "old", third); exact || known {
			t.Fatalf("a third use %v after the first: exact %v, known %v", time.Duration(third-now), exact, known)
		}
		f = newFirstUses()
	}
	// A full table forgets: a key whose slot another took is new again.
	f = newFirstUses()
	f.use(p, "a", now)
	f.use(p, "a", now)
	for i := range 8 * firstUseSlots {
		f.use(p, fmt.Sprint("x", i), now)
	}
	if exact, _, _ := f.use(p, "a", now); !exact {
		t.Fatal("a key pushed out of its slot was taken for seen")
	}
}

// A first use queued in the door's combiner when Close begins, whose
// requester leaves (its context ends) before the reply, which comes after
// Close stopped waiting for leases (its wait in the queue and its round
// trip outlast the Redis timeout): Close waits for it before it stops the
// batcher, so that the unit Redis granted goes back, or is counted as
// dropped, and nothing is held after Close.
func TestCloseWaitsForAFirstUseInTheCombiner(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	e, err := New(Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: time.Second,
		Lease: &leasesync.Config{Min: 1, Refresh: time.Second, TTL: time.Hour, LowWater: 0.25, MaxKeys: 10}, FailureMode: FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	p, err := remote.NewPolicy("cf", []remote.Limit{{Algorithm: remote.FixedWindow, Rate: 10, Period: time.Hour, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	decide := func(key string) {
		if _, err := e.door.Decide(context.Background(), remote.Request{Policy: p, Key: key, Min: 1, Max: 1}, nil); err != nil {
			t.Logf("%s: %v", key, err)
		}
	}
	var wg sync.WaitGroup // scripts loaded, connections open
	for range e.door.InFlight() + 4 {
		wg.Go(func() { decide("warm"); _ = c.Ping(context.Background()) })
	}
	wg.Wait()
	proxy.SetDelay(700 * time.Millisecond)
	for range e.door.InFlight() { // every slot of the combiner taken
		wg.Go(func() { decide("busy") })
	}
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := e.Allow(ctx, p, "k", 1) // a first use: queued in the combiner
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	_ = e.Close()
	<-done
	wg.Wait()
	proxy.SetDelay(0)
	s := e.Stats()
	pk, err := remote.NewStore(c, "t").Peek(context.Background(), p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if s.UnitsHeld != 0 {
		t.Errorf("UnitsHeld %d after Close, want 0", s.UnitsHeld)
	}
	if pk.Remaining+int64(s.UnitsDropped) != 10 {
		t.Errorf("Redis has %d of 10 units of k left, none used, %d dropped: a granted unit was neither given back nor counted", pk.Remaining, s.UnitsDropped)
	}
}

// An entry that Wait made (at a key's second use) and an eviction
// dropped, made again an hour later, is not seeded from the key's first
// use: that rate is long gone.
func TestAnEntryMadeAgainLaterIsNotSeeded(t *testing.T) {
	ctx := context.Background()
	_, clk, e, p := oneKeyEngine(t, 24*time.Hour)
	if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first use: %+v %v", d, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_ = e.Wait(wctx, p, "k", 1) // the second use, denied: Wait makes k's entry
	cancel()
	if _, ok := e.tables.find(p).table.Get("k"); !ok {
		t.Fatal("Wait made no entry")
	}
	for range 3 {
		_, _ = e.Allow(ctx, p, "other", 1) // evicts k (MaxKeys 1)
	}
	if _, ok := e.tables.find(p).table.Get("k"); ok {
		t.Fatal("k not evicted")
	}
	clk.Advance(time.Hour)
	if exact, first, known := e.firstUse(p, "k"); exact || known {
		t.Errorf("k's entry made again an hour later: exact %v, known %v (first use %v ago); want neither", exact, known, time.Duration(e.leaser.Now()-first))
	}
}

// Callers that Wait on a key whose entry an eviction dropped let that
// entry go at their next try: the one still denied then waits on the
// key's next entry, whose leases say so (Lease.Waiting).
func TestAWaiterFollowsItsKeyToItsNextEntry(t *testing.T) {
	// (No deadline for the callers: one sooner than a denial's retry ends
	// their Wait at once.)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	mr, clk, e, p := oneKeyEngine(t, time.Minute)
	if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
		t.Fatalf("first use: %+v %v", d, err)
	}
	// waits reports whether k's entry now says that callers wait on it.
	waits := func() (*leasesync.Entry, bool) {
		st := e.tables.find(p)
		if st == nil {
			return nil, false
		}
		ent, ok := st.table.Get("k")
		if !ok {
			return nil, false
		}
		now := e.leaser.Now()
		l, busy := ent.StartLease(0, 1, now)
		if busy != nil {
			return ent, false
		}
		ent.AbandonLease(l, now)
		return ent, l.Waiting
	}
	var wg sync.WaitGroup
	admitted := make(chan struct{}, 2)
	for range 2 {
		wg.Go(func() {
			if e.Wait(ctx, p, "k", 1) == nil {
				admitted <- struct{}{}
			}
		})
	}
	first := func() *leasesync.Entry {
		for time.Now().Before(deadline) {
			if ent, ok := waits(); ok {
				return ent
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("no caller waits on k's entry")
		return nil
	}()
	for range 3 {
		_, _ = e.Allow(ctx, p, "other", 1) // evicts k (MaxKeys 1)
	}
	if !first.Gone() {
		t.Fatal("k not evicted")
	}
	// The window turns: one caller is admitted, the other waits again, on
	// the key's next entry.
	for {
		mr.Advance(time.Minute)
		clk.Advance(time.Minute)
		select {
		case <-admitted:
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("neither caller was admitted")
			}
			continue
		}
		break
	}
	defer wg.Wait()
	defer cancel()
	for time.Now().Before(deadline) {
		if ent, ok := waits(); ok && ent != first {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("the caller still denied does not wait on k's next entry")
}

// oneKeyEngine is a lease-mode engine on a miniredis and a manual clock
// that keeps one key (MaxKeys 1: a second key evicts the first), and a
// policy of one unit a period.
func oneKeyEngine(t *testing.T, period time.Duration) (*redistest.Mini, *clock.Manual, *Engine, *remote.Policy) {
	t.Helper()
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	e, err := New(Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clk, Timeout: 300 * time.Millisecond, Guard: true,
		Lease: &leasesync.Config{Min: 1, Refresh: time.Second, TTL: time.Hour, LowWater: 0.01, MaxKeys: 1}, FailureMode: FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	p, err := remote.NewPolicy("one", []remote.Limit{{Algorithm: remote.FixedWindow, Rate: 1, Period: period, Burst: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return mr, clk, e, p
}
