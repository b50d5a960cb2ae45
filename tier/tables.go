package tier

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// denseSlots bounds the policies whose tables an engine finds by index
// (its slots, numbered in the order it first leases under them); those of
// later policies are found in a map. A program makes its policies at
// start, as a rule: a thousand is plenty, and the slice of a thousand is
// 8 KiB.
const denseSlots = 1024

// policy is an engine's state of one policy: its local table, when it
// leases, and the counters of its decisions.
type policy struct {
	table *leasesync.Table // nil for a policy decided exactly
	name  string
	// counts counts its decisions but its local hits, which the entries of
	// its table count (see local.Table.Hits).
	counts counts
}

// tables holds an engine's state of each policy it decided. The state of a
// policy that leases (its table) is found on the hit path with two atomic
// loads and an index, by the policy's slot in this engine (remote.Slot,
// which the policy caches for the engine that used it last), without
// hashing; a policy past the engine's denseSlots is found in a map. The
// engine numbers the policies it leases under itself: what other code in
// the process made changes nothing here.
//
// States are bounded by the key store, so that policies made at run time
// do not accumulate: the table of a policy past the dense slots is
// dropped when its last entry leaves it (evicted by the Leaser's bound),
// and the state of a policy decided exactly goes when the policy is
// collected; their counters are folded into the totals of dropped
// policies. The first denseSlots policies the engine leases under, made
// at start as a rule, keep their state while the engine lives. The
// engine's states go with the engine: no policy points to them but
// through its slot cache, which names the engine.
type tables struct {
	// bySlot is indexed by slot (nil: no table yet). A published slice
	// is never written: a new table publishes a copy.
	bySlot atomic.Pointer[[]*policy]
	// slots holds the slot of each policy given one: *remote.Policy ->
	// *remote.Slot; used counts the slots given. Both under mu.
	slots sync.Map
	used  int
	// owner names this engine in the slots it gives.
	owner *remote.Owner
	mu    sync.Mutex // serializes the copies of bySlot, the drops, and clear
	// sparse holds the states of policies that lease past the dense
	// slots, by name: string -> *policy. Policies of one name with the
	// same limits share one (policies made per request, from a plan or a
	// claim, lease as one); a name has one set of limits at a time (see
	// Engine.check).
	sparse sync.Map
	closed bool // requires mu held: no table is kept after clear
	// others is allocated on its own: the cleanups of exact policies refer
	// to it, and must not keep the engine alive.
	others *others
}

// others holds the states of the policies decided exactly, and the totals
// of the policies dropped.
type others struct {
	exact   sync.Map // int (policy ID) -> *policy
	dropped counts
	// defs holds each policy name's definition: string -> *definition.
	// Stored under tables.mu (see Engine.define); dropped with the state
	// of the policy that made it (see forget).
	defs sync.Map
}

// lookup returns the state in slot i, if it has one, else nil: one
// atomic load and an index, small enough to be inlined on the hit path.
func (ts *tables) lookup(i int) *policy {
	if d := ts.bySlot.Load(); d != nil && i < len(*d) {
		return (*d)[i]
	}
	return nil
}

// find returns p's state, if p leases and has one: cached, else
// findSlow. It makes none.
func (ts *tables) find(p *remote.Policy) *policy {
	if st := ts.cached(p); st != nil {
		return st
	}
	return ts.findSlow(p)
}

// cached returns p's state by the slot p caches for this engine, if it
// does and the state is there, else nil (then findSlow tells): two atomic
// loads and an index, inlined on the hit path, which calls findSlow
// itself when it must.
func (ts *tables) cached(p *remote.Policy) *policy {
	if s := p.Slot(); s != nil && s.Owner == ts.owner {
		return ts.lookup(s.Index)
	}
	return nil
}

// findSlow is find for a policy whose cached slot is another engine's, or
// none: its slot here, which it caches again, or its state in the map.
func (ts *tables) findSlow(p *remote.Policy) *policy {
	if v, ok := ts.slots.Load(p); ok {
		s := v.(*remote.Slot)
		p.SetSlot(s)
		return ts.lookup(s.Index)
	}
	return ts.findSparse(p)
}

// findSparse is find for a policy past the dense slots: the state of its
// name, if it has p's limits.
func (ts *tables) findSparse(p *remote.Policy) *policy {
	if v, ok := ts.sparse.Load(p.Name()); ok {
		if st := v.(*policy); st.table.Policy() == p || st.table.Policy().LimitsKey() == p.LimitsKey() {
			return st
		}
	}
	return nil
}

// getOrMake returns p's state, with a table of l, when find has none: one
// made now, kept (but after clear). A policy that a redefinition of its
// name replaced since the caller's check gets errRedefined.
func (ts *tables) getOrMake(p *remote.Policy, l *leasesync.Leaser) (*policy, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if v, ok := ts.others.defs.Load(p.Name()); ok && v.(*definition).limits != p.LimitsKey() {
		return nil, errRedefined
	}
	var old []*policy
	if d := ts.bySlot.Load(); d != nil {
		old = *d
	}
	var slot *remote.Slot
	if v, ok := ts.slots.Load(p); ok {
		slot = v.(*remote.Slot)
		if slot.Index < len(old) && old[slot.Index] != nil {
			return old[slot.Index], nil
		}
	} else if ts.used >= denseSlots || ts.closed {
		if st := ts.findSparse(p); st != nil {
			return st, nil
		}
	}
	st := &policy{name: p.Name(), counts: counts{limits: p.Limits()}}
	switch {
	case ts.closed:
		st.table = l.NewTable(p, nil)
	case slot == nil && ts.used >= denseSlots:
		st.table = l.NewTable(p, ts.emptied)
		ts.sparse.Store(p.Name(), st)
	default:
		if slot == nil {
			slot = &remote.Slot{Owner: ts.owner, Index: ts.used}
			ts.used++
			ts.slots.Store(p, slot)
		}
		st.table = l.NewTable(p, nil)
		d := make([]*policy, max(len(old), slot.Index+1))
		copy(d, old)
		d[slot.Index] = st
		ts.bySlot.Store(&d)
		p.SetSlot(slot)
	}
	return st, nil
}

// emptied drops t, the table of policies past the dense slots, when
// its last entry has left it and no entry came in since: its counters go
// to the totals of dropped policies, and nothing of the engine's points to
// its policies any more. A request that finds the table retired makes a
// new one (see Engine.entry).
func (ts *tables) emptied(t *leasesync.Table) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	p := t.Policy()
	v, ok := ts.sparse.Load(p.Name())
	if !ok || v.(*policy).table != t || !t.Retire() {
		return // not kept, or not empty any more
	}
	ts.sparse.Delete(p.Name())
	ts.others.dropped.fold(v.(*policy))
	ts.others.forget(p.Name(), p.ID())
}

// exact returns the state of p, a policy decided exactly, making it on
// first use; it goes when p is collected.
func (ts *tables) exact(p *remote.Policy) *policy {
	o := ts.others
	if v, ok := o.exact.Load(p.ID()); ok {
		return v.(*policy)
	}
	v, loaded := o.exact.LoadOrStore(p.ID(), &policy{name: p.Name(), counts: counts{limits: p.Limits()}})
	if !loaded {
		runtime.AddCleanup(p, o.drop, exactID{p.ID(), p.Name()})
	}
	return v.(*policy)
}

// exactID names an exact policy's state for its cleanup.
type exactID struct {
	id   int
	name string
}

// drop folds the state of the exact policy numbered id into the totals
// of dropped policies, and drops the definition it made: the policy was
// collected.
func (o *others) drop(x exactID) {
	if v, ok := o.exact.LoadAndDelete(x.id); ok {
		o.dropped.fold(v.(*policy))
	}
	o.forget(x.name, x.id)
}

// each calls f with every state kept. It walks every map: for Stats.
func (ts *tables) each(f func(*policy)) {
	if d := ts.bySlot.Load(); d != nil {
		for _, st := range *d {
			if st != nil {
				f(st)
			}
		}
	}
	for _, m := range []*sync.Map{&ts.sparse, &ts.others.exact} {
		m.Range(func(_, v any) bool { f(v.(*policy)); return true })
	}
}

// clear drops every state, for Close, folding their counters into the
// totals of dropped policies: the engine keeps none after it.
func (ts *tables) clear() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	o := ts.others
	if d := ts.bySlot.Load(); d != nil {
		for _, st := range *d {
			if st != nil {
				o.dropped.fold(st)
			}
		}
	}
	ts.bySlot.Store(nil)
	ts.slots.Range(func(k, _ any) bool { ts.slots.Delete(k); return true })
	for _, m := range []*sync.Map{&ts.sparse, &o.exact} {
		m.Range(func(k, _ any) bool {
			if v, ok := m.LoadAndDelete(k); ok { // (an exact one's cleanup may have taken it)
				o.dropped.fold(v.(*policy))
			}
			return true
		})
	}
}
