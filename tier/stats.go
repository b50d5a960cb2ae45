package tier

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// PolicyStats counts an Engine's decisions under one policy name since
// New, each attempt of a Wait included, like Stats: Allowed and Denied by
// outcome, Local, Remote, Cached, Fallback and Busy by Source. Allowed +
// Denied = Local + Remote + Cached + Fallback + Busy. ShadowDenied counts
// those of the denials that were admitted all the same, the policy being
// in shadow mode (each is in Denied as well). Its denials by limit are in
// Stats.DeniedBy.
type PolicyStats struct {
	Allowed, Denied                 uint64
	Local, Remote, Cached, Fallback uint64
	Busy                            uint64
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
	s.Busy += o.Busy
	s.ShadowDenied += o.ShadowDenied
}

// LimitName names l: "10 req/s (burst 10)", "100 req/min (fixed window)",
// "5 req/s (leaky bucket, queue 10)". It is the key of Stats.DeniedBy's
// counts, and the root package's Limit.String. (l's Burst is resolved:
// windows have Burst = Rate.)
func LimitName(l remote.Limit) string {
	var per string
	switch l.Period {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "min"
	case time.Hour:
		per = "h"
	default:
		per = l.Period.String()
	}
	switch l.Algorithm {
	case remote.CalendarWindow:
		c := l.Calendar
		if c.Unit == remote.CalendarWeek {
			return fmt.Sprintf("%d req/calendar week (%s, from %s)", l.Rate, c.Location, c.FirstDay)
		}
		return fmt.Sprintf("%d req/calendar %s (%s)", l.Rate, c.Unit, c.Location)
	case remote.TokenBucket:
		return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, per, l.Burst)
	case remote.LeakyBucket:
		return fmt.Sprintf("%d req/%s (leaky bucket, queue %d)", l.Rate, per, l.Burst)
	default:
		return fmt.Sprintf("%d req/%s (%s)", l.Rate, per, l.Algorithm)
	}
}

// counts are the counters of one policy's decisions, updated atomically.
// Local hits are counted by the entries of the policy's table instead (no
// counter on the hit path); local holds those of dropped policies only.
// deniedBy[i] counts the denials by limits[i], the limits of the policy
// whose state this is (nil in the totals of dropped policies, whose
// deniedBy is unused): a denial's only cost, one atomic add.
type counts struct {
	allowed, denied          atomic.Uint64 // of Remote, Cached and Fallback decisions
	remote, cached, fallback atomic.Uint64
	busy                     atomic.Uint64
	local                    atomic.Uint64
	shadowDenied             atomic.Uint64 // (a subset of denied)
	// retired is set when the policy's state is let go, before its
	// counters move to the totals of dropped policies: a decision counted
	// here after that moves its own count (see moved).
	retired  atomic.Bool
	limits   []remote.Limit
	deniedBy [remote.MaxLimits]atomic.Uint64
}

// add counts one decision of p from s; by is the index in p of the limit
// that denied it, or -1 (allowed, or no limit decided).
func (c *counts) add(p *remote.Policy, s Source, allowed bool, by int) {
	switch s {
	case SourceRemote:
		c.remote.Add(1)
	case SourceCached:
		c.cached.Add(1)
	case SourceFallback:
		c.fallback.Add(1)
	case SourceBusy:
		c.busy.Add(1)
	}
	if allowed {
		c.allowed.Add(1)
		return
	}
	c.denied.Add(1)
	if by < 0 {
		return
	}
	// p's limits are c's, but for a policy that shares the state of
	// another of its name with the same limits in another order (see
	// tables.sparse): then by is found among c's.
	l := p.Limits()[by]
	if by >= len(c.limits) || c.limits[by] != l {
		if by = slices.Index(c.limits, l); by < 0 {
			return
		}
	}
	c.deniedBy[by].Add(1)
}

// load returns a snapshot of c, without its denials by limit (see
// policy.deniedBy).
func (c *counts) load() PolicyStats {
	local := c.local.Load()
	return PolicyStats{
		Allowed: c.allowed.Load() + local, Denied: c.denied.Load(),
		Local: local, Remote: c.remote.Load(), Cached: c.cached.Load(), Fallback: c.fallback.Load(), Busy: c.busy.Load(),
		ShadowDenied: c.shadowDenied.Load(),
	}
}

// fold moves what st counted, its local hits included, to c (the totals
// of dropped policies: DeniedBy folds into nothing), retiring st's
// counters first: each count is then in one place, st's or c's, whatever
// decision races with the move.
func (c *counts) fold(st *policy) {
	st.counts.retired.Store(true)
	c.moved(&st.counts)
	if st.table != nil {
		c.local.Add(st.table.Hits()) // (Allowed counts local apart: see load)
	}
}

// moved moves from's counters to c, leaving from's at zero.
func (c *counts) moved(from *counts) {
	c.allowed.Add(from.allowed.Swap(0))
	c.denied.Add(from.denied.Swap(0))
	c.local.Add(from.local.Swap(0))
	c.remote.Add(from.remote.Swap(0))
	c.cached.Add(from.cached.Swap(0))
	c.fallback.Add(from.fallback.Swap(0))
	c.busy.Add(from.busy.Swap(0))
	c.shadowDenied.Add(from.shadowDenied.Swap(0))
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

// deniedBy adds st's denials by limit, named (LimitName), to by.
func (st *policy) deniedBy(by map[string]uint64) {
	for i, l := range st.counts.limits {
		by[LimitName(l)] += st.counts.deniedBy[i].Load()
	}
}

// count counts a decision of p from s (not Local: a hit is counted by its
// entry) in the engine's and in p's counters.
func (e *Engine) count(p *remote.Policy, s Source, allowed bool) {
	e.countBy(p, s, allowed, -1)
}

// countBy is count for a decision that names the limit that decided it:
// by is that limit's index in p when the decision is a denial a limit made
// (-1: none, as for a blocked key).
func (e *Engine) countBy(p *remote.Policy, s Source, allowed bool, by int) {
	e.countIn(e.counts(p), p, s, allowed, by)
}

// countIn is countBy with the policy's counters c given.
func (e *Engine) countIn(c *counts, p *remote.Policy, s Source, allowed bool, by int) {
	switch s {
	case SourceRemote:
		e.stats.remote.Add(1)
	case SourceCached:
		e.stats.cached.Add(1)
	case SourceFallback:
		e.stats.fallback.Add(1)
	case SourceBusy:
		e.stats.busy.Add(1)
	}
	if allowed {
		e.stats.allowed.Add(1)
	} else {
		e.stats.denied.Add(1)
	}
	c.add(p, s, allowed, by)
	e.movedLate(c)
}

// movedLate moves the counts of c, a policy's counters, to the totals of
// dropped policies when its state was let go meanwhile: a decision that
// raced with the drop is counted, once.
func (e *Engine) movedLate(c *counts) {
	if c.retired.Load() {
		e.tables.others.dropped.moved(c)
	}
}

// deciding returns the index of the limit that made d, a decision on a
// denial, or -1 when none did (a blocked key; an allowed d).
func deciding(d Decision) int {
	if d.Allowed || d.Blocked {
		return -1
	}
	return d.Limit
}

// CountInvalid counts a call that the root refused for invalid input
// (Stats.Invalid): on the error path only.
func (e *Engine) CountInvalid() { e.stats.invalid.Add(1) }

// counts returns p's counters: those of its state, or, for a policy that
// leases and whose state was dropped (the decision raced with the drop),
// the totals of dropped policies.
func (e *Engine) counts(p *remote.Policy) *counts {
	if e.leaser == nil || !leasable(p) {
		return &e.tables.exact(p).counts
	}
	if st := e.tables.find(p); st != nil {
		return &st.counts
	}
	return &e.tables.others.dropped
}

// policyStats returns the counters of every policy the engine holds, by
// name (policies of one name summed), the totals of those it dropped, and
// the held policies' denials by limit (Stats.DeniedBy). It walks every
// entry: for Stats, not for the hot path.
func (e *Engine) policyStats() (map[string]PolicyStats, PolicyStats, map[string]map[string]uint64) {
	m := make(map[string]PolicyStats)
	by := make(map[string]map[string]uint64)
	e.tables.each(func(st *policy) {
		s := m[st.name]
		s.add(st.stats())
		m[st.name] = s
		if by[st.name] == nil {
			by[st.name] = make(map[string]uint64, len(st.counts.limits))
		}
		st.deniedBy(by[st.name])
	})
	return m, e.tables.others.dropped.load(), by
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
