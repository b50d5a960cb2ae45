package local

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// took is whether a Take took.
func took(_ int64, ok bool) bool { return ok }

func TestAllowanceTakeAndExpiry(t *testing.T) {
	var a allowance
	if took(a.take(1, 0)) {
		t.Fatal("zero allowance granted a unit")
	}
	if stale, _ := a.add(5, 111, 100, 10); stale != 0 {
		t.Fatalf("stale %d from an empty allowance", stale)
	}
	if left, ok := a.take(3, 50); !ok || left != 2 || a.units() != 2 {
		t.Fatalf("Take(3): %d left, %v; units %d", left, ok, a.units())
	}
	if took(a.take(3, 50)) {
		t.Fatal("took 3 of 2")
	}
	if took(a.take(1, 100)) {
		t.Fatal("took a unit at its expiry")
	}
	if a.hits() != 1 {
		t.Fatalf("hits %d", a.hits())
	}
	if u, at := a.drainExpired(100); u != 2 || at != 111 || a.units() != 0 {
		t.Fatalf("DrainExpired = %d, %d; units left %d", u, at, a.units())
	}
	if a.taken() != 3 {
		t.Fatalf("Taken() = %d, want the 3 taken", a.taken())
	}
}

// A lease added while units are held keeps both expiries: the older units
// are used first and lapse at their own time, the new ones at theirs.
func TestAllowanceGenerations(t *testing.T) {
	var a allowance
	a.add(4, 10, 100, 0)  // expires at 100
	a.add(6, 20, 150, 50) // a prefetch at 50: 4 old + 6 new
	if left, ok := a.take(3, 60); !ok || left != 7 || a.units() != 7 {
		t.Fatalf("after Take(3): %d left (%v), %d units, want 7", left, ok, a.units())
	}
	// At 100 the one old unit left lapses; the 6 new ones do not.
	if u, at := a.drainExpired(100); u != 1 || at != 10 {
		t.Fatalf("DrainExpired(100) = %d, %d; want the 1 old unit granted at 10", u, at)
	}
	if !took(a.take(6, 120)) || took(a.take(1, 120)) {
		t.Fatal("the new units did not serve until their own expiry")
	}
	// A third lease while prev still holds units: cur joins prev under
	// prev's earlier expiry, never a later one.
	var b allowance
	b.add(2, 1, 100, 0)
	b.add(2, 2, 200, 10)
	b.add(2, 3, 300, 20) // prev (2 units, expiring at 100) gets cur's 2
	if took(b.take(5, 99)) || !took(b.take(4, 99)) {
		t.Fatal("want 4 units in prev and no single take of 5 across generations")
	}
	if u, at := b.drainExpired(100); u != 0 || at != 0 {
		t.Fatalf("DrainExpired(100) = %d, %d; prev was used up", u, at)
	}
	if !took(b.take(2, 299)) || took(b.take(1, 299)) {
		t.Fatal("the newest lease did not serve until 300")
	}
	// Units past their expiry are not merged: add hands them back, with the
	// oldest grant time.
	var c allowance
	c.add(3, 7, 100, 0)
	c.add(3, 8, 150, 50)
	if stale, at := c.add(5, 9, 400, 200); stale != 6 || at != 7 || c.units() != 5 {
		t.Fatalf("stale %d at %d, units %d; want 6 at 7 and 5 held", stale, at, c.units())
	}
	if u, at := c.drain(); u != 5 || at != 9 || c.units() != 0 || c.taken() != 0 {
		t.Fatalf("Drain = %d, %d; Taken %d", u, at, c.taken())
	}
}

func TestAllowanceConcurrentTakesNeverExceedTheLease(t *testing.T) {
	var a allowance
	a.add(1000, 1, math.MaxInt64, 0)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				n := int64(1 + i%3)
				if took(a.take(n, 1)) {
					taken.Add(n)
				}
			}
		}()
	}
	wg.Wait()
	if got := taken.Load() + a.units(); got != 1000 {
		t.Fatalf("taken + left = %d, want 1000", got)
	}
	if a.taken() != taken.Load() {
		t.Fatalf("Taken() = %d, want %d", a.taken(), taken.Load())
	}
	if a.units() > 2 {
		t.Fatalf("%d units left although takes of 1..3 kept trying", a.units())
	}
}

// A take of one unit that finds none leaves the count below zero (one
// atomic add, nothing given back): that counts as none, to every reader and
// to the next grant, which is held whole.
func TestAllowanceTakesOfOneFromNone(t *testing.T) {
	var a allowance
	a.add(2, 1, 100, 0)
	for i := range 5 {
		if left, ok := a.take(1, 10); ok != (i < 2) || left != max(0, int64(1-i)) {
			t.Fatalf("take %d: %d left, %v", i, left, ok)
		}
	}
	if a.units() != 0 || a.taken() != 2 || a.hits() != 2 || a.holds(1, 10) {
		t.Fatalf("after 3 takes from none: units %d, taken %d, hits %d", a.units(), a.taken(), a.hits())
	}
	if got := a.takeUpTo(4, 10); got != 0 {
		t.Fatalf("TakeUpTo from none took %d", got)
	}
	a.add(3, 2, 200, 20) // cur, below zero, moves nothing to prev
	if a.units() != 3 || !took(a.take(3, 30)) || took(a.take(1, 30)) {
		t.Fatalf("a grant of 3 after takes from none: units %d", a.units())
	}
	a.take(1, 30)
	a.add(4, 3, 300, 40) // cur below zero again; prev, emptied by a Take of 3, is 0
	if u, _ := a.drain(); u != 4 || a.taken() != 5 {
		t.Fatalf("Drain = %d, Taken %d; want 4 and the 5 taken", u, a.taken())
	}
}

// Units are neither made nor lost while takes of one and of several run
// against leases, merges and drains: what was added is what was taken,
// drained and is left.
func TestAllowanceConservesUnits(t *testing.T) {
	var a allowance
	var taken, out atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := int64(1 + g%2*2)
				if took(a.take(n, 10)) {
					taken.Add(n)
				}
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	var added int64
	var mu sync.Mutex // Adds and drains run one at a time, as under Entry.mu
	for i := range 2000 {
		mu.Lock()
		stale, _ := a.add(int64(1+i%7), int64(i), int64(11+i%2*100), int64(i%3*10))
		added += int64(1 + i%7)
		out.Add(stale)
		if i%5 == 0 {
			u, _ := a.drain()
			out.Add(u)
		}
		if i%3 == 1 {
			a.merge(5)
		}
		mu.Unlock()
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	if got := taken.Load() + out.Load() + a.units(); got != added {
		t.Fatalf("taken %d + drained %d + held %d = %d, want the %d added", taken.Load(), out.Load(), a.units(), got, added)
	}
	if a.taken() != taken.Load() {
		t.Fatalf("Taken() = %d, want %d", a.taken(), taken.Load())
	}
}

// Hits count requests, not units: a Take of 5 is one hit, a failed Take
// none, a TakeUpTo one only when CountHit says its units decided; neither
// a lease nor a drain changes them.
func TestHitsCountRequests(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	e.fill(Grant{Units: 100, Keep: 100, At: 1, Expires: 1e9}, 0, keepAll)
	for range 3 {
		e.Take(1, 10)
	}
	e.Take(5, 10)
	if took(e.Take(1000, 10)) {
		t.Fatal("took 1000 of 92")
	}
	if h := e.Hits(); h != 4 {
		t.Fatalf("hits %d after three Takes of 1 and one of 5, want 4", h)
	}
	if got := e.TakeUpTo(10, 10); got != 10 {
		t.Fatalf("TakeUpTo(10) = %d", got)
	}
	e.CountHit()
	e.TakeUpTo(3, 10) // units of a decision Redis made: no hit
	e.fill(Grant{Units: 50, Keep: 50, At: 2, Expires: 2e9}, 20, keepAll)
	if u, _ := e.drain(); u != 129 {
		t.Fatalf("drained %d, want 100-8-13+50", u)
	}
	if h := e.Hits(); h != 5 {
		t.Fatalf("hits %d, want 5", h)
	}
}

// Hits never go down, whatever runs alongside: Takes of one and of several
// units, leases and drains under the entry's lock; at the end they count
// every successful Take.
func TestHitsAreMonotone(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	var hits atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if took(e.Take(int64(1+g%2*2), 10)) {
					hits.Add(1)
				}
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Go(func() { // leases and drains
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.fill(Grant{Units: 40, Keep: 40, At: int64(i), Expires: 1e9}, 1, keepAll)
			if i%3 == 0 {
				e.drain()
			}
			runtime.Gosched()
		}
	})
	var last uint64
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		h := e.Hits()
		if h < last {
			close(stop)
			wg.Wait()
			t.Fatalf("hits went down from %d to %d", last, h)
		}
		last = h
	}
	close(stop)
	wg.Wait()
	if h := e.Hits(); h != uint64(hits.Load()) {
		t.Fatalf("hits %d at the end, want the %d successful Takes", h, hits.Load())
	}
}

func TestAllowanceDenial(t *testing.T) {
	var a allowance
	a.deny(100, 5)
	if d, left := a.denied(70, 5); !d || left != 30 {
		t.Fatalf("Denied(70, 5) = %v, %d", d, left)
	}
	if d, _ := a.denied(70, 4); d {
		t.Fatal("a denial of 5 units denied 4")
	}
	if d, _ := a.denied(100, 5); d {
		t.Fatal("denial outlived its end")
	}
}

func TestDemandConverges(t *testing.T) {
	var d demand
	now := int64(1e9)
	d.observe(0, now)
	for i := 0; i < 100; i++ { // 200 units per 100ms: 2000/s, for 10τ
		now += 1e8
		d.observe(200, now)
	}
	if r := d.estimate(); r < 1999 || r > 2001 { // 2000·(1 - e^-10)
		t.Fatalf("rate %.1f, want about 2000", r)
	}
	for i := 0; i < 50; i++ { // idle
		now += 1e8
		d.observe(0, now)
	}
	if r := d.estimate(); r > 20 {
		t.Fatalf("rate %.1f after 5s idle, want near 0", r)
	}
}

// A key's first requests arriving together are not a rate: four at once,
// then two more a round trip (300µs) later, give at most what they would
// over firstWindow, not thousands a second. A steady demand is then learnt
// from the average since the first request, well within tau.
func TestDemandStartsFromAnAverage(t *testing.T) {
	var d demand
	now := int64(1e9)
	d.observe(4, now)
	now += 300e3
	d.observe(2, now)
	if r, most := d.estimate(), 2*1e9/float64(firstWindow); r > most {
		t.Fatalf("rate %.0f after two requests 300µs apart, want at most %.0f (over firstWindow)", r, most)
	}
	for range 20 { // 2400/s, in steps of 5ms: 100ms
		now += 5e6
		d.observe(12, now)
	}
	if r := d.estimate(); r < 0.97*2400 || r > 1.03*2400 {
		t.Fatalf("rate %.0f after 100ms of 2400/s, want within 3%% of it", r)
	}
}

// A seed starts the demand at a key's first use, before its entry was
// made, with the units of the uses between counted: the entry's first
// observation then gives the average since the first use, whether it comes
// within tau or after it. A seed too close to now is no rate, and a demand
// already started keeps its own.
func TestDemandSeed(t *testing.T) {
	const t0 = int64(5e9)
	for _, tc := range []struct {
		name      string
		at        int64 // the entry's first observation, of 1 unit
		want      float64
		preStart  bool
		seedFirst int64
	}{
		{name: "within tau", at: t0 + 5e8, want: 2 / 0.5, seedFirst: t0},
		{name: "after tau", at: t0 + 12e8, want: 2 / 1.2, seedFirst: t0},
		{name: "too recent", at: t0 + 1e6, want: 0, seedFirst: t0},
		{name: "started", at: t0 + 5e8, want: 0, seedFirst: t0 - 1e9, preStart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d demand
			if tc.preStart {
				d.observe(1, tc.at)
			}
			d.seed(tc.seedFirst, 1, tc.at)
			d.observe(1, tc.at)
			if r := d.estimate(); math.Abs(r-tc.want) > 1e-9 {
				t.Fatalf("rate %v, want %v", r, tc.want)
			}
		})
	}
}

// A rising demand is followed four times as fast as a falling one: from
// 100/s to 1000/s, 0.5s later the estimate is past 860 (1 - e^-2); from
// 1000/s back to 100/s, 0.5s later it is still above 600 (e^-0.5).
func TestDemandRisesFasterThanItFalls(t *testing.T) {
	var d demand
	now := int64(1e9)
	d.observe(0, now)
	steady := func(perStep int64, steps int) {
		for range steps {
			now += 1e7 // 10ms
			d.observe(perStep, now)
		}
	}
	steady(1, 1000) // 100/s for 10s
	steady(10, 50)  // 1000/s for 0.5s
	if r := d.estimate(); r < 0.86*900+100 {
		t.Fatalf("rate %.1f half a second into 1000/s, want past %.0f", r, 0.86*900+100)
	}
	steady(10, 1000) // settle at 1000/s
	steady(1, 50)    // 100/s for 0.5s
	if r := d.estimate(); r < 0.6*900+100 {
		t.Fatalf("rate %.1f half a second into 100/s, want still above %.0f", r, 0.6*900+100)
	}
}

func TestBoundEvictsLeastRecentlyLeasedAndHandsBackUnits(t *testing.T) {
	type evicted struct {
		key       string
		units, at int64
	}
	var got []evicted
	b := NewBound(2, func(e *Entry[string], units, at int64) { got = append(got, evicted{e.Key(), units, at}) })
	p, q := b.NewTable("p", nil), b.NewTable("q", nil)
	a := p.GetOrCreate("a")
	a.fill(Grant{Units: 5, Keep: 5, At: 77, Expires: math.MaxInt64}, 0, keepAll)
	c := q.GetOrCreate("c")
	if p.GetOrCreate("a") != a {
		t.Fatal("GetOrCreate made a second entry for one key")
	}
	b.touch(a) // c is now the least recently leased
	q.GetOrCreate("d")
	if len(got) != 1 || got[0].key != "c" || !c.gone.Load() {
		t.Fatalf("evicted %+v, want c", got)
	}
	if _, ok := q.Get("c"); ok {
		t.Fatal("evicted entry still in its table")
	}
	p.GetOrCreate("e") // evicts a, with its 5 units
	if len(got) != 2 || got[1] != (evicted{"a", 5, 77}) || a.Units() != 0 {
		t.Fatalf("evicted %+v, want a with 5 units granted at 77", got)
	}
	if b.Len() != 2 {
		t.Fatalf("Len = %d", b.Len())
	}
	b.Clear()
	if b.Len() != 0 || len(got) != 4 {
		t.Fatalf("after Clear: Len %d, evicted %d", b.Len(), len(got))
	}
	n := 0
	p.all.Range(func(any, any) bool { n++; return true })
	q.all.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d entries left in tables after Clear", n)
	}
}

// Keys looked up a few times each never make the table rebuild its
// snapshot (each rebuild copies every entry, and would serve none of
// them); a key looked up again and again does, and is then in it.
func TestTableSnapshotServesRepeatedKeysOnly(t *testing.T) {
	b := NewBound[string](100000, nil)
	tab := b.NewTable("p", nil)
	for i := range 20000 {
		k := strconv.Itoa(i)
		tab.GetOrCreate(k)
		for range repeated - 1 {
			tab.Get(k)
		}
	}
	if tab.rebuilding.Load() || tab.read.Load() != nil {
		t.Fatal("keys looked up fewer than repeated times each rebuilt the snapshot")
	}
	hot := tab.GetOrCreate("hot")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := tab.read.Load(); m != nil && (*m)["hot"] == hot {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a key looked up again and again never reached the snapshot")
		}
		tab.Get("hot")
		if tab.rebuilding.Load() {
			time.Sleep(time.Millisecond)
		}
	}
}

// Keys move into the table's snapshot after enough lookups (in the
// background); an entry evicted while in the snapshot is gone for Get, Range
// and GetOrCreate alike.
func TestTableReadMapAndEviction(t *testing.T) {
	var gone []string
	b := NewBound(3, func(e *Entry[string], _, _ int64) { gone = append(gone, e.Key()) })
	tab := b.NewTable("p", nil)
	x, y := tab.GetOrCreate("x"), tab.GetOrCreate("y")
	for i := 0; i < 200; i++ { // enough misses to rebuild the snapshot
		if e, ok := tab.Get("x"); !ok || e != x {
			t.Fatalf("Get(x) = %p, %v; want %p", e, ok, x)
		}
		if i == 100 {
			time.Sleep(10 * time.Millisecond) // let the rebuild run
		}
	}
	b.touch(y)
	tab.GetOrCreate("z")
	tab.GetOrCreate("w") // evicts x, the least recently leased, from the read map
	if len(gone) != 1 || gone[0] != "x" {
		t.Fatalf("evicted %v, want [x]", gone)
	}
	if _, ok := tab.Get("x"); ok {
		t.Fatal("Get found an evicted entry")
	}
	keys := map[string]bool{}
	tab.all.Range(func(k, _ any) bool { keys[k.(string)] = true; return true })
	if len(keys) != 3 || keys["x"] {
		t.Fatalf("the table holds %v, want y, z, w", keys)
	}
	if x2 := tab.GetOrCreate("x"); x2 == x || x2.gone.Load() {
		t.Fatal("GetOrCreate returned the evicted entry")
	}
	if e, ok := tab.Get("x"); !ok || e == x {
		t.Fatal("Get did not find the new entry of x")
	}
}

// A lease of an entry: one at a time (the others wait for it, and a
// prefetch gives up); it measures the demand, takes along the units set
// aside, and its grant fills the allowance; Redis's word is what hits read.
func TestEntryLease(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	// A request's lease with no demand known, of a leaser whose least lease
	// is more than the request: it leases more, and the others wait for it.
	other := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	other.StartLease(2, 5, 0)
	if l, wait := other.StartLease(1, 5, 0); wait == nil || l.Cold {
		t.Fatalf("a second lease: %+v, %v; want the first in flight, not cold (it asks 5)", l, wait)
	}
	first, wait := e.StartLease(2, 1, 0)
	if wait != nil || first.Rate != 0 || e.Leasing() == nil {
		t.Fatalf("first lease: %+v, %v", first, wait)
	}
	if l, wait := e.StartLease(1, 1, 0); wait == nil || !l.Cold {
		t.Fatalf("a second lease: %+v, %v; want the first in flight, cold (a request's, no demand known)", l, wait)
	}
	if _, ok := e.TryStartLease(at(0), func() bool { return true }); ok {
		t.Fatal("a prefetch started while a lease is in flight")
	}
	if lp, kept, _ := e.fill(Grant{Units: 10, Keep: 8, At: 5, Expires: 2e9, WindowEnd: 3e9}, 0, keepAll); lp.Units != 0 || !kept {
		t.Fatalf("lapsed %d, kept %v from an empty allowance", lp.Units, kept)
	}
	e.answered(Word{Limit: 1, Remaining: 90, ResetAt: 4e9}, 3, true)
	e.lowWater.Store(2)
	e.EndLease()
	if w := e.LastWord(); w != (Word{Limit: 1, Remaining: 90, ResetAt: 4e9}) || e.Members() != 3 || !e.Shared() || e.LowWater() != 2 {
		t.Fatalf("word %+v, members %d, shared %v, low water %d", w, e.Members(), e.Shared(), e.LowWater())
	}
	e.answered(Word{}, 0, false) // members not counted: the last count stays
	if e.Members() != 3 || e.Shared() {
		t.Fatalf("members %d, shared %v", e.Members(), e.Shared())
	}
	if !took(e.Take(4, 1e9)) {
		t.Fatal("the grant's units are not in the allowance")
	}
	e.Wanted(2)
	e.setAside(3, 7, 1e9)
	e.setAside(1, 6, 1.5e9)
	if _, ok := e.TryStartLease(at(1e9), func() bool { return false }); ok || e.Leasing() != nil {
		t.Fatal("a prefetch started although ready said no")
	}
	// 4 taken and 2 wanted over the second since the first lease.
	l, ok := e.TryStartLease(at(1e9), func() bool { return true })
	if !ok || l.Rate != 6 || l.WindowEnd != 3e9 || l.LastGrant != 10 || l.Back != 4 || l.BackAt != 6 {
		t.Fatalf("prefetch: %+v, %v; want rate 6, window end 3e9, last grant 10, 4 units back granted at 6", l, ok)
	}
	if l, wait := e.StartLease(1, 1, 1e9); wait == nil || l.Cold {
		t.Fatalf("a request meeting a prefetch: %+v, %v; want it in flight, not cold", l, wait)
	}
	e.setAside(2, 9, 2e9)
	if u, _ := e.DrainOldBack(3e9); u != 0 {
		t.Fatalf("drained %d units set aside while a lease is in flight", u)
	}
	e.EndLease()
	if u, _ := e.DrainOldBack(2e9 - 1); u != 0 {
		t.Fatalf("drained %d units set aside after before", u)
	}
	if u, at := e.DrainOldBack(2e9); u != 2 || at != 9 {
		t.Fatalf("DrainOldBack = %d, %d; want 2 units granted at 9", u, at)
	}
	e.setAside(5, 11, 3e9)
	if u, at := e.DrainBack(); u != 5 || at != 11 {
		t.Fatalf("DrainBack = %d, %d; want 5, 11", u, at)
	}
}

// The hit path: one key, units to spare.
func BenchmarkTake(b *testing.B) {
	bound := NewBound[string](1000, nil)
	tab := bound.NewTable("p", nil)
	e := tab.GetOrCreate("user:42")
	e.fill(Grant{Units: math.MaxInt64 / 2, Keep: math.MaxInt64 / 2, At: 1, Expires: math.MaxInt64}, 0, keepAll)
	key := string([]byte("user:42"))
	b.Run("seq", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, _ := tab.Get(key)
			e.Take(1, 1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e, _ := tab.Get(key)
				e.Take(1, 1)
			}
		})
	})
}

// BenchmarkIdleKeyMemory reports the heap an idle key costs in the local
// store: its entry, with units held, in a table and in the bound's LRU.
func BenchmarkIdleKeyMemory(b *testing.B) {
	const keys = 100_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		bound := NewBound[string](keys, nil)
		tab := bound.NewTable("p", nil)
		for i := 0; i < keys; i++ {
			e := tab.GetOrCreate("user:" + strconv.Itoa(1_000_000+i)) // 12-byte keys
			e.fill(Grant{Units: 10, Keep: 10, At: 1, Expires: math.MaxInt64}, 0, keepAll)
		}
		for i := 0; i < keys; i++ { // enough lookups to build the snapshot
			tab.Get("user:" + strconv.Itoa(1_000_000+i))
		}
		time.Sleep(100 * time.Millisecond) // the snapshot is built in the background
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/keys, "B/key")
		runtime.KeepAlive(tab)
	}
}

// A table tells its owner when its last entry leaves it; retired, it makes
// no entry, and its hits outlive its entries.
func TestTableEmptiesAndRetires(t *testing.T) {
	var emptied []*Table[string]
	onEmpty := func(tab *Table[string]) { emptied = append(emptied, tab) }
	b := NewBound[string](1, nil)
	p, q := b.NewTable("p", onEmpty), b.NewTable("q", onEmpty)
	a := p.GetOrCreate("a")
	a.fill(Grant{Units: 5, Keep: 5, At: 1, Expires: math.MaxInt64}, 0, keepAll)
	a.Take(1, 0)
	a.Take(2, 0)
	if p.Retire() {
		t.Fatal("a table with an entry retired")
	}
	q.GetOrCreate("b") // evicts a: p is empty
	if len(emptied) != 1 || emptied[0] != p || p.Hits() != 2 || p.Policy() != "p" {
		t.Fatalf("emptied %v, hits %d", emptied, p.Hits())
	}
	if !p.Retire() {
		t.Fatal("an empty table did not retire")
	}
	if !p.Retire() {
		t.Fatal("a retired table said it was not")
	}
	if e := p.GetOrCreate("a"); e != nil {
		t.Fatal("a retired table made an entry")
	}
	b.Clear() // b leaves q
	if len(emptied) != 2 || emptied[1] != q {
		t.Fatalf("emptied %v", emptied)
	}
}

// What is left of one lease and the next lease's units serve together a
// request that neither holds alone: Merge moves the newer units to the
// older generation, under its (earlier) expiry, so that none outlives its
// own lease; it moves nothing when either generation is empty or expired.
func TestAllowanceMerge(t *testing.T) {
	var a allowance
	a.add(3, 1, 10, 0) // a lease's remainder, valid until 10
	a.add(4, 2, 20, 1) // the next lease, valid until 20
	if took(a.take(5, 2)) {
		t.Fatal("took 5 units that no generation holds alone")
	}
	if a.merge(10) {
		t.Fatal("merged into an expired generation")
	}
	if !a.merge(2) || !took(a.take(5, 2)) || a.units() != 2 {
		t.Fatalf("after Merge: units %d, want 5 taken and 2 left", a.units())
	}
	if took(a.take(1, 10)) {
		t.Fatal("a merged unit outlived the earlier lease's expiry")
	}
	if a.merge(3) {
		t.Fatal("merged with nothing in the newer generation")
	}
	if u, at := a.drainExpired(10); u != 2 || at != 1 || a.taken() != 5 {
		t.Fatalf("drained %d units granted at %d, taken %d; want 2 at 1, 5 taken", u, at, a.taken())
	}
}

// keepAll sets aside every unit that lapses.

// at is a reading of the time that is always t.
func at(t int64) func() int64 { return func() int64 { return t } }

// TestWordGoesWithItsUnits: an answer's word and units are put in
// one after the other; a reader between the two must not pair the new
// word with the old units. Each answer here grants 10 units and says 10
// fewer are left in Redis, and nothing is taken: word + units is the same
// whenever a reader looks.
func TestWordGoesWithItsUnits(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	const total = 1_000_000
	e.answered(Word{Remaining: total}, 1, false)
	// Two writers, as an abandoned lease's answer and the next one's may
	// be: each answer says 10 fewer are left than the last one put in.
	done := make(chan struct{})
	var writers sync.WaitGroup
	var answered atomic.Int64
	for range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for range 1000 {
				e.beginAnswer()
				i := answered.Add(1)
				e.answered(Word{Remaining: total - 10*i}, 1, false)
				runtime.Gosched() // widen the window between the two
				e.fill(Grant{Units: 10, Keep: 10, At: i, Expires: 1e18}, 0, keepAll)
				e.endAnswer()
			}
		}()
	}
	go func() {
		writers.Wait()
		close(done)
	}()
	readPairs(t, e, total, done)
	if w, held := e.WordAndUnits(); w.Remaining+held != total {
		t.Fatalf("at the end: word %d + units %d", w.Remaining, held)
	}
}

// readPairs reads e's word and units as a hit does (the answer count
// around the two reads, both again when an answer came between) until done
// is closed, and fails t when a pair does not add up to total.
func readPairs(t *testing.T, e *Entry[string], total int64, done <-chan struct{}) {
	t.Helper()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			return
		default:
		}
		v := e.Answers()
		held := e.Units() // as a Take of nothing would leave them
		w := e.LastWord()
		if !e.Unchanged(v) {
			w, held = e.WordAndUnits()
		}
		if w.Remaining+held != total {
			t.Fatalf("read %d: word %d + units %d = %d, want %d", reads, w.Remaining, held, w.Remaining+held, total)
		}
		runtime.Gosched()
	}
}

// A key used at random (Poisson arrivals) and observed often is estimated
// at about its demand, whatever the rate and however often it leases: the
// mean estimate over a minute stays within 1.25 times it (a single average
// that rises four times as fast as it falls ran at 1.1 to 3.5 times it,
// and a fair share's claim with it).
func TestDemandOfRandomArrivals(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	poisson := func(mean float64) int64 {
		if mean > 50 { // (e^-mean underflows; the normal is close)
			return max(0, int64(math.Round(mean+math.Sqrt(mean)*rng.NormFloat64())))
		}
		var k int64
		for p := rng.Float64(); p > math.Exp(-mean); p *= rng.Float64() {
			k++
		}
		return k
	}
	for _, rate := range []float64{5, 13, 40, 200, 2000} {
		for _, every := range []time.Duration{10 * time.Millisecond, 33 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
			var d demand
			now := int64(1e9)
			d.observe(0, now)
			var sum float64
			var n int
			for step := range int(60 * time.Second / every) {
				now += int64(every)
				d.observe(poisson(rate*every.Seconds()), now)
				if time.Duration(step)*every >= 5*time.Second { // past the first average
					sum += d.estimate()
					n++
				}
			}
			if mean := sum / float64(n); mean < 0.9*rate || mean > 1.25*rate {
				t.Errorf("%.0f/s observed every %v: mean estimate %.1f, %.2f times the demand, want within [0.9, 1.25]", rate, every, mean, mean/rate)
			}
		}
	}
}
