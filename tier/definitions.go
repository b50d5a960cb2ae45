package tier

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// RedefinitionGrace is how long after a redefinition of a policy's name
// the engine still decides with an earlier policy of the name (requests
// in flight while a config reload swapped policies), exactly; later, an
// earlier policy is refused.
const RedefinitionGrace = time.Second

// definition is what an engine decides a policy name with: its limits
// (remote.Policy.LimitsKey), the ID of the policy that made them the
// name's, and when (ns, the engine's clock). Immutable: a redefinition
// stores a new one. It keeps no policy, which would keep the policy from
// being collected.
type definition struct {
	limits string
	id     int
	since  int64
}

// verdict is check's answer for a policy.
type verdict uint8

const (
	current   verdict = iota // p has the name's limits: decide as usual
	straggler                // p was redefined less than RedefinitionGrace ago: decide exactly
)

// check admits p if its name has no definition in the engine yet (p makes
// one), or p has the definition's limits (made before or after: policies
// rebuilt per request, say), or p was made after the policy that made the
// definition (p redefines the name: a config reload rebuilt it). A policy
// made earlier with other limits is decided exactly, with its own limits,
// for RedefinitionGrace after the redefinition (requests in flight during a
// reload); later, it is refused with an error wrapping
// remote.ErrInvalidPolicy: two policies of one name with other limits are
// not used side by side, so that they do not silently share its keys'
// state. Usage in Redis carries over a redefinition: a key's state is named
// by the policy's name and each limit's algorithm and period, not its rate
// or burst. Admitting p costs one sync.Map load: check is not on the hit
// path, which a redefinition closes to the earlier policies (see
// unpublish).
func (e *Engine) check(p *remote.Policy) (verdict, error) {
	if v, ok := e.tables.others.defs.Load(p.Name()); ok {
		d := v.(*definition)
		if p.LimitsKey() == d.limits {
			return current, nil
		}
		if p.ID() < d.id {
			return e.late(p, d)
		}
	}
	return e.define(p)
}

// late is check's verdict on p, a policy d redefined.
func (e *Engine) late(p *remote.Policy, d *definition) (verdict, error) {
	if e.clock.Now().UnixNano()-d.since < int64(RedefinitionGrace) {
		return straggler, nil
	}
	e.stats.invalid.Add(1) // the one place the engine refuses a call's input
	return current, fmt.Errorf("%w: policy %q was redefined in this Limiter by a policy made later, with other limits (%s); "+
		"two policies of one name with other limits are not used side by side: give them other names",
		remote.ErrInvalidPolicy, p.Name(), d.limits)
}

// define makes p the definition of its name, unless another was made
// meanwhile that check would not admit p with. When p redefines the name,
// the states of its earlier policies with other limits are let go (see
// redefine).
func (e *Engine) define(p *remote.Policy) (verdict, error) {
	ts := &e.tables
	ts.mu.Lock()
	var old []*policy
	if v, ok := ts.others.defs.Load(p.Name()); ok {
		d := v.(*definition)
		switch {
		case p.LimitsKey() == d.limits:
			ts.mu.Unlock()
			return current, nil
		case p.ID() < d.id:
			ts.mu.Unlock()
			return e.late(p, d)
		}
		old = ts.unpublish(p)
	}
	ts.others.defs.Store(p.Name(), &definition{limits: p.LimitsKey(), id: p.ID(), since: e.clock.Now().UnixNano()})
	ts.mu.Unlock()
	e.redefine(old)
	return current, nil
}

// unpublish takes the states of the policies named as p is, with other
// limits, that lease, out of the tables, so that the hit path finds them
// no more, and returns them. It requires ts.mu held.
func (ts *tables) unpublish(p *remote.Policy) []*policy {
	other := func(st *policy) bool {
		return st.name == p.Name() && st.table.Policy().LimitsKey() != p.LimitsKey()
	}
	var old []*policy
	if d := ts.bySlot.Load(); d != nil {
		var copied []*policy
		for i, st := range *d {
			if st == nil || !other(st) {
				continue
			}
			if copied == nil {
				copied = append([]*policy(nil), *d...)
			}
			copied[i] = nil
			old = append(old, st)
		}
		if copied != nil {
			ts.bySlot.Store(&copied)
		}
	}
	ts.sparse.Range(func(k, v any) bool {
		if st := v.(*policy); other(st) {
			ts.sparse.Delete(k)
			old = append(old, st)
		}
		return true
	})
	return old
}

// redefine lets go of the states of policies a redefinition replaced:
// what this instance leased under them goes back to Redis (an eviction of
// each key: the units, and the key's membership), their cached denials
// go with them, and their counters move to the totals of dropped
// policies. It runs outside the tables' lock: an eviction may call back
// into them.
func (e *Engine) redefine(old []*policy) {
	for _, st := range old {
		for {
			st.table.Evict()
			if st.table.Retire() {
				break
			}
		}
		e.tables.others.dropped.fold(st)
	}
}

// errRedefined: a policy's name was redefined between check and the
// making of its state; check again.
var errRedefined = errors.New("tier: policy redefined meanwhile")

// forget drops the definition of name that the policy numbered id made,
// when that policy's state is dropped (so that the definitions of policies
// made at run time do not accumulate): a policy of the name used later
// defines it anew.
func (o *others) forget(name string, id int) {
	if v, ok := o.defs.Load(name); ok && v.(*definition).id == id {
		o.defs.CompareAndDelete(name, v)
	}
}
