package local

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func keepAll(int64, int64) bool { return true }

// An entry in its table but not yet in the bound (its maker preempted
// between the two) can be found and filled by another goroutine. Clear
// (Close) must not miss it: it waits for the entry to join the bound,
// then hands its units to onEvict like any other's; an entry made after
// Clear began is gone from the start, and refuses what a lease brings.
func TestClearWaitsForAnEntryBeingMade(t *testing.T) {
	var mu sync.Mutex
	refunded := map[string]int64{}
	b := NewBound[string](10, func(e *Entry[string], units, _ int64) {
		mu.Lock()
		refunded[e.Key()] += units
		mu.Unlock()
	})
	tb := b.NewTable("p", nil)
	reached, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.beforeAdd = func() { once.Do(func() { close(reached); <-hold }) }
	made := make(chan *Entry[string])
	go func() { made <- tb.GetOrCreate("k") }()
	<-reached

	e, ok := tb.Get("k")
	if !ok {
		t.Fatal("the entry being made is not in its table")
	}
	if _, kept, _ := e.fill(Grant{Units: 10, Keep: 10, At: 1, Expires: 1e18}, 0, keepAll); !kept {
		t.Fatal("a live entry refused a grant")
	}
	cleared := make(chan struct{})
	go func() { b.Clear(); close(cleared) }()
	select {
	case <-cleared:
		t.Fatal("Clear returned while an entry was being made: its 10 units would never go back")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	<-cleared
	if got := <-made; got != e {
		t.Fatal("GetOrCreate returned another entry than the one in the table")
	}
	mu.Lock()
	got := refunded["k"]
	mu.Unlock()
	if got != 10 || !e.gone.Load() || e.Units() != 0 {
		t.Fatalf("after Clear: %d units handed back (want 10), evicted %v, %d held", got, e.gone.Load(), e.Units())
	}
	if _, kept, _ := e.fill(Grant{Units: 5, Keep: 5, At: 1, Expires: 1e18}, 0, keepAll); kept || e.Units() != 0 {
		t.Fatal("a cleared entry took a grant")
	}
	late := tb.GetOrCreate("k2")
	if !late.gone.Load() {
		t.Fatal("an entry made after Clear is not gone")
	}
	if _, ok := tb.Get("k2"); ok {
		t.Fatal("an entry made after Clear is in its table")
	}
	if _, kept, _ := late.fill(Grant{Units: 5, Keep: 5, At: 1, Expires: 1e18}, 0, keepAll); kept {
		t.Fatal("an entry made after Clear took a grant")
	}
}

// Once an entry has left its table, nothing is put in it: not a grant,
// not units set aside, not the units an abandoned lease took along; each
// comes back to its caller to give back. Units that lapse are set aside
// under the lock that drained them.
func TestGoneEntryRefusesUnits(t *testing.T) {
	var evicted atomic.Int64
	b := NewBound[string](1, func(_ *Entry[string], units, _ int64) { evicted.Add(units) })
	tb := b.NewTable("p", nil)
	e := tb.GetOrCreate("a")
	e.fill(Grant{Units: 8, Keep: 8, At: 3, Expires: 100}, 0, keepAll)
	if lp := e.Lapse(100, keepAll); lp != (Lapsed{Units: 8, Aside: 8}) || e.Back() != 8 {
		t.Fatalf("Lapse = %+v, back %d; want all 8 set aside", lp, e.Back())
	}
	if lp := e.Lapse(200, keepAll); lp.Units != 0 {
		t.Fatalf("a second Lapse found %d units", lp.Units)
	}
	e.fill(Grant{Units: 4, Keep: 4, At: 5, Expires: 300}, 150, keepAll)
	lease, _ := e.StartLease(1, 1, 160) // takes the 8 set aside along
	if lease.Back != 8 || e.Back() != 0 {
		t.Fatalf("the lease took %d set aside, %d left", lease.Back, e.Back())
	}
	tb.GetOrCreate("b") // evicts a: its 4 units go to onEvict
	if !e.gone.Load() || evicted.Load() != 4 {
		t.Fatalf("evicted %v, %d units handed back; want 4", e.gone.Load(), evicted.Load())
	}
	if u, at, _ := e.AbandonLease(lease, 170); u != 8 || at != 3 {
		t.Fatalf("AbandonLease on a gone entry = %d, %d; want the 8 set aside, granted at 3", u, at)
	}
	if e.setAside(2, 1, 180) {
		t.Fatal("a gone entry took units set aside")
	}
	if _, kept, _ := e.fill(Grant{Units: 6, Keep: 6, At: 7, Expires: 1e9}, 190, keepAll); kept || e.Units() != 0 {
		t.Fatal("a gone entry took a grant")
	}
	if e.Back() != 0 {
		t.Fatalf("a gone entry holds %d set aside", e.Back())
	}

	// A live entry's abandoned lease puts its units back.
	c := tb.GetOrCreate("c")
	c.setAside(3, 9, 0)
	l, _ := c.StartLease(0, 1, 1)
	if u, _, _ := c.AbandonLease(l, 2); u != 0 || c.Back() != 3 || c.Leasing() != nil {
		t.Fatalf("AbandonLease on a live entry returned %d, left %d set aside (want 0, 3), lease in flight %v", u, c.Back(), c.Leasing() != nil)
	}

	// Unless the key was forgotten (Reset) since: its units set aside were
	// of the state that is gone, and would go back into the fresh one.
	l, _ = c.StartLease(0, 1, 3)
	c.Forget()
	if u, _, dropped := c.AbandonLease(l, 4); u != 0 || dropped != 3 || c.Back() != 0 {
		t.Fatalf("AbandonLease after Forget returned %d (dropped %d), left %d set aside; want 0 (3), 0", u, dropped, c.Back())
	}
}

// A lease started before the key was forgotten (Reset) puts nothing in
// when it lands: its units belong to the state that is gone.
func TestForgetDropsLeasesStartedBefore(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	before, _ := e.StartLease(1, 1, 0)
	if n := e.Forget(); n != 0 {
		t.Fatalf("Forget dropped %d of nothing", n)
	}
	_, kept, forgot := e.fill(Grant{Units: 9, Keep: 9, At: 1, Expires: 1e9, Epoch: before.Epoch}, 1, keepAll)
	e.EndLease()
	if !kept || !forgot || e.Units() != 0 {
		t.Fatalf("a lease from before Forget: kept %v, forgot %v, %d units held; want dropped", kept, forgot, e.Units())
	}
	after, _ := e.StartLease(1, 1, 2)
	if _, _, forgot := e.fill(Grant{Units: 9, Keep: 9, At: 1, Expires: 1e9, Epoch: after.Epoch}, 3, keepAll); forgot || e.Units() != 9 {
		t.Fatalf("a lease from after Forget: forgot %v, %d units held; want 9", forgot, e.Units())
	}
	e.EndLease()
	// Dropped too when the key was blocked here since (a block refuses a
	// grant, to give it back): back, it would go to the state that is gone.
	old, _ := e.StartLease(1, 1, 4)
	e.Forget()
	e.Block(1e12, 1e12)
	if _, kept, forgot := e.fill(Grant{Units: 9, Keep: 9, At: 1, Expires: 1e9, Epoch: old.Epoch}, 5, keepAll); !kept || !forgot {
		t.Fatalf("a lease from before Forget and Block: kept %v, forgot %v; want dropped, not given back", kept, forgot)
	}
}

// RetryAt's time and fair-share flag are one answer's, whatever races: a
// reader never sees one answer's time with another's flag. Times round
// trip exactly, negative ones (a manual clock's) too.
func TestRetryAtIsOneWord(t *testing.T) {
	e := &Entry[*int]{}
	for _, at := range []int64{0, 1, -1, 1_700_000_000_000_000_000, -5_000_000_000, 1 << 61} {
		for _, fs := range []bool{false, true} {
			e.setRetryAt(at, fs)
			if gotAt, gotFS := e.RetryAt(); gotAt != at || gotFS != fs {
				t.Fatalf("setRetryAt(%d, %v): RetryAt() = %d, %v", at, fs, gotAt, gotFS)
			}
		}
	}
	const a, b = int64(1_000), int64(2_000) // a goes with the fair share, b without
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200_000 {
			if i%2 == 0 {
				e.setRetryAt(a, true)
			} else {
				e.setRetryAt(b, false)
			}
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		if at, fs := e.RetryAt(); at == a && !fs || at == b && fs {
			t.Fatalf("RetryAt() = %d, %v: one answer's time with another's flag", at, fs)
		}
	}
}

// An entry that left its table starts no lease ahead of need: nobody would
// use its grant, which would only go back, and the call would count the
// instance among the key's members again after its eviction left them.
// ready is not asked (it counts the lease under way).
func TestGoneEntryStartsNoPrefetch(t *testing.T) {
	tb := NewBound[string](1, nil).NewTable("p", nil)
	e := tb.GetOrCreate("a")
	if e.Gone() {
		t.Fatal("a live entry is gone")
	}
	tb.GetOrCreate("b") // evicts a
	if !e.Gone() {
		t.Fatal("an evicted entry is not gone")
	}
	asked := false
	if _, ok := e.TryStartLease(func() int64 { return 0 }, func() bool { asked = true; return true }); ok || asked || e.Leasing() != nil {
		t.Fatalf("a gone entry started a prefetch (%v), asked ready (%v)", ok, asked)
	}
	// A request still leases its own units (the rest go back).
	if _, wait := e.StartLease(1, 1, 0); wait != nil || e.Leasing() == nil {
		t.Fatal("a request's lease of a gone entry did not start")
	}
	e.EndLease()
}

// A waiter's units count into the key's demand once, however often it
// retries (Entry.Retried): a caller denied every millisecond for a second
// is one request's units, not a thousand. A lease in between, which counts
// a retry's n itself, never measures below none.
func TestWaiterRetriesCountOnce(t *testing.T) {
	measure := func(retry bool) float64 {
		e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
		e.StartLease(0, 1, 0)
		e.EndLease()
		now := int64(0)
		for s := range 10 { // each 100ms: 5 callers arrive; each retries 100 times
			for range 5 {
				e.Wanted(2) // first try, denied
				for range 100 {
					if retry {
						e.Retried(2)
					}
					e.Wanted(2) // a retry, denied again
				}
			}
			now = int64(s+1) * 1e8
			if s%3 == 2 {
				// A retry that leases counts its n in the lease.
				if retry {
					e.Retried(2)
				}
				st, wait := e.StartLease(2, 1, now)
				if wait != nil || st.Rate < 0 {
					t.Fatalf("lease: rate %v, in flight %v", st.Rate, wait != nil)
				}
				e.EndLease()
				continue
			}
			e.StartLease(0, 1, now)
			e.EndLease()
		}
		return e.demand.estimate()
	}
	// 50 callers a second of 2 units: 100 units a second.
	r := measure(true)
	t.Logf("demand %.1f units/s", r)
	if r < 80 || r > 110 {
		t.Fatalf("demand %.0f units/s with retries taken back, want about 100", r)
	}
	if r := measure(false); r < 5000 {
		t.Fatalf("demand %.0f units/s with retries counted, want thousands (the test measures nothing)", r)
	}
}

// A retry taken back (Retried) with nothing counted since the last lease
// leaves the demand where an empty interval would, never below none: the
// lease's observation stops at 0.
func TestRetriedNeverMeasuresBelowNone(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	e.StartLease(0, 1, 0)
	e.EndLease()
	now := int64(0)
	for s := range 20 { // 10 units each 100ms: 100/s, past the first tau
		e.Wanted(10)
		now = int64(s+1) * 1e8
		e.StartLease(0, 1, now)
		e.EndLease()
	}
	e.Retried(1000)
	now += 1e8
	st, _ := e.StartLease(0, 1, now)
	e.EndLease()
	if st.Rate < 50 {
		t.Fatalf("demand %.1f after 100/s and a retry taken back, want what an empty 100ms leaves (about 90)", st.Rate)
	}
}
