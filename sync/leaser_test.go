package sync_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// took is whether a Take took.
func took(_ int64, ok bool) bool { return ok }

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cfg is a valid Config with long intervals, for tests to adjust.
func cfg() leasesync.Config {
	return leasesync.Config{Min: 1, Max: 100, Refresh: time.Second, TTL: time.Hour, LowWater: 0.25, MaxKeys: 100}
}

// newDoor returns a door to c with a Redis timeout of 5s, unguarded.
func newDoor(c redis.UniversalClient, clk clock.Clock) *door.Door {
	return door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clk, Timeout: 5 * time.Second})
}

func newLeaser(t *testing.T, c redis.UniversalClient, clk clock.Clock, conf leasesync.Config) *leasesync.Leaser {
	t.Helper()
	return newLeaserThrough(t, newDoor(c, clk), clk, conf)
}

// newLeaserThrough returns a Leaser through d, closed (and d after it) by
// the test's cleanup.
func newLeaserThrough(t *testing.T, d *door.Door, clk clock.Clock, conf leasesync.Config) *leasesync.Leaser {
	t.Helper()
	l, err := leasesync.New(d, clk, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		ctx, cancel := d.Bound(context.Background())
		defer cancel()
		d.Close(ctx)
	})
	return l
}

// proxied starts a real Redis behind a delaying proxy and returns the proxy
// and a client through it.
func proxied(t *testing.T) (*redistest.Proxy, *redis.Client) {
	t.Helper()
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return proxy, c
}

func tokenBucket(t *testing.T, rate, burst int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: rate, Period: time.Hour, Burst: burst}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrors(t *testing.T) {
	for _, mod := range []func(*leasesync.Config){
		func(c *leasesync.Config) { c.Min = 0 },
		func(c *leasesync.Config) { c.Min, c.Max = 5, 4 },
		func(c *leasesync.Config) { c.TTL = 0 },
		func(c *leasesync.Config) { c.TTL = time.Duration(math.MaxInt64) },
		func(c *leasesync.Config) { c.Refresh = time.Nanosecond },
		func(c *leasesync.Config) { c.Refresh = 2 * c.TTL },
		func(c *leasesync.Config) { c.LowWater = 1 },
		func(c *leasesync.Config) { c.MaxKeys = 0 },
	} {
		c := cfg()
		mod(&c)
		if err := leasesync.Validate(c); !errors.Is(err, leasesync.ErrInvalidOption) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidOption", c, err)
		}
	}
}

// Concurrent misses on one key make one Redis call: the others wait for it
// and take their units from what it brought.
func TestLeaseCoalesces(t *testing.T) {
	proxy, c := proxied(t)
	conf := cfg()
	conf.Min, conf.Max = 50, 50
	l := newLeaser(t, c, clock.System{}, conf)
	p := tokenBucket(t, 1000, 1000)
	e := l.NewTable(p, nil).GetOrCreate("k")
	proxy.SetDelay(50 * time.Millisecond) // all of them miss while the first lease is out
	var wg stdsync.WaitGroup
	results := make(chan string, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, taken, err := l.Lease(context.Background(), e, 1)
			results <- fmt.Sprintf("granted=%d taken=%v err=%v", d.Granted, taken, err)
		}()
	}
	wg.Wait()
	close(results)
	got := map[string]int{}
	for r := range results {
		got[r]++
	}
	// One lease of 50: its requester got 50 (1 its own), the 19 others took
	// one unit each from the allowance.
	if s := l.Stats(); s.Leases != 1 || s.UnitsLeased != 50 {
		t.Fatalf("Stats %+v, want one lease of 50 (results %v)", s, got)
	}
	if got["granted=50 taken=false err=<nil>"] != 1 || got["granted=0 taken=true err=<nil>"] != 19 || e.Units() != 30 {
		t.Fatalf("results %v, %d units left; want 1 lease, 19 takes, 30 left", got, e.Units())
	}
}

// Leases for many keys that are due together go out together: with every
// reply delayed, those that come while the door's calls in flight are out
// all go in one pipeline. (A cold key's lease names no member: it goes as
// an exact decision does, through the door's combiner.)
func TestLeasesAreBatched(t *testing.T) {
	proxy, c := proxied(t)
	d := newDoor(c, clock.System{})
	l := newLeaserThrough(t, d, clock.System{}, cfg())
	p := tokenBucket(t, 1000, 1000)
	tab := l.NewTable(p, nil)
	time.Sleep(100 * time.Millisecond) // the first heartbeat is done
	before := l.Stats().RoundTrips
	proxy.SetDelay(100 * time.Millisecond)
	var wg stdsync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d, _, err := l.Lease(context.Background(), tab.GetOrCreate(fmt.Sprint("k", i)), 1); err != nil || d.Granted < 1 {
				t.Errorf("key %d: %+v, %v", i, d, err)
			}
		}()
	}
	wg.Wait()
	if s := l.Stats(); s.Leases != 40 || s.RoundTrips-before > uint64(d.InFlight()+1) {
		t.Fatalf("40 leases in %d round trips, want at most %d (Stats %+v)", s.RoundTrips-before, d.InFlight()+1, s)
	}
}

// A cold key starts at Min; with demand the lease grows toward
// demand × Refresh, never past Max.
func TestLeaseSizeFollowsDemand(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	conf := cfg()
	conf.Min, conf.Max, conf.Refresh = 2, 400, 100*time.Millisecond
	l := newLeaser(t, mr.Client(t), clk, conf)
	p := tokenBucket(t, 1_000_000, 1_000_000)
	e := l.NewTable(p, nil).GetOrCreate("k")
	d, _, err := l.Lease(context.Background(), e, 1)
	if err != nil || d.Granted != 2 {
		t.Fatalf("cold lease: %+v, %v; want Min = 2", d, err)
	}
	// 1000 units per second for 3 seconds: 100 per 100ms.
	var sizes []int64
	for ms := 0; ms < 3000; ms++ {
		clk.Advance(time.Millisecond)
		mr.Advance(time.Millisecond)
		if !took(e.Take(1, l.Now())) {
			d, _, err := l.Lease(context.Background(), e, 1)
			if err != nil || d.Granted < 1 {
				t.Fatalf("at %dms: %+v, %v", ms, d, err)
			}
			sizes = append(sizes, d.Granted)
		}
	}
	last := sizes[len(sizes)-1]
	t.Logf("lease sizes: %v", sizes)
	if last < 80 || last > 120 {
		t.Fatalf("at 1000/s with Refresh 100ms the lease is %d, want about 100", last)
	}
}

// A prefetch waits out a denial: while Redis's last answer for a key holds
// (no units until then), holding units below low water starts no lease.
// Polling instead would cost a round trip per hit, and under scarcity the
// instance that holds units would win every batch from the instances
// waiting out their denials.
func TestPrefetchWaitsOutDenial(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	conf := cfg()
	conf.Min, conf.Max = 10, 10
	d := newDoor(mr.Client(t), clk)
	l := newLeaserThrough(t, d, clk, conf)
	p := tokenBucket(t, 3600, 10) // one unit a second
	e := l.NewTable(p, nil).GetOrCreate("k")
	if d, _, err := l.Lease(context.Background(), e, 1); err != nil || d.Granted != 10 {
		t.Fatalf("lease: %+v, %v; want the whole bucket, 10", d, err)
	}
	if !took(e.Take(7, l.Now())) { // 2 left, under low water (3)
		t.Fatal("no units to take")
	}
	leasing := func() bool { return e.Leasing() != nil }
	l.Prefetch(e) // the bucket is empty: denied for about a second
	waitFor(t, func() bool { return !leasing() })
	if s := l.Stats(); s.Leases != 2 || s.Denied != 1 {
		t.Fatalf("Stats %+v, want the prefetch answered with a denial", s)
	}
	for i := 0; i < 5; i++ {
		l.Prefetch(e)
		if leasing() {
			t.Fatalf("prefetch %d started a lease while the denial holds", i)
		}
	}
	if s := l.Stats(); s.Leases != 2 || s.RoundTrips != 2 {
		t.Fatalf("Stats %+v: Redis asked again while the denial holds", s)
	}
	clk.Advance(1100 * time.Millisecond) // the denial is over, and a unit is back
	mr.Advance(1100 * time.Millisecond)
	// The breaker opens: five failures in a row, as its owner reports them.
	for i := 0; i < 5; i++ {
		pass, err := d.Enter(p, "k")
		if err != nil {
			t.Fatal(err)
		}
		d.Leave(pass, fmt.Errorf("%w: test", door.ErrUnavailable))
	}
	if l.Prefetch(e); leasing() {
		t.Fatal("a prefetch started with the breaker open")
	}
	clk.Advance(100 * time.Millisecond) // the breaker's backoff: a probe, which succeeds
	pass, err := d.Enter(p, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.Leave(pass, nil)
	l.Prefetch(e)
	waitFor(t, func() bool { return l.Stats().Leases == 3 })
}

// Units unused after TTL go back to Redis, counted as expired; at Close the
// rest go back too.
func TestExpiredUnitsAreRefunded(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	conf := cfg()
	conf.Min, conf.Max, conf.TTL, conf.Refresh = 10, 10, 100*time.Millisecond, 0
	l := newLeaser(t, mr.Client(t), clk, conf)
	p := tokenBucket(t, 1000, 1000)
	tab := l.NewTable(p, nil)
	if _, _, err := l.Lease(context.Background(), tab.GetOrCreate("a"), 1); err != nil {
		t.Fatal(err)
	}
	// The sweeper runs every TTL/4: step past the TTL and let it refund.
	for i := 0; i < 8 && l.Stats().UnitsRefunded == 0; i++ {
		clk.Advance(25 * time.Millisecond)
		waitFor(t, func() bool { return clk.Timers() > 0 })
	}
	waitFor(t, func() bool { return l.Stats().UnitsRefunded == 9 })
	if s := l.Stats(); s.UnitsExpired != 9 {
		t.Fatalf("Stats %+v, want the 9 unused units expired and refunded", s)
	}
	// A fresh lease for b, then Close: its 9 spare units go back.
	if _, _, err := l.Lease(context.Background(), tab.GetOrCreate("b"), 1); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if s := l.Stats(); s.UnitsRefunded != 18 || s.UnitsExpired != 9 {
		t.Fatalf("after Close: %+v, want 18 refunded, 9 of them expired", s)
	}
}

// Past MaxKeys the least recently leased key is evicted and its units
// refunded.
func TestEvictionRefunds(t *testing.T) {
	mr := redistest.StartMini(t)
	conf := cfg()
	conf.Min, conf.Max, conf.MaxKeys = 10, 10, 1
	l := newLeaser(t, mr.Client(t), clock.NewManual(mr.Now()), conf)
	p := tokenBucket(t, 1000, 1000)
	tab := l.NewTable(p, nil)
	a := tab.GetOrCreate("a")
	if _, _, err := l.Lease(context.Background(), a, 1); err != nil {
		t.Fatal(err)
	}
	tab.GetOrCreate("b") // evicts a
	if _, ok := tab.Get("a"); ok {
		t.Fatal("a was not evicted")
	}
	waitFor(t, func() bool { return l.Stats().UnitsRefunded == 9 })
}

// The instances that count for a key are those that lease it with a
// demand: one that never touches the key, or has leased it only once (no
// demand measured yet), is not among them. No heartbeat: the count comes
// back with the leases.
func TestMembersComeWithLeases(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	conf := cfg()
	p := tokenBucket(t, 1000, 1000)
	var ls []*leasesync.Leaser
	var es []*leasesync.Entry
	for range 3 {
		l := newLeaser(t, mr.Client(t), clk, conf)
		ls = append(ls, l)
		es = append(es, l.NewTable(p, nil).GetOrCreate("k"))
	}
	lease := func(i int) remote.Decision {
		d, _, err := ls[i].Lease(context.Background(), es[i], 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	lease(0)
	lease(1)
	lease(2) // once: no demand
	mr.Advance(100 * time.Millisecond)
	clk.Advance(100 * time.Millisecond)
	lease(0)
	if d := lease(1); d.Members != 2 {
		t.Fatalf("members %d, want 2", d.Members)
	}
	if ls[1].Instances() != 2 || ls[2].Instances() != 1 {
		t.Fatalf("Instances() %d and %d, want 2 and 1", ls[1].Instances(), ls[2].Instances())
	}
	if es[1].Members() != 2 {
		t.Fatalf("entry's members %d, want 2", es[1].Members())
	}
}

// waitFor polls cond for up to 5 seconds: for what background goroutines
// finish on their own time.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met within 5s")
		}
	}
}

// A lease still in flight when Close begins lands, and its spare units are
// refunded before Close returns; leases after Close fail with ErrClosed.
func TestCloseRefundsLeaseInFlight(t *testing.T) {
	proxy, c := proxied(t)
	conf := cfg()
	conf.Min, conf.Max = 10, 10
	l := newLeaser(t, c, clock.System{}, conf)
	p := tokenBucket(t, 1000, 1000)
	e := l.NewTable(p, nil).GetOrCreate("k")
	time.Sleep(50 * time.Millisecond) // the first heartbeat is done
	proxy.SetDelay(200 * time.Millisecond)
	done := make(chan remote.Decision)
	go func() {
		d, _, err := l.Lease(context.Background(), e, 1)
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	time.Sleep(50 * time.Millisecond) // the lease is out
	l.Close()
	if d := <-done; d.Granted != 10 {
		t.Fatalf("lease in flight: %+v", d)
	}
	if s := l.Stats(); s.UnitsRefunded != 9 {
		t.Fatalf("Stats %+v, want the 9 spare units refunded by Close", s)
	}
	if _, _, err := l.Lease(context.Background(), e, 1); !errors.Is(err, door.ErrClosed) {
		t.Fatalf("Lease after Close: %v, want ErrClosed", err)
	}
}

// With Guard, a client that ignores deadlines (no ContextTimeoutEnabled;
// ReadTimeout 3s) cannot hold the Leaser past its Timeout: a lease on a slow
// Redis fails at the deadline, and the units Redis grants it afterwards are
// refunded when they arrive; on a hung Redis, Close returns within about one
// Timeout.
func TestGuardedLeaser(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1}) // deadlines ignored
	t.Cleanup(func() { _ = c.Close() })
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = direct.Close() })
	conf := cfg()
	conf.Min, conf.Max = 10, 10
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 50 * time.Millisecond, Guard: true})
	l := newLeaserThrough(t, d, clock.System{}, conf)
	p := tokenBucket(t, 1, 100) // 1 unit an hour: what the lease takes stays taken unless refunded
	e := l.NewTable(p, nil).GetOrCreate("k")
	time.Sleep(50 * time.Millisecond) // the first heartbeat is done
	// Load the script: a late NOSCRIPT is retried with EVAL only while the
	// deadline lasts, and then nothing is granted.
	if _, err := remote.NewStore(direct, "t").Acquire(context.Background(), remote.Request{Policy: p, Key: "warm", Min: 1, Max: 1}); err != nil {
		t.Fatal(err)
	}

	t.Run("slow", func(t *testing.T) {
		proxy.SetDelay(400 * time.Millisecond)
		start := time.Now()
		_, _, err := l.Lease(context.Background(), e, 1)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lease on a slow Redis: %v, want DeadlineExceeded", err)
		}
		if took > 300*time.Millisecond { // a bound, not a speed target: 400ms would mean no guard
			t.Fatalf("Lease took %v with a 50ms timeout and a 400ms delay", took)
		}
		proxy.SetDelay(0)
		deadline := time.Now().Add(5 * time.Second)
		for {
			s := l.Stats()
			if s.UnitsLeased == 10 && s.UnitsRefunded == 10 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Stats %+v: want the 10 units granted late, and refunded", s)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Redis has them back: the whole burst can be taken.
		d, err := remote.NewStore(direct, "t").Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 100, Max: 100})
		if err != nil || d.Granted != 100 {
			t.Fatalf("after the late refund: %+v, %v; want all 100 units", d, err)
		}
	})

	t.Run("hung", func(t *testing.T) {
		e := l.NewTable(p, nil).GetOrCreate("k2")
		proxy.SetDrop(true)
		done := make(chan error, 1)
		go func() {
			_, _, err := l.Lease(context.Background(), e, 1)
			done <- err
		}()
		time.Sleep(20 * time.Millisecond) // the lease is out
		start := time.Now()
		l.Close()
		took := time.Since(start)
		if took > time.Second { // a bound: the client's ReadTimeout is 3s
			t.Fatalf("Close on a hung Redis took %v, with a 50ms timeout", took)
		}
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("lease on a hung Redis: %v, want DeadlineExceeded", err)
		}
		// The calls still out end when the proxy closes their connections
		// (the test's cleanup), before goleak looks.
	})
}

// A caller waiting for a key's units (Entry.Waiting) wants them all: the
// leases made while it waits tell Redis the key's whole rate as this
// member's demand, whatever the demand measured, so that the fair share
// holds it to its part rather than to what it got while asleep; but not
// from a region's pool.
func TestWaitersWantTheKeysRate(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	c := mr.Client(t)
	l := newLeaser(t, c, clk, cfg())
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 500, Period: time.Second, Burst: 500}})
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewTable(p, nil).GetOrCreate("k")
	demand := func() int64 {
		t.Helper()
		mr.Advance(100 * time.Millisecond)
		clk.Advance(100 * time.Millisecond)
		if _, _, err := l.Lease(context.Background(), e, 1); err != nil {
			t.Fatal(err)
		}
		v, err := c.HGet(context.Background(), "t:{p:k}:m2", leasesync.ID(l)).Result()
		if errors.Is(err, redis.Nil) {
			return 0 // no member: no demand measured yet
		}
		if err != nil {
			t.Fatal(err)
		}
		var exp, d int64
		if _, err := fmt.Sscanf(v, "%d %d", &exp, &d); err != nil {
			t.Fatalf("member entry %q: %v", v, err)
		}
		return d
	}
	if d := demand(); d != 0 {
		t.Fatalf("cold lease: demand %d, want none (no member)", d)
	}
	if d := demand(); d <= 0 || d >= 500 {
		t.Fatalf("measured demand %d, want a few units a second", d)
	}
	e.Waiting(1)
	if d := demand(); d != 500 {
		t.Fatalf("demand %d while a caller waits, want the key's rate 500", d)
	}
	e.Waiting(-1)
	if d := demand(); d >= 500 {
		t.Fatalf("demand %d once nobody waits, want the measured one", d)
	}
	// Not from a region's pool: there the members' demands add up to the
	// region's claim on the worldwide limit, and every instance whose pool
	// ran dry would claim the whole rate for it.
	pe := l.NewTable(p.Pooled(), nil).GetOrCreate("k")
	st := local.Lease{Rate: 7, Waiting: true}
	if req := leasesync.PlanOf(l, pe, st, 1, l.Now()); req.Demand != 7 {
		t.Fatalf("a waiter's lease from a pool claims %d units/s, want its measured 7", req.Demand)
	}
	if req := leasesync.PlanOf(l, e, st, 1, l.Now()); req.Demand != 500 {
		t.Fatalf("a waiter's lease claims %d units/s, want the key's rate 500", req.Demand)
	}
}

// A lease made ahead of need asks for whole requests of the size of the
// last request that leased (Redis grants whole multiples of Min): a key
// used by AllowN(187) would otherwise hold remainders below 187 that no
// request takes until they lapse.
func TestPrefetchAsksForWholeRequests(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	l := newLeaser(t, mr.Client(t), clk, cfg())
	p := tokenBucket(t, 1_000_000, 1_000_000)
	e := l.NewTable(p, nil).GetOrCreate("k")
	now := l.Now()
	if req := leasesync.PlanOf(l, e, local.Lease{}, 0, now); req.Min != 1 {
		t.Fatalf("a prefetch before any request asks for at least %d, want 1", req.Min)
	}
	st, _ := e.StartLease(187, 1, now)
	if req := leasesync.PlanOf(l, e, st, 187, now); req.Min != 187 {
		t.Fatalf("a request of 187 asks for at least %d", req.Min)
	}
	e.EndLease()
	st, ok := e.TryStartLease(l.Now, func() bool { return true })
	if !ok {
		t.Fatal("no lease started ahead of need")
	}
	defer e.EndLease()
	if st.Request != 187 {
		t.Fatalf("the entry's last request was %d units, want 187", st.Request)
	}
	if req := leasesync.PlanOf(l, e, st, 0, l.Now()); req.Min != 187 || req.Max < 187 {
		t.Fatalf("a prefetch after requests of 187 asks for %d to %d, want at least 187", req.Min, req.Max)
	}
}

// A key this instance uses seldom (its measured demand over a horizon is
// less than the request) is asked as an exact decision would be: the call
// names no member, so it costs Redis what an exact call does and leaves
// the key's members alone; a key it uses often leases as a member.
func TestSeldomKeyNamesNoMember(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	c := mr.Client(t)
	l := newLeaser(t, c, clk, leasesync.Config{Min: 1, Refresh: 100 * time.Millisecond, TTL: time.Second, LowWater: 0.25, MaxKeys: 100})
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 500, Period: time.Second, Burst: 500}})
	if err != nil {
		t.Fatal(err)
	}
	tab := l.NewTable(p, nil)
	member := func(key string, every time.Duration, times int) bool {
		t.Helper()
		e := tab.GetOrCreate(key)
		for range times {
			mr.Advance(every)
			clk.Advance(every)
			if _, _, err := l.Lease(context.Background(), e, 1); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.HGet(context.Background(), "t:{p:"+key+"}:m2", leasesync.ID(l)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return err == nil
	}
	if member("seldom", 2*time.Second, 4) {
		t.Error("a key used once every 2s, with leases meant to last 100ms: the leaser joined its members")
	}
	if !member("often", 5*time.Millisecond, 40) {
		t.Error("a key used every 5ms: the leaser did not join its members")
	}
}

// A crowded key, whose rate divided among the members of its last lease
// is less than two requests a member per horizon, is asked as exact mode
// asks it, naming no member, however often this instance uses it: a lease
// would bring the request and hardly another, at a member call's price.
// Once an exact decision finds the key half full, it is not crowded any
// more, and the next lease names the member again.
func TestCrowdedKeyNamesNoMember(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	c := mr.Client(t)
	l := newLeaser(t, c, clk, leasesync.Config{Min: 1, Refresh: 100 * time.Millisecond, TTL: time.Second, LowWater: 0.25, MaxKeys: 100})
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 20, Period: time.Second, Burst: 20}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := remote.NewStore(c, "t")
	for i := range 30 { // the crowd: 30 members wanting 20/s each
		if _, err := s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1, Member: fmt.Sprintf("other%d", i), Demand: 20, Horizon: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	e := l.NewTable(p, nil).GetOrCreate("k")
	entry := func() string {
		v, err := c.HGet(ctx, "t:{p:k}:m2", leasesync.ID(l)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	lease := func(times int) {
		for range times {
			mr.Advance(5 * time.Millisecond)
			clk.Advance(5 * time.Millisecond)
			if _, _, err := l.Lease(ctx, e, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	lease(4) // a demand of 200/s: it leases, and learns of the crowd
	if e.Members() < 30 || entry() == "" {
		t.Fatalf("after its first leases: %d members known, entry %q; want the crowd counted, and this member in it", e.Members(), entry())
	}
	before := entry()
	lease(20)
	if after := entry(); after != before {
		t.Fatalf("a key of 20/s among %d members, asked 200/s: its member entry went from %q to %q; want exact decisions, naming no member", e.Members(), before, after)
	}
	// The crowd leaves; the key refills.
	mr.Advance(5 * time.Second)
	clk.Advance(5 * time.Second)
	lease(20)
	if e.Members() != 1 || entry() == "" {
		t.Fatalf("the crowd gone, the key full: %d members known, entry %q; want this member leasing alone", e.Members(), entry())
	}
}

// A small lease of a key that Redis last said was empty (a popular key of
// a fleet that others keep empty) goes as an exact decision, naming no
// member: a member's call costs Redis about six exact calls, and a lease
// of a few units of an empty key would bring the request and hardly
// another. The denials are cached for their RetryAfter, no longer. Once
// the key has room again, the instance is granted at once and leases as
// a member again.
func TestSmallLeaseOfAnEmptyKeyNamesNoMember(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	c := mr.Client(t)
	conf := leasesync.Config{Min: 1, Refresh: 500 * time.Millisecond, TTL: time.Second, LowWater: 0.25, MaxKeys: 100}
	l := newLeaser(t, c, clk, conf)
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 20, Period: time.Second, Burst: 20}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := remote.NewStore(c, "t")
	e := l.NewTable(p, nil).GetOrCreate("k")
	// ask makes a decision every 100ms (10/s, a lease of 5 units over the
	// horizon) for d, the others taking the key's room first while drain;
	// it returns the calls this instance made, its grants, and the longest
	// a cached denial held.
	ask := func(d time.Duration, drain bool) (calls, grants int, held time.Duration) {
		t.Helper()
		for range int(d / (100 * time.Millisecond)) {
			mr.Advance(100 * time.Millisecond)
			clk.Advance(100 * time.Millisecond)
			if drain {
				if _, err := s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1000}); err != nil {
					t.Fatal(err)
				}
			}
			if denied, _ := e.Denied(l.Now(), 1); denied {
				continue
			}
			if _, ok := e.Take(1, l.Now()); ok {
				grants++
				continue
			}
			calls++
			d, _, err := l.Lease(ctx, e, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Granted > 0 {
				grants++
			} else if _, left := e.Denied(l.Now(), 1); time.Duration(left) > held {
				held = time.Duration(left)
			}
		}
		return calls, grants, held
	}
	member := func() string {
		v, err := c.HGet(ctx, "t:{p:k}:m2", leasesync.ID(l)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}
	if _, grants, _ := ask(time.Second, false); grants != 10 || member() == "" {
		t.Fatalf("a key with room: %d of 10 granted, member entry %q; want all, leased as a member", grants, member())
	}
	// The units held lapse; the others empty the key before each decision.
	mr.Advance(2 * conf.TTL)
	clk.Advance(2 * conf.TTL)
	calls, grants, _ := ask(300*time.Millisecond, true) // the first denial is a member's call
	before := member()
	c2, g2, held := ask(3*time.Second, true)
	if grants+g2 != 0 {
		t.Fatalf("others took every unit first, yet %d granted", grants+g2)
	}
	if after := member(); after != before {
		t.Errorf("small leases of an empty key: the member entry went from %q to %q; want exact decisions, naming no member", before, after)
	}
	// A denial holds until the next unit, a twentieth of a second: every
	// decision asks.
	if calls+c2 != 33 || held > 50*time.Millisecond {
		t.Errorf("%d calls for 33 decisions, a denial held up to %v; want each asked, none held past its RetryAfter", calls+c2, held)
	}
	// The others stop: the next decision is granted, and leases as a member.
	before = member()
	if _, grants, _ = ask(500*time.Millisecond, false); grants != 5 || member() == before {
		t.Errorf("the key has room again: %d of 5 granted, member entry %q; want all, leased as a member again", grants, member())
	}
}
