package local

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Table holds the entries of one policy by key, in one Bound.
//
// Get never takes a lock. Every live entry is in a sync.Map; a typed,
// immutable snapshot of it (no interface hashing) answers the keys that
// have been there a while, and is rebuilt in the background once lookups
// have missed it a quarter of its size times (at least 64), so that the
// misses pay for the rebuild. Only the misses of an entry looked up
// `repeated` times or more count: a key used a few times and never again
// (one per client IP of a crawl) would make rebuilds that copy the whole
// table and never serve it.
type Table[P any] struct {
	all  sync.Map                             // string -> *Entry: every live entry
	read atomic.Pointer[map[string]*Entry[P]] // a snapshot of all; evicted entries may linger (Get skips them)
	// misses counts lookups read could not answer since the last rebuild.
	misses     atomic.Int64
	rebuilding atomic.Bool
	bound      *Bound[P]
	policy     P
	// live counts the entries made and not removed, or is -1 once the
	// table is retired.
	live     atomic.Int64
	goneHits atomic.Uint64 // the hits of the entries removed
	onEmpty  func(*Table[P])
}

// Get returns the entry of key, if there is one.
func (t *Table[P]) Get(key string) (*Entry[P], bool) {
	if m := t.read.Load(); m != nil {
		if e, ok := (*m)[key]; ok && !e.gone.Load() {
			return e, true
		}
	}
	v, ok := t.all.Load(key)
	if !ok {
		return nil, false
	}
	e := v.(*Entry[P])
	if e.lookups.Load() >= repeated || e.lookups.Add(1) >= repeated {
		t.missed()
	}
	return e, true
}

// repeated is how many lookups of an entry the snapshot missed before
// its misses count toward a rebuild.
const repeated = 16

// missed counts a lookup the snapshot could not answer, and starts a
// rebuild after enough.
func (t *Table[P]) missed() {
	size := int64(0)
	if m := t.read.Load(); m != nil {
		size = int64(len(*m))
	}
	if t.misses.Add(1) < max(64, size/4) || !t.rebuilding.CompareAndSwap(false, true) {
		return
	}
	go func() {
		m := make(map[string]*Entry[P], size+size/4)
		t.all.Range(func(k, v any) bool {
			m[k.(string)] = v.(*Entry[P])
			return true
		})
		t.read.Store(&m)
		t.misses.Store(0)
		t.rebuilding.Store(false)
	}()
}

// GetOrCreate returns the entry of key, creating it if needed, which may
// evict the least recently leased entry of the bound. It returns nil when
// the table is retired and has no entry of key: its owner makes a new
// table.
func (t *Table[P]) GetOrCreate(key string) *Entry[P] {
	if e, ok := t.Get(key); ok {
		return e
	}
	for { // count the entry in live first, so that Retire sees it
		n := t.live.Load()
		if n < 0 {
			return nil
		}
		if t.live.CompareAndSwap(n, n+1) {
			break
		}
	}
	e := &Entry[P]{key: key, policy: t.policy, table: t}
	b := t.bound
	// Counted among the entries being made, which Clear waits for: an
	// entry in the table but not yet in the bound would escape Clear, and
	// what a lease put in it would never go back.
	b.adding.Add(1)
	defer b.adding.Add(-1)
	if b.cleared.Load() {
		// Cleared (Close): the entry is made gone and kept nowhere.
		t.left()
		e.retire()
		return e
	}
	if v, loaded := t.all.LoadOrStore(key, e); loaded {
		t.left() // (the entry found is counted)
		return v.(*Entry[P])
	}
	if b.beforeAdd != nil {
		b.beforeAdd()
	}
	b.add(e)
	return e
}

// remove drops e, already retired, from the table, keeping its hits.
func (t *Table[P]) remove(e *Entry[P]) {
	if t.all.CompareAndDelete(e.key, e) {
		t.goneHits.Add(e.Hits())
		t.left()
	}
}

func (t *Table[P]) left() {
	if t.live.Add(-1) == 0 && t.onEmpty != nil {
		t.onEmpty(t)
	}
}

// Retire marks the table retired if it has no entries, and reports whether
// it is. A retired table stays empty: its owner drops it, and makes a new
// one when it needs one.
func (t *Table[P]) Retire() bool {
	return t.live.CompareAndSwap(0, -1) || t.live.Load() < 0
}

// Policy returns the table's policy.
func (t *Table[P]) Policy() P { return t.policy }

// Hits returns the hits of the table's entries, removed ones included. It
// walks the entries: for statistics.
func (t *Table[P]) Hits() uint64 {
	n := t.goneHits.Load()
	t.all.Range(func(_, v any) bool { n += v.(*Entry[P]).Hits(); return true })
	return n
}

// Evict evicts every entry of the table from its bound. An entry made
// meanwhile may stay: call Retire, and Evict again while it fails.
func (t *Table[P]) Evict() {
	t.all.Range(func(_, v any) bool {
		t.bound.evict(v.(*Entry[P]))
		return true
	})
}

// Bound caps the number of entries across its tables, evicting the least
// recently leased. An evicted entry leaves its table, and its units go to
// the eviction callback, called outside the lock, for a refund.
type Bound[P any] struct {
	mu      sync.Mutex
	lru     *simplelru.LRU[*Entry[P], struct{}] // requires mu held
	evicted []*Entry[P]                         // requires mu held
	onEvict func(e *Entry[P], units, at int64)
	// cleared: Clear has begun; adding counts the entries being made,
	// which Clear waits for.
	cleared   atomic.Bool
	adding    atomic.Int64
	beforeAdd func() // a test's hook: an entry is in its table, not yet in the bound
}

// NewBound returns a Bound of at most max entries (max >= 1). onEvict, if
// not nil, receives each evicted entry with the units it held.
func NewBound[P any](max int, onEvict func(e *Entry[P], units, at int64)) *Bound[P] {
	b := &Bound[P]{onEvict: onEvict}
	b.lru, _ = simplelru.NewLRU[*Entry[P], struct{}](max, func(e *Entry[P], _ struct{}) {
		b.evicted = append(b.evicted, e) // requires mu held: simplelru calls back inside Add
	})
	return b
}

// NewTable returns an empty table of the bound for policy. onEmpty, if not
// nil, is called each time the table's last entry leaves it, outside the
// bound's lock: its owner may Retire the table and drop it.
func (b *Bound[P]) NewTable(policy P, onEmpty func(*Table[P])) *Table[P] {
	return &Table[P]{bound: b, policy: policy, onEmpty: onEmpty}
}

// Len returns the number of entries in the bound.
func (b *Bound[P]) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lru.Len()
}

// touch marks e as recently leased; never on the hit path, which takes no
// lock.
func (b *Bound[P]) touch(e *Entry[P]) {
	b.mu.Lock()
	b.lru.Get(e)
	b.mu.Unlock()
}

func (b *Bound[P]) add(e *Entry[P]) {
	b.mu.Lock()
	b.lru.Add(e, struct{}{})
	gone := b.evicted
	b.evicted = nil
	b.mu.Unlock()
	for _, old := range gone {
		b.remove(old)
	}
}

// evict removes e if it is still in the bound.
func (b *Bound[P]) evict(e *Entry[P]) {
	b.mu.Lock()
	b.lru.Remove(e) // which calls back: e joins evicted
	gone := b.evicted
	b.evicted = nil
	b.mu.Unlock()
	for _, old := range gone {
		b.remove(old)
	}
}

func (b *Bound[P]) remove(e *Entry[P]) {
	units, at := e.retire()
	e.table.remove(e)
	if b.onEvict != nil {
		b.onEvict(e, units, at)
	}
}

// Range calls f for every entry of the bound, until f returns false,
// outside the bound's lock.
func (b *Bound[P]) Range(f func(*Entry[P]) bool) {
	b.mu.Lock()
	all := b.lru.Keys()
	b.mu.Unlock()
	for _, e := range all {
		if !f(e) {
			return
		}
	}
}

// Clear removes every entry, handing its units to onEvict. Entries being
// made meanwhile are waited for; those made after are gone as soon as made
// and hold nothing.
func (b *Bound[P]) Clear() {
	b.cleared.Store(true)
	for b.adding.Load() > 0 {
		runtime.Gosched()
	}
	b.mu.Lock()
	all := b.lru.Keys()
	b.lru.Purge()
	b.evicted = nil
	b.mu.Unlock()
	for _, e := range all {
		b.remove(e)
	}
}
