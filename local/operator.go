package local

// What a Limiter's operators (Peek, Reset, AllowAtMost, Refund, Block) do
// with local state, off the hit path.

import "math"

// takeUpTo takes up to n of the units g holds unexpired at now.
func (g generation) takeUpTo(n, now int64) int64 {
	if now >= g.expires.Load() {
		return 0
	}
	for {
		u := g.units.Load()
		t := min(u, n)
		if t <= 0 {
			return 0
		}
		if g.units.CompareAndSwap(u, u-t) {
			return t
		}
	}
}

func (a *allowance) takeUpTo(n, now int64) int64 {
	a.extra.Add(n) // before the take: see extra
	var got int64
	for _, g := range a.generations() {
		got += g.takeUpTo(n-got, now)
	}
	a.extra.Add(got - n)
	return got
}

func (a *allowance) holds(n, now int64) bool {
	for _, g := range a.generations() {
		if now < g.expires.Load() && g.units.Load() >= n {
			return true
		}
	}
	return false
}

// TakeUpTo takes up to n of the units held unexpired at now, the older
// lease's first, and returns how many it took. It counts no hit: the
// caller does (CountHit) when the units decide.
func (e *Entry[P]) TakeUpTo(n, now int64) int64 { return e.allowance.takeUpTo(n, now) }

// Holds reports whether Take(n, now) would succeed, taking nothing.
func (e *Entry[P]) Holds(n, now int64) bool { return e.allowance.holds(n, now) }

// CountHit counts a request answered by TakeUpTo.
func (e *Entry[P]) CountHit() { e.allowance.extra.Add(-1) }

// ClearDenial forgets Redis's last denial, and those of the leases in
// flight when they land (Answer.Clears): the next request asks. With
// lift, the recorded block too (Reset, Unblock), not after a Refund.
func (e *Entry[P]) ClearDenial(lift bool) {
	e.mu.Lock()
	e.clears++
	e.allowance.clearDenial()
	if lift {
		e.blockedUntil.Store(0)
	}
	e.mu.Unlock()
}

// Forget drops what the entry holds of its key, which was reset: its
// units, those set aside, the recorded denial, and the grants of leases
// started before (when they land). Nothing is refunded: the state it would
// go back to is gone. It returns the units dropped.
func (e *Entry[P]) Forget() int64 {
	e.mu.Lock()
	units, _ := e.allowance.drain()
	units += e.back
	e.back = 0
	e.epoch++
	e.mu.Unlock()
	e.ClearDenial(true)
	return units
}

func (e *Entry[P]) setRetryAt(at int64, fairShare bool) {
	// (Within ±2^62 ns, until the year 2116 on any real clock.)
	w := min(max(at, math.MinInt64/2), math.MaxInt64/2) * 2
	if fairShare {
		w++
	}
	e.retryAt.Store(w)
}

// RetryAt returns when (ns) Redis said the units it last denied could be
// admitted, and whether that is this instance's fair share's wait (the
// limits had room). The recorded denial may lapse sooner, to ask again.
func (e *Entry[P]) RetryAt() (int64, bool) {
	w := e.retryAt.Load()
	return w >> 1, w&1 == 1
}

// BlockedUntil returns when (ns) the key's block ends, if the recorded
// denial is a block, or 0.
func (e *Entry[P]) BlockedUntil() int64 { return e.blockedUntil.Load() }

// Block takes out every unit held, for the caller to give back, and
// records a block of the key until until (ns), denying every request until
// denyUntil (ns). The answers of leases in flight neither lift it nor put
// units in (the caller gives them back).
func (e *Entry[P]) Block(until, denyUntil int64) (units, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clears++
	units, at = e.allowance.drain()
	e.blockedUntil.Store(until)
	e.allowance.deny(denyUntil, 1)
	return units, at
}
