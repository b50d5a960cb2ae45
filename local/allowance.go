package local

import (
	"math/bits"
	"sync/atomic"
)

// allowance holds the units leased for one (policy, key) and when they
// lapse; take is lock-free. The zero value holds nothing.
//
// Units live in two generations, each with its own expiry: cur, the newest
// lease, and prev, what was left of the one before. take uses prev first,
// since it lapses first, so a lease made ahead of need neither cuts short
// the units it joins nor stretches their life. A third lease arriving
// while prev holds units joins prev under prev's (earlier) expiry.
//
// Times are nanoseconds on the owner's monotonic clock; the allowance
// never reads a clock itself.
type allowance struct {
	// The fields up to the padding share cur's cache line, and no take of
	// one unit touches them; the padding keeps prev and the expiries, which
	// every take reads, a line away from cur.units wherever the allowance
	// starts, so that a take moves one line between cores.
	cur slot
	// added and drained total the units put in and taken out other than by
	// take, so that taken needs no counter on the hit path.
	added, drained atomic.Int64
	// extra counts the units taken beyond a hit's first (the n-1 more of a
	// take of n, and takeUpTo's), so that hits need no counter on the hit
	// path either. It is added before the units it counts are taken:
	// hits may undercount for a moment, never overcount.
	extra atomic.Int64
	_     [24]byte

	prev                    slot
	curExpires, prevExpires atomic.Int64 // ns
	// recheckMask is one less than a power of two near a 64th of the last
	// lease (see recheck).
	recheckMask atomic.Int64
	// denial is Redis's last denial; one pointer, so that its time and
	// units are stored together. nil: none.
	denial atomic.Pointer[denial]
}

// denial: Redis denied n units until until (ns). Never changed once stored.
type denial struct{ until, n int64 }

// slot is the units of one generation, and the Redis time (µs) of the
// oldest grant among them, which a refund names.
//
// units below zero count as none: a take of one unit is one atomic add,
// which leaves the count below zero when it finds none. Every other write
// swaps the count out, subtracts by compare-and-swap, or adds to the count
// raised to zero first (put).
type slot struct {
	units, at atomic.Int64
}

// take takes n units if the slot holds them, and returns the units it
// holds after the take. The caller checks the expiry.
func (s *slot) take(n int64) (left int64, ok bool) {
	if n == 1 {
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

type generation struct {
	*slot
	expires *atomic.Int64
}

// generations returns the allowance's generations, oldest first.
func (a *allowance) generations() [2]generation {
	return [2]generation{{&a.prev, &a.prevExpires}, {&a.cur, &a.curExpires}}
}

// take takes n units if one generation holds them unexpired at now, and
// returns about how many are left, from the take's own reading (another
// load of a contended line costs a cache miss).
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

// taken returns the units taken so far; concurrent takes may not be
// counted yet.
func (a *allowance) taken() int64 {
	// units last: a unit added and taken after the added reading is not
	// counted yet, rather than twice.
	return max(0, a.added.Load()-a.drained.Load()-a.units())
}

// units returns the units held, expired or not.
func (a *allowance) units() int64 { return a.cur.held() + a.prev.held() }

// hits returns the successful takes, and the takeUpTos counted by
// CountHit. Requires the entry's lock (which orders add and drain);
// concurrent takes may not be counted yet.
func (a *allowance) hits() uint64 {
	// extra last: a take seen in the units is seen in extra too.
	taken := a.taken()
	return uint64(max(0, taken-a.extra.Load()))
}

// add adds g units granted at Redis time at (µs), valid until expires
// (ns). Units held keep their own expiry, in prev; those expired at now are
// taken out and returned, for a refund. Requires the entry's lock.
func (a *allowance) add(g, at, expires, now int64) (stale, staleAt int64) {
	stale, staleAt = a.drainExpired(now)
	if u := a.cur.units.Swap(0); u > 0 {
		if a.prev.units.Load() <= 0 {
			a.prevExpires.Store(a.curExpires.Load())
			a.prev.at.Store(a.cur.at.Load())
		} // else prev is older, and its expiry holds for these units too
		a.prev.put(u)
	}
	a.curExpires.Store(expires)
	a.cur.at.Store(at)
	a.recheckMask.Store(int64(1)<<bits.Len64(uint64(max(1, g/recheckShare)-1)) - 1)
	a.added.Add(g)
	a.cur.put(g)
	return stale, staleAt
}

const recheckShare = 64

// recheck reports whether a take of n units that left left is one after
// which the caller reads the time precisely: about one per 64th of the
// last lease, every one for a lease of 64 units or fewer. A caller taking
// at a cached time that lags more than it allows for (a coarse clock's
// ticker waiting for a CPU) so takes at most a 64th of each lease past its
// expiry.
func (a *allowance) recheck(left, n int64) bool {
	m := a.recheckMask.Load()
	// Did the take pass a multiple of m+1 among left+n-1 ... left?
	return n > m || left&m == 0 || left&m > m+1-n
}

// merge moves cur's units into prev, under prev's earlier expiry, when
// both hold units unexpired at now, so that a take of more than either
// holds alone finds them together. It reports whether it moved any.
// Requires the entry's lock.
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

// drainExpired takes out the units expired at now, and returns them and
// their oldest grant time.
func (a *allowance) drainExpired(now int64) (units, at int64) {
	for _, g := range a.generations() {
		if g.units.Load() > 0 && g.expires.Load() <= now {
			units, at = a.drainSlot(g.slot, units, at)
		}
	}
	return units, at
}

// drain takes out every unit held, and returns them and their oldest
// grant time.
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

func (a *allowance) deny(until, n int64) { a.denial.Store(&denial{until, n}) }

func (a *allowance) clearDenial() { a.denial.Store(nil) }

// denied reports whether the recorded denial, for n units or fewer, holds
// at now, and how long until it lapses.
func (a *allowance) denied(now, n int64) (bool, int64) {
	if d := a.denial.Load(); d != nil && now < d.until && n >= d.n {
		return true, d.until - now
	}
	return false, 0
}
