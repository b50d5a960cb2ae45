package local

import (
	"math/rand"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestAnswerConservesUnits races Entry.Answer with everything else that
// moves an entry's units: takes, lapses, Forget (a Reset), Block,
// evictions by the bound, StartLease taking the units set aside along,
// and Clear (Close), at the end or while the rest goes on. Every unit an
// answer keeps is, in the end, taken, dropped as not worth a refund,
// handed back (set aside and taken along by a lease or DrainBack,
// evicted, blocked, cleared), or dropped by Forget; one the entry refused
// (gone) or forgot goes back to its caller. None is lost or counted
// twice, whatever the interleaving.
func TestAnswerConservesUnits(t *testing.T) {
	for seed := range int64(6) {
		conserve(t, seed)
	}
}

func conserve(t *testing.T, seed int64) {
	var evicted, kept, refused, forgot, taken, dropped, back, forgotten, blocked atomic.Int64
	b := NewBound[string](3, func(_ *Entry[string], units, _ int64) { evicted.Add(units) })
	tb := b.NewTable("p", nil)
	keys := []string{"a", "b", "c", "d", "e"}
	var now atomic.Int64
	now.Store(1)
	var entries sync.Map // every entry ever made, for DrainBack at the end
	get := func(k string) *Entry[string] {
		e := tb.GetOrCreate(k)
		entries.Store(e, true)
		return e
	}
	keep := func(units, at int64) bool { return at%3 != 0 }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(f func(r *rand.Rand)) {
		wg.Add(1)
		go func(r *rand.Rand) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				f(r)
			}
		}(rand.New(rand.NewSource(seed*100 + int64(rand.Intn(1000)))))
	}
	// Leases and their answers, two at a time (as an abandoned lease's
	// answer may land while the next one's does).
	var answers atomic.Int64
	for range 2 {
		run(func(r *rand.Rand) {
			e := get(keys[r.Intn(len(keys))])
			st, ch := e.StartLease(int64(r.Intn(3)), 1, now.Load())
			if ch != nil {
				return
			}
			back.Add(st.Back)
			if r.Intn(6) == 0 {
				// Never sent (Close began): what it took along is set
				// aside again, or handed back if the entry is gone.
				back.Add(-st.Back)
				u, _, gone := e.AbandonLease(st, now.Load())
				back.Add(u)
				forgotten.Add(gone) // (a Forget since it started)
				return
			}
			i := answers.Add(1)
			units := int64(1 + r.Intn(50))
			keepN := units - int64(r.Intn(2))
			t0 := now.Load()
			a := Answer{Word: Word{Limit: int(i % 3), Remaining: i, ResetAt: i}, Members: i%4 + 1,
				Grant:    Grant{Units: units, Keep: keepN, At: i, Expires: t0 + int64(1+r.Intn(40)), Epoch: st.Epoch},
				LowWater: i, RetryAt: t0 + 5, FairShare: i%2 == 0}
			if r.Intn(5) == 0 {
				a.Grant = Grant{}
				a.DenyUntil, a.DenyUnits = t0+3, 1
			}
			l, k, f := e.Answer(a, t0, keep)
			if a.Grant.Units > 0 {
				switch {
				case !k:
					refused.Add(keepN)
				case f:
					forgot.Add(keepN)
				default:
					kept.Add(keepN)
				}
			}
			dropped.Add(l.Units - l.Aside)
			e.EndLease()
		})
	}
	// Hits.
	for range 2 {
		run(func(r *rand.Rand) {
			if e, ok := tb.Get(keys[r.Intn(len(keys))]); ok {
				n := int64(1 + r.Intn(3))
				if _, ok := e.Take(n, now.Load()); ok {
					taken.Add(n)
				}
			}
		})
	}
	// The clock, lapses, Reset, Block, eviction.
	run(func(r *rand.Rand) {
		now.Add(int64(r.Intn(3)))
		e, ok := tb.Get(keys[r.Intn(len(keys))])
		if !ok {
			return
		}
		switch r.Intn(40) {
		case 0:
			forgotten.Add(e.Forget())
		case 1:
			u, _ := e.Block(now.Load()+10, now.Load()+5)
			blocked.Add(u)
		case 2:
			b.evict(e)
		case 3:
			get("z" + strconv.Itoa(r.Intn(3)))
		default:
			l := e.Lapse(now.Load(), keep)
			dropped.Add(l.Units - l.Aside)
		}
		runtime.Gosched()
	})
	cleared := false
	for answers.Load() < 3000 {
		if seed%2 == 1 && !cleared && answers.Load() >= 1500 {
			b.Clear() // Close, while leases land and hits take
			cleared = true
		}
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	b.Clear()
	entries.Range(func(k, _ any) bool {
		u, _ := k.(*Entry[string]).DrainBack()
		back.Add(u)
		return true
	})
	out := taken.Load() + dropped.Load() + back.Load() + evicted.Load() + forgotten.Load() + blocked.Load()
	if out != kept.Load() {
		t.Fatalf("seed %d: %d units kept by answers; out: taken %d + dropped %d + set aside and drained %d + evicted %d + forgotten %d + blocked %d = %d (refused %d, forgot %d)",
			seed, kept.Load(), taken.Load(), dropped.Load(), back.Load(), evicted.Load(), forgotten.Load(), blocked.Load(), out, refused.Load(), forgot.Load())
	}
}

// TestAnswerPutsWordAndUnitsInTogether is TestWordGoesWithItsUnits through
// Entry.Answer, as the leaser puts answers in: each answer grants 10
// units and says 10 fewer are left in Redis, so that a reader that pairs
// a word with the units of another answer sees word + units move.
func TestAnswerPutsWordAndUnitsInTogether(t *testing.T) {
	e := NewBound[string](10, nil).NewTable("p", nil).GetOrCreate("k")
	const total, answers = 1_000_000, 3000
	e.Answer(Answer{Word: Word{Remaining: total}, Members: 1}, 0, keepAll)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= answers; i++ {
			e.Answer(Answer{Word: Word{Remaining: total - 10*i}, Members: 1, LowWater: i, RetryAt: i, FairShare: true,
				Grant: Grant{Units: 10, Keep: 10, At: i, Expires: 1e18}}, 0, keepAll)
		}
	}()
	readPairs(t, e, total, done)
	if w, held := e.WordAndUnits(); w.Remaining+held != total || held != 10*answers {
		t.Fatalf("at the end: word %d + units %d", w.Remaining, held)
	}
}
