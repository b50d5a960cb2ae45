package sync

import (
	"math"
	"time"

	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// plan returns the call for the lease of e that st starts at now, for a
// request of n units (0 for a prefetch): at least max(n, 1) units, or
// nothing, and at most the size, which is the demand over the horizon
// (Refresh, or three quarters of TTL; at least four measured round trips,
// so that a hot key's prefetch lands before its units run out), but not
// past the end of the current window, within [Min, Max] and the policy's
// capacity; a prefetch asks for at least one request of the size of the
// last (whole multiples of it). A cold key (no demand measured yet) asks
// for n alone: a key used once costs what one exact call does. The call
// also carries the units of e that lapsed and are still worth giving back
// (st.Back).
func (l *Leaser) plan(e *Entry, st local.Lease, n, now int64) *call {
	p := e.Policy()
	rate := st.Rate
	if st.Waiting {
		// Callers wait for the key's units: each asks once per retry and
		// sleeps meanwhile, so the demand measured is what the key got, not
		// what it wants. A waiter takes whatever comes, as a caller that
		// spins does: it wants the key's whole rate, and the fair share
		// (max-min) holds it to its part. Measured alone, the waiters of
		// each instance would say they want what they got, and the share
		// would leave them where they are.
		rate = max(rate, p.Rate())
	}
	h := max(l.cfg.horizon(), min(4*l.batcher.roundTrip(), l.cfg.TTL/2))
	want := rate * h.Seconds()
	if st.WindowEnd > now {
		want = min(want, rate*float64(st.WindowEnd-now)/1e9)
	}
	// Slow start: a lease grows at most fourfold over the last grant, so
	// that a first estimate of the demand (two observations) cannot take a
	// whole burst before the key's other instances have made themselves
	// known; a hot key still reaches a million units in ten leases.
	want = min(want, float64(max(growthFloor, growth*st.LastGrant)))
	size := max(int64(math.Ceil(want)), n, l.cfg.Min)
	if l.cfg.Max > 0 {
		size = min(size, l.cfg.Max)
	}
	least := max(n, 1)
	if n == 0 && st.Request > 1 {
		// Ahead of need, whole requests of the last one's size: Redis
		// grants whole multiples of Min, and a remainder below the size of
		// the requests that use it would wait unused until it lapses.
		least = min(st.Request, p.Capacity())
	}
	size = max(min(size, p.Capacity()), least)
	demand := int64(math.Ceil(rate))
	if n > 0 && st.Back == 0 && !st.Waiting && l.cfg.Min <= least &&
		(want < float64(2*least) || crowdShare(p, e.Members(), h) < float64(2*least)) {
		// This instance uses the key seldom: a horizon's demand is less
		// than two requests, so a lease would serve this request and
		// hardly another. Or the key is crowded: divided among the members
		// it had at the last lease, what it makes in a horizon is less than
		// two requests a member, and a lease would bring this one and
		// hardly another. It goes as an exact decision, for the request
		// alone and naming no member: it costs Redis what an exact call
		// does (a member's call costs several), holds nothing, and the
		// key's members are those that lease it.
		demand, size = 0, least
	}
	return &call{
		req: remote.Request{Policy: p, Key: e.Key(), Min: least, Max: size,
			Member: l.id, Demand: demand, Horizon: h,
			Back: st.Back, BackAt: st.BackAt},
		entry: e, start: now, epoch: st.Epoch, done: make(chan struct{}),
	}
}

// crowdShare is what a key of p makes in a horizon h, at most (each
// limit's capacity and what it refills meanwhile; the least of them),
// divided among its members: m, the members at its last lease; +Inf
// when m is 1 or unknown.
func crowdShare(p *remote.Policy, m int64, h time.Duration) float64 {
	if m <= 1 {
		return math.Inf(1)
	}
	supply := math.Inf(1)
	for _, lim := range p.Limits() {
		supply = min(supply, float64(lim.Burst)+float64(lim.Rate)*float64(h)/float64(lim.Period))
	}
	return supply / float64(m)
}

// growth bounds a lease to growth × the last grant, and at least
// growthFloor units (see plan).
const (
	growth      = 4
	growthFloor = 8
)

// apply puts the answer to c into its entry: the grant beyond the caller's n
// units into the allowance, valid from the request's start for TTL or the
// grant's own validity, whichever ends first; or the denial. The batcher
// calls it once per answered call: on the requester's goroutine, or on its
// own when the requester left (n is then 0).
func (l *Leaser) apply(c *call, n int64) {
	e, d, start := c.entry, c.d, c.start
	if e == nil { // Decide's: the requester's units alone
		switch {
		case d.Granted > 0 && n > 0:
			l.stats.used.Add(uint64(n))
		case d.Granted > 0: // the requester left
			l.batcher.queueBack(remote.Grant{Policy: c.req.Policy, Key: c.req.Key, Units: d.Granted, At: d.At})
		}
		return
	}
	now := l.Now()
	l.offset.Store(d.At - now/1e3)
	// ResetAt on the hit's reading of the time, which hits report it
	// against (a precise one would put it up to the coarse clock's lag
	// later, and a hit would report the reset that much further off).
	a := local.Answer{
		Word:    local.Word{Limit: d.Decider, Remaining: d.Remaining, ResetAt: l.cached() + int64(d.ResetAfter)},
		Members: d.Members, Shared: d.Members > 1 && (d.Granted == 0 || d.Next > 0),
	}
	if d.Members > 0 {
		l.sawMembers(d.Members, now)
	} else if c.req.Demand == 0 && d.Granted > 0 && 2*d.Remaining >= c.req.Policy.Capacity() {
		// An exact decision found the key half full or more: not
		// crowded (any more), whatever its members were.
		a.ForgetMembers = true
	}
	if d.Blocked {
		a.BlockedUntil = now + int64(d.RetryAfter)
	}
	if d.Granted == 0 {
		// From the reply, not the request: the wait counts from Redis's
		// now, later than start by the queue and half the round trip, and
		// counting from start would come back early and be denied again.
		a.RetryAt, a.FairShare = now+int64(d.RetryAfter), d.FairShare
		// Cached for TTL at most, then asked again: the denial may not
		// hold that long. Other members hold units of the key that come
		// back when they lapse; any instance may Reset the key, Refund
		// units or lift a block (Unblock). Under the fair share, not
		// before its next batch (Next), which may be later than the
		// limits' RetryAfter.
		a.DenyUntil, a.DenyUnits = now+min(int64(max(d.RetryAfter, d.Next)), int64(l.cfg.TTL)), max(n, 1)
		e.Answer(a, now, nil)
		return
	}
	l.stats.used.Add(uint64(n)) // the requester's
	valid := l.cfg.TTL
	g := local.Grant{Units: d.Granted, Keep: d.Granted - n, At: d.At, Epoch: c.epoch}
	if d.ValidFor >= 0 {
		valid = min(valid, d.ValidFor)
		g.WindowEnd = start + int64(d.ValidFor)
	}
	g.Expires = start + int64(valid)
	a.Grant = g
	// Low water: a fraction of the lease, and never less than what the
	// demand takes during a few round trips, so that a prefetch lands in
	// time. A lease of a few units is not renewed ahead: a renewal as the
	// last unit goes would start the next lease a request early.
	lw := float64(c.req.Demand) * 3 * float64(l.batcher.roundTrip()) / 1e9
	if lw < 1 {
		lw = 0 // not a unit's worth: a miss is as likely as a prefetch's use
	}
	if f := l.cfg.LowWater * float64(d.Granted); f >= 2 {
		lw = max(lw, math.Ceil(f))
	}
	a.LowWater = min(int64(math.Ceil(lw)), c.req.Max)
	if d.Next > 0 {
		// Held to its fair share: no lease before the share holds the next
		// batch; the units held are used meanwhile. For TTL at most, as a
		// denial.
		a.RetryAt, a.FairShare = now+int64(d.Next), true
		a.DenyUntil, a.DenyUnits = now+min(int64(d.Next), int64(l.cfg.TTL)), 1
	}
	lapsed, kept, forgot := e.Answer(a, now, l.keep(e, now))
	l.lapsed(lapsed)
	switch {
	case !kept: // e left its table while the lease was in flight: nobody will use them
		l.giveBack(e, g.Keep, g.At)
	case forgot: // e's key was reset meanwhile: they would go back to a state that is gone
		l.stats.dropped.Add(uint64(g.Keep))
	}
}
