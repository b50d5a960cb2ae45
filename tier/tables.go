package tier

import (
	"sync"
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// denseIDs bounds the policy IDs (remote.Policy.ID) whose tables are
// found by index; those of later policies are found in a map. A process
// makes its policies at start, as a rule: a thousand is plenty, and the
// slice of a thousand is 8 KiB.
const denseIDs = 1024

// tables holds an engine's local tables, one per policy that leases. A
// table is found on the hit path with one atomic load and an index, by the
// policy's ID, without hashing; a policy numbered denseIDs or more is
// found in a map. The engine's tables go with the engine: no policy points
// to them.
type tables struct {
	// byID is indexed by policy ID (nil: no table yet). A published slice
	// is never written: a new table publishes a copy.
	byID atomic.Pointer[[]*leasesync.Table]
	mu   sync.Mutex // serializes the copies of byID, and clear
	// sparse holds the tables of policies numbered denseIDs or more:
	// *remote.Policy -> *leasesync.Table.
	sparse sync.Map
	closed bool // requires mu held: no table is kept after clear
}

// lookup returns the table of the policy numbered id, if it is below
// denseIDs and has one, else nil: one atomic load and an index, small
// enough to be inlined on the hit path.
func (ts *tables) lookup(id int) *leasesync.Table {
	if d := ts.byID.Load(); d != nil && id < len(*d) {
		return (*d)[id]
	}
	return nil
}

// getOrMake returns p's table, when lookup has none: from sparse, or a new
// one of l, kept (but after clear).
func (ts *tables) getOrMake(p *remote.Policy, l *leasesync.Leaser) *leasesync.Table {
	id := p.ID()
	if id >= denseIDs {
		if v, ok := ts.sparse.Load(p); ok {
			return v.(*leasesync.Table)
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var old []*leasesync.Table
	if d := ts.byID.Load(); d != nil {
		old = *d
	}
	switch {
	case id < len(old) && old[id] != nil:
		return old[id]
	case id >= denseIDs:
		if v, ok := ts.sparse.Load(p); ok {
			return v.(*leasesync.Table)
		}
	}
	t := l.NewTable(p)
	switch {
	case ts.closed:
	case id >= denseIDs:
		ts.sparse.Store(p, t)
	default:
		d := make([]*leasesync.Table, max(len(old), id+1))
		copy(d, old)
		d[id] = t
		ts.byID.Store(&d)
	}
	return t
}

// clear drops every table, for Close: the engine keeps none after it.
func (ts *tables) clear() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	ts.byID.Store(nil)
	ts.sparse.Clear()
}
