package local

import (
	"sync/atomic"
)

// Allowance holds the units leased for one (policy, key) and when they
// lapse. Take is lock-free: a load of the expiry and a compare-and-swap on
// the count. The zero value holds nothing. Safe for concurrent use.
//
// Times are nanoseconds on the owner's monotonic clock (see Clock in
// package tier); the allowance never reads a clock itself.
type Allowance struct {
	// units and hits are written on every hit; expires and the rest only
	// when a lease is added. They share a cache line on purpose: a hit
	// touches units and hits together.
	units   atomic.Int64
	hits    atomic.Uint64
	expires atomic.Int64 // units lapse at this time (ns); 0: none held
	// added and drained total the units put in and taken out other than by
	// Take: what Take took is added - drained - units, with no counter of
	// its own on the hit path.
	added, drained atomic.Int64
	// at is the Redis time (µs) of the newest grant, which a refund names.
	at atomic.Int64
	// deniedUntil: Redis denied deniedN units of this key until then (ns);
	// requests for as many units or more before it are denied locally
	// without asking again.
	deniedUntil, deniedN atomic.Int64
}

// Take takes n units if at least n are held and unexpired at now. It reports
// whether it did.
func (a *Allowance) Take(n, now int64) bool {
	if now >= a.expires.Load() {
		return false
	}
	for {
		u := a.units.Load()
		if u < n {
			return false
		}
		if a.units.CompareAndSwap(u, u-n) {
			a.hits.Add(1)
			return true
		}
	}
}

// Taken returns the units taken so far. Calls running concurrently may or
// may not be counted yet.
func (a *Allowance) Taken() int64 {
	// Read units last: a unit added after the added reading and then taken
	// is not counted yet, rather than counted twice.
	return max(0, a.added.Load()-a.drained.Load()-a.units.Load())
}

// Units returns the units held, expired or not.
func (a *Allowance) Units() int64 { return a.units.Load() }

// Hits returns the number of successful Takes so far.
func (a *Allowance) Hits() uint64 { return a.hits.Load() }

// Expires returns when the held units lapse (ns); 0 when none were added.
func (a *Allowance) Expires() int64 { return a.expires.Load() }

// Add adds g units granted by Redis at Redis time at (µs), valid until
// expires (ns), at time now. Unexpired units already held keep the earlier
// of the two expiries: a lease never outlives the shortest validity of the
// units in it. Units held past their expiry are not merged: Add takes them
// out and returns them (with their grant time), for the caller to refund.
func (a *Allowance) Add(g, at, expires, now int64) (stale, staleAt int64) {
	if old := a.expires.Load(); old != 0 && old <= now {
		stale, staleAt = a.Drain()
	}
	for {
		old := a.expires.Load()
		e := expires
		if old > now && old < e && a.units.Load() > 0 {
			e = old
		}
		if a.expires.CompareAndSwap(old, e) {
			break
		}
	}
	a.at.Store(at)
	a.added.Add(g)
	a.units.Add(g)
	return stale, staleAt
}

// Drain takes every held unit, for a refund, and returns how many there
// were and the Redis time of the newest grant.
func (a *Allowance) Drain() (units, at int64) {
	units = a.units.Swap(0)
	a.drained.Add(units)
	return units, a.at.Load()
}

// Deny records that Redis denied n units of this key until until (ns).
func (a *Allowance) Deny(until, n int64) {
	a.deniedN.Store(n)
	a.deniedUntil.Store(until)
}

// Denied reports whether a recorded denial holds for n units at now (it was
// for n units or fewer, and has not lapsed), and how long until it lapses.
func (a *Allowance) Denied(now, n int64) (bool, int64) {
	u := a.deniedUntil.Load()
	if now < u && n >= a.deniedN.Load() {
		return true, u - now
	}
	return false, 0
}
