package sync

import (
	"math"
	"time"

	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// plan returns the call for e's lease st at now, for a request of n units
// (0 for a prefetch): at least max(n, 1) units, at most the demand over the
// horizon (at least four round trips, so that a hot key's prefetch lands
// in time), not past the window's end, within [Min, Max] and the policy's
// capacity. A prefetch asks for whole requests of the last one's size; a
// cold key asks for n alone. The call carries the units set aside
// (st.Back).
func (l *Leaser) plan(e *Entry, st local.Lease, n, now int64) *call {
	p := e.Policy()
	rate := st.Rate
	if st.Waiting && p.Global() == nil {
		// A waiter asks once and sleeps until its retry, so the measured
		// demand is what the key got: it wants the key's whole rate, and
		// the fair share holds it to its part. Not from a region's pool,
		// which its instances take from as they come: there a member's
		// demand only adds up to its region's, which claims a share of the
		// worldwide limit, and every instance of a region whose pool ran
		// dry would claim the whole rate for it.
		rate = max(rate, p.Rate())
	}
	h := max(l.cfg.horizon(), min(4*l.batcher.roundTrip(), l.cfg.TTL/2))
	want := rate * h.Seconds()
	if st.WindowEnd > now {
		want = min(want, rate*float64(st.WindowEnd-now)/1e9)
	}
	// Slow start: a first estimate of the demand cannot take a whole burst
	// before the key's other instances have made themselves known.
	want = min(want, float64(max(growthFloor, growth*st.LastGrant)))
	size := max(int64(math.Ceil(want)), n, l.cfg.Min)
	if l.cfg.Max > 0 {
		size = min(size, l.cfg.Max)
	}
	least := max(n, 1)
	if n == 0 && st.Request > 1 {
		// Redis grants whole multiples of Min: a remainder smaller than
		// the requests would lapse unused.
		least = min(st.Request, p.Capacity())
	}
	size = max(min(size, p.Capacity()), least)
	// The demand Redis shares the key by, in whole units a second: the
	// nearest (a demand of 2.001 a second is not 3, which would claim a
	// fair share it does not use), and at least 1 for any demand at all.
	demand := int64(math.Round(rate))
	if rate > 0 {
		demand = max(demand, 1)
	}
	if n > 0 && st.Back == 0 && !st.Waiting && l.cfg.Min <= least &&
		(want < float64(2*least) || crowdShare(p, e.Members(), h) < float64(2*least) ||
			want < growthFloor && e.Answers() > 0 && empty(e.LastWord(), now)) {
		// Seldom used here, or crowded (a horizon's supply shared by the
		// members is under two requests each), or a small lease of a key
		// that Redis last said was empty (and has not refilled since): a
		// lease would serve this request and hardly another. It goes as an
		// exact decision, naming no member, which costs Redis a fraction
		// of a member's call.
		demand, size = 0, least
	}
	return &call{
		req: remote.Request{Policy: p, Key: e.Key(), Min: least, Max: size,
			Member: l.id, Demand: demand, Horizon: h,
			Back: st.Back, BackAt: st.BackAt},
		entry: e, start: now, epoch: st.Epoch, clears: st.Clears, rate: rate,
	}
}

// empty reports whether w, Redis's last word on a key, says it is empty
// at now: it had no room left, and was not full again by now (its ResetAt,
// on the clock hits read, which runs with now; 0 when not known: see
// apply).
func empty(w local.Word, now int64) bool {
	return w.Remaining == 0 && (w.ResetAt == 0 || now < w.ResetAt)
}

// crowdShare is the most a key of p supplies in a horizon h, divided
// among its m members; +Inf when m is 1 or unknown.
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

// A lease is at most growth × the last grant, and at least growthFloor.
const (
	growth      = 4
	growthFloor = 8
)

// apply puts the answer to c into its entry: the grant beyond the
// caller's n units, valid from the request's start for TTL or the grant's
// own validity, whichever ends first; or the denial. The batcher calls it
// once per answered call, with n 0 when the requester left.
func (l *Leaser) apply(c *call, n int64) {
	e, d, start := c.entry, c.d, c.start
	now := l.Now()
	l.offset.Store(d.At - now/1e3)
	// ResetAt on the hit's time, which hits report it against.
	resetAt := l.cached() + int64(d.ResetAfter)
	if d.Remaining == 0 && d.ResetAfter <= 0 {
		// Empty, and not known when it has room again (a region's pool
		// with no refill on its way): empty until a reply says otherwise.
		resetAt = 0
	}
	a := local.Answer{
		Word:    local.Word{Limit: d.Decider, Remaining: d.Remaining, ResetAt: resetAt},
		Members: d.Members, Shared: d.Members > 1 && (d.Granted == 0 || d.Next > 0),
		Clears: c.clears,
	}
	if d.Members > 0 {
		l.sawMembers(d.Members, now)
	} else if c.req.Demand == 0 && d.Granted > 0 && 2*d.Remaining >= c.req.Policy.Capacity() {
		// An exact decision found the key half full: not crowded.
		a.ForgetMembers = true
	}
	if d.Blocked {
		a.BlockedUntil = now + int64(d.RetryAfter)
	}
	if d.Granted == 0 {
		// From the reply, not the request's start: counting from start
		// would come back early and be denied again.
		a.RetryAt, a.FairShare = now+int64(d.RetryAfter), d.FairShare
		// Cached for TTL at most: other members' units come back, and any
		// instance may Reset, Refund or Unblock. Under the fair share, not
		// before its next batch.
		a.DenyUntil, a.DenyUnits = now+min(int64(max(d.RetryAfter, d.Next)), int64(l.cfg.TTL)), max(n, 1)
		if c.req.Policy.EmptyPool(d) {
			// A region's pool ran dry, not the worldwide limit: not
			// cached, a request waits for the pool's refill instead.
			a.DenyUntil = now
		}
		e.Answer(a, now, nil)
		l.due(e, c.req, c.rate, d, now, a.DenyUntil)
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
	// Low water: a fraction of the lease, and at least a few round trips'
	// demand, so that a prefetch lands in time. A lease of a few units is
	// not renewed ahead, which would start the next lease a request early.
	lw := float64(c.req.Demand) * 3 * float64(l.batcher.roundTrip()) / 1e9
	if lw < 1 {
		lw = 0 // not a unit's worth: a miss is as likely as a prefetch's use
	}
	if f := l.cfg.LowWater * float64(d.Granted); f >= 2 {
		lw = max(lw, math.Ceil(f))
	}
	a.LowWater = min(int64(math.Ceil(lw)), c.req.Max)
	if d.Next > 0 {
		// Held to its fair share: no lease before the next batch, for TTL
		// at most.
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
	default:
		l.due(e, c.req, c.rate, d, now, a.DenyUntil)
	}
}

// due leases e's next batch in the background as the wait of d for it
// (a denial's, or a fair share's next batch) ends, at until (ns), unless
// a request has leased by then: when e's key is a token bucket that this
// instance alone asks more of than the key makes (a hot key: not one of a
// fleet's many members, each with a little demand, whose batches would
// lapse unused and cost a call each).
// Units that come while a hot instance waits for its batch wait in the
// bucket (or its part of it); should its demand stop a moment then
// (demand that shifts), the bucket fills and what comes after is lost,
// where exact mode, which took every unit as it came, lost none: taken at
// once, they wait in this instance (for TTL at most, within the bound)
// for its demand to come back. Under a flood a request leases first, and
// the timer finds units or a lease in flight: nothing more is sent.
// An entry has one due pending at most, at its last answer's time (that
// answer's denial is the one the entry holds): answers that come while
// one is pending move it, and start no goroutine of their own. An entry
// that left its table gets none: nobody would use the batch.
func (l *Leaser) due(e *Entry, r remote.Request, rate float64, d remote.Decision, now, until int64) {
	p := r.Policy
	if until <= now || r.Member == "" || r.Demand == 0 || d.Blocked || !p.Uses(remote.TokenBucket) || rate <= p.Rate() || e.Gone() {
		return
	}
	// (Counted under duesMu, where Close's barrier finds it: none starts
	// once Close began, and Close waits for those that did.)
	l.duesMu.Lock()
	defer l.duesMu.Unlock()
	if l.stopped.Load() {
		return
	}
	if pd := l.dueOf[e]; pd != nil {
		if until < pd.at {
			select { // sooner than its timer: it sets another
			case pd.sooner <- struct{}{}:
			default:
			}
		}
		pd.at = until
		return
	}
	pd := &pendingDue{at: until, sooner: make(chan struct{}, 1)}
	l.dueOf[e] = pd
	l.dues.Add(1)
	go l.waitDue(e, pd)
}

// pendingDue is an entry's due lease: at (ns, under duesMu) is when;
// sooner wakes its goroutine when it moves sooner.
type pendingDue struct {
	at     int64
	sooner chan struct{}
}

// waitDue waits for e's due lease pd, as long as it moves, and makes it.
func (l *Leaser) waitDue(e *Entry, pd *pendingDue) {
	defer l.dues.Done()
	for {
		l.duesMu.Lock()
		at := pd.at
		l.duesMu.Unlock()
		// (The cached clock, which a denial is checked against, lags.)
		t := l.clock.NewTimer(time.Duration(at-l.Now()) + 2*coarseResolution)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-pd.sooner:
			t.Stop()
			continue
		case <-t.C():
		}
		l.duesMu.Lock()
		if pd.at != at { // moved meanwhile
			l.duesMu.Unlock()
			continue
		}
		delete(l.dueOf, e)
		l.duesMu.Unlock()
		break
	}
	if e.Units() == 0 {
		l.prefetch(e, true)
	}
}
