package local

import (
	"math/bits"
	"sync/atomic"
)

// allowance holds the units leased for one (policy, key) and when they
// lapse. Take is lock-free: atomic loads and, for one unit, an atomic add
// (a compare-and-swap for more). The zero value holds nothing. Safe for
// concurrent use.
//
// Units live in two generations, each with its own expiry: cur, the newest
// lease, and prev, what was left of the lease before it when cur arrived.
// Take uses prev first, since it lapses first. So a lease made ahead of need
// (prefetch) neither cuts short the units it joins nor stretches their life:
// no unit outlives its own lease's validity. Should a third lease arrive while
// prev still holds units, cur joins prev under prev's (earlier) expiry.
//
// Times are nanoseconds on the owner's monotonic clock (see Leaser.Now in
// package sync); the allowance never reads a clock itself.
type allowance struct {
	// cur, then the fields that share its units' cache line with it: no
	// take of one unit reads or writes them, and the padding keeps prev and
	// the expiries, which every take reads, at least a line away from
	// cur.units, wherever the allowance starts. A take of one unit then
	// moves one line between cores: cur.units, with its atomic add (an
	// expiry read just ahead of the add on the same line would make the
	// line cross twice).
	cur slot
	// added and drained total the units put in and taken out other than by
	// Take: what Take took is added - drained - units, with no counter of
	// its own on the hit path.
	added, drained atomic.Int64
	// extra counts the units taken that were not a hit's first: the n-1
	// more of a Take of n, and what TakeUpTo took (CountHit takes one
	// back). The hits are the units taken less extra: a hit of one unit
	// writes nothing but its atomic add, where a counter of hits doubled
	// the cost of a hot key's hits under contention. extra is added before
	// the units it counts are taken, so that Hits can undercount for a
	// moment but never overcount.
	extra atomic.Int64
	_     [24]byte

	prev slot
	// curExpires and prevExpires: when (ns) each generation lapses.
	curExpires, prevExpires atomic.Int64
	// recheckMask is one less than a power of two, about a 64th of the last
	// lease (0 for a lease of 64 units or fewer): one take in recheckMask+1 is
	// followed by a precise reading of the time (see Recheck).
	recheckMask atomic.Int64
	// denial: Redis denied n units of this key until then (ns); requests
	// for as many units or more before it are denied locally without
	// asking again. One pointer, so that both are stored at once: a
	// denial cleared while another is recorded is one or the other, never
	// one's time with the other's units. nil: none.
	denial atomic.Pointer[denial]
}

// denial is a recorded denial; it is never changed once stored.
type denial struct{ until, n int64 }

// slot is the units of one generation, and the Redis time (µs) of the
// oldest grant among them, which a refund names. Its expiry is the
// Allowance's (curExpires, prevExpires), on another cache line.
//
// units below zero count as none: a take of one unit subtracts it with one
// atomic add and, finding none, leaves the count below zero rather than
// write again. Every other write of units takes that into account: it
// swaps the count out (a negative one is none), subtracts by
// compare-and-swap from a count it saw hold enough, or adds to a count
// raised to zero first (put).
type slot struct {
	units, at atomic.Int64
}

// take takes n units if the slot holds them, and returns the units it
// holds after the take. The caller checks the expiry.
func (s *slot) take(n int64) (left int64, ok bool) {
	if n == 1 { // below zero is none: no need to give it back
		left = s.units.Add(-1)
		return max(0, left), left >= 0
	}
	for {
		u := s.units.Load()
		if u < n {
			return 0, false
		}
		if s.units.CompareAndSwap(u, u-n) {
			return u - n, true
		}
	}
}

// held returns the units the slot holds, expired or not.
func (s *slot) held() int64 { return max(0, s.units.Load()) }

// put adds g units to the slot: to none if its count is below zero.
func (s *slot) put(g int64) {
	for {
		u := s.units.Load()
		if s.units.CompareAndSwap(u, max(0, u)+g) {
			return
		}
	}
}

// generation is a slot with its expiry.
type generation struct {
	*slot
	expires *atomic.Int64
}

// generations returns the allowance's generations, oldest first.
func (a *allowance) generations() [2]generation {
	return [2]generation{{&a.prev, &a.prevExpires}, {&a.cur, &a.curExpires}}
}

// take takes n units if at least n are held, unexpired, in one generation
// at now. It reports whether it did and, if so, about how many units are
// left (Units, but from the take's own reading of its generation: under
// contention, each load of the units after the take costs a cache miss).
func (a *allowance) take(n, now int64) (left int64, ok bool) {
	if n > 1 {
		a.extra.Add(n - 1)
	}
	prev := a.prev.units.Load()
	if prev >= n && now < a.prevExpires.Load() {
		if left, ok = a.prev.take(n); ok {
			return left + a.cur.held(), true
		}
	}
	if now < a.curExpires.Load() {
		if left, ok = a.cur.take(n); ok {
			return left + max(0, prev), true
		}
	}
	if n > 1 {
		a.extra.Add(1 - n)
	}
	return 0, false
}

// taken returns the units taken so far. Calls running concurrently may or
// may not be counted yet.
func (a *allowance) taken() int64 {
	// Read units last: a unit added after the added reading and then taken
	// is not counted yet, rather than counted twice.
	return max(0, a.added.Load()-a.drained.Load()-a.units())
}

// units returns the units held, expired or not.
func (a *allowance) units() int64 { return a.cur.held() + a.prev.held() }

// hits returns the number of hits so far: successful Takes, and the
// TakeUpTos counted by CountHit. It is exact while no Add or Drain runs
// (the entry's lock orders them); Takes running concurrently may or may
// not be counted yet, and one may be undercounted for a moment.
func (a *allowance) hits() uint64 {
	// extra last: a take seen in the units is seen in extra too.
	taken := a.taken()
	return uint64(max(0, taken-a.extra.Load()))
}

// add adds g units granted by Redis at Redis time at (µs), valid until
// expires (ns), at time now. Units already held and unexpired keep their
// own expiry, in the previous generation. Units held past their expiry are
// taken out: add returns them (with their oldest grant time), for the caller
// to refund. Adds must not run concurrently with each other (the leaser
// holds Entry.Mu around them); Take, DrainExpired and Drain may.
func (a *allowance) add(g, at, expires, now int64) (stale, staleAt int64) {
	stale, staleAt = a.drainExpired(now)
	if u := a.cur.units.Swap(0); u > 0 {
		if a.prev.units.Load() <= 0 {
			a.prevExpires.Store(a.curExpires.Load())
			a.prev.at.Store(a.cur.at.Load())
		} // else prev is older: its expiry and grant time stay, and hold
		// for these units too.
		a.prev.put(u)
	}
	a.curExpires.Store(expires)
	a.cur.at.Store(at)
	a.recheckMask.Store(int64(1)<<bits.Len64(uint64(max(1, g/recheckShare)-1)) - 1)
	a.added.Add(g)
	a.cur.put(g)
	return stale, staleAt
}

// recheckShare: about one take in this share of a lease is rechecked.
const recheckShare = 64

// recheck reports whether a Take of n units that left left units (its
// result) is one of those after which the caller reads the time precisely:
// about one in a 64th of the last lease, every one for a lease of 64 units
// or fewer. A caller that takes at a cached reading of the time, which may
// lag by more than it allows for (a coarse clock whose ticker waits for a
// CPU), so brings it up to date within a 64th of a lease: of each lease,
// at most that many units (and one per take under way) are taken past
// their expiry, however far the cached reading lags.
func (a *allowance) recheck(left, n int64) bool {
	m := a.recheckMask.Load()
	// A multiple of m+1 among the units left+n-1 ... left that the take
	// passed, or, with n > m, any.
	return n > m || left&m == 0 || left&m > m+1-n
}

// merge moves the units of cur into prev when both hold units unexpired at
// now, so that a Take of more units than either holds alone finds them
// together: a remainder of one lease and the next lease's units serve a
// request neither could. They take prev's expiry, the earlier: no unit
// outlives its own lease's validity. It reports whether it moved any. Like
// Add, it must not run concurrently with Add, DrainExpired or Drain (the
// entry's lock); Take may.
func (a *allowance) merge(now int64) bool {
	if a.prev.units.Load() <= 0 || now >= a.prevExpires.Load() || now >= a.curExpires.Load() {
		return false
	}
	u := a.cur.units.Swap(0)
	if u <= 0 {
		return false
	}
	a.prev.put(u)
	return true
}

// drainExpired takes the units of every generation expired at now, for a
// refund, and returns how many there were and their oldest grant time.
func (a *allowance) drainExpired(now int64) (units, at int64) {
	for _, g := range a.generations() {
		if g.units.Load() > 0 && g.expires.Load() <= now {
			units, at = a.drainSlot(g.slot, units, at)
		}
	}
	return units, at
}

// drain takes every held unit, for a refund, and returns how many there
// were and the oldest grant time among them.
func (a *allowance) drain() (units, at int64) {
	units, at = a.drainSlot(&a.prev, 0, 0)
	return a.drainSlot(&a.cur, units, at)
}

// drainSlot empties s into a running total of units and their oldest grant.
func (a *allowance) drainSlot(s *slot, units, at int64) (int64, int64) {
	u := s.units.Swap(0)
	if u <= 0 {
		return units, at
	}
	a.drained.Add(u)
	if t := s.at.Load(); units == 0 || t < at {
		at = t
	}
	return units + u, at
}

// deny records that Redis denied n units of this key until until (ns).
func (a *allowance) deny(until, n int64) { a.denial.Store(&denial{until, n}) }

// clearDenial forgets the recorded denial.
func (a *allowance) clearDenial() { a.denial.Store(nil) }

// denied reports whether a recorded denial holds for n units at now (it was
// for n units or fewer, and has not lapsed), and how long until it lapses.
func (a *allowance) denied(now, n int64) (bool, int64) {
	if d := a.denial.Load(); d != nil && now < d.until && n >= d.n {
		return true, d.until - now
	}
	return false, 0
}
