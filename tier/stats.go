package tier

import (
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
)

// PolicyStats counts an Engine's decisions under one policy name since
// New, each attempt of a Wait included, like Stats: Allowed and Denied by
// outcome, Local, Remote, Cached and Fallback by Source. Allowed + Denied =
// Local + Remote + Cached + Fallback. ShadowDenied counts those of the
// denials that were admitted all the same, the policy being in shadow mode
// (each is in Denied as well).
type PolicyStats struct {
	Allowed, Denied                 uint64
	Local, Remote, Cached, Fallback uint64
	ShadowDenied                    uint64
}

// add adds o to s.
func (s *PolicyStats) add(o PolicyStats) {
	s.Allowed += o.Allowed
	s.Denied += o.Denied
	s.Local += o.Local
	s.Remote += o.Remote
	s.Cached += o.Cached
	s.Fallback += o.Fallback
	s.ShadowDenied += o.ShadowDenied
}

// counts are the counters of one policy's decisions, updated atomically.
// Local hits are counted by the entries of the policy's table instead (no
// counter on the hit path); local holds those of dropped policies only.
type counts struct {
	allowed, denied          atomic.Uint64 // of Remote, Cached and Fallback decisions
	remote, cached, fallback atomic.Uint64
	local                    atomic.Uint64
	shadowDenied             atomic.Uint64 // (a subset of denied)
}

// add counts one decision from s.
func (c *counts) add(s Source, allowed bool) {
	switch s {
	case Remote:
		c.remote.Add(1)
	case Cached:
		c.cached.Add(1)
	case Fallback:
		c.fallback.Add(1)
	}
	if allowed {
		c.allowed.Add(1)
	} else {
		c.denied.Add(1)
	}
}

// load returns a snapshot of c.
func (c *counts) load() PolicyStats {
	local := c.local.Load()
	return PolicyStats{
		Allowed: c.allowed.Load() + local, Denied: c.denied.Load(),
		Local: local, Remote: c.remote.Load(), Cached: c.cached.Load(), Fallback: c.fallback.Load(),
		ShadowDenied: c.shadowDenied.Load(),
	}
}

// fold adds what st counted, its local hits included, to c.
func (c *counts) fold(st *policy) {
	s := st.stats()
	c.allowed.Add(s.Allowed - s.Local)
	c.denied.Add(s.Denied)
	c.local.Add(s.Local)
	c.remote.Add(s.Remote)
	c.cached.Add(s.Cached)
	c.fallback.Add(s.Fallback)
	c.shadowDenied.Add(s.ShadowDenied)
}

// stats returns a snapshot of st's counters, walking its table's entries
// for their hits.
func (st *policy) stats() PolicyStats {
	s := st.counts.load()
	if st.table != nil {
		local := st.table.Hits()
		s.Local += local
		s.Allowed += local
	}
	return s
}

// count counts a decision of p from s (not Local: a hit is counted by its
// entry) in the engine's and in p's counters.
func (e *Engine) count(p *remote.Policy, s Source, allowed bool) {
	switch s {
	case Remote:
		e.stats.remote.Add(1)
	case Cached:
		e.stats.cached.Add(1)
	case Fallback:
		e.stats.fallback.Add(1)
	}
	if allowed {
		e.stats.allowed.Add(1)
	} else {
		e.stats.denied.Add(1)
	}
	e.counts(p).add(s, allowed)
}

// counts returns p's counters: those of its state, or, for a policy that
// leases and whose state was dropped (the decision raced with the drop),
// the totals of dropped policies.
func (e *Engine) counts(p *remote.Policy) *counts {
	if e.leaser == nil || !Leasable(p) {
		return &e.tables.exact(p).counts
	}
	if st := e.tables.find(p); st != nil {
		return &st.counts
	}
	return &e.tables.others.dropped
}

// policyStats returns the counters of every policy the engine holds, by
// name (policies of one name summed), and the totals of those it dropped.
// It walks every entry: for Stats, not for the hot path.
func (e *Engine) policyStats() (map[string]PolicyStats, PolicyStats) {
	m := make(map[string]PolicyStats)
	e.tables.each(func(st *policy) {
		s := m[st.name]
		s.add(st.stats())
		m[st.name] = s
	})
	return m, e.tables.others.dropped.load()
}

// PolicyStats returns the counters of the policies named name that the
// engine holds, summed (a policy whose state was dropped counts in
// Stats.DroppedPolicies instead). It walks the states of every policy and
// the entries of those named name.
func (e *Engine) PolicyStats(name string) PolicyStats {
	var s PolicyStats
	e.tables.each(func(st *policy) {
		if st.name == name {
			s.add(st.stats())
		}
	})
	return s
}
