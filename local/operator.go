package local

// What the operators of a Limiter (Peek, Reset, AllowAtMost, Refund) do
// with local state. None of it is on the hit path.

// takeUpTo takes up to n units from s, as many as it holds unexpired at
// now, and returns how many it took.
func (s *slot) takeUpTo(n, now int64) int64 {
	if now >= s.expires.Load() {
		return 0
	}
	for {
		u := s.units.Load()
		g := min(u, n)
		if g <= 0 {
			return 0
		}
		if s.units.CompareAndSwap(u, u-g) {
			return g
		}
	}
}

// TakeUpTo takes up to n units, as many as are held unexpired at now,
// from the previous generation first, and returns how many it took. It
// does not count a hit: the caller does (CountHit) when the units decide.
func (a *Allowance) TakeUpTo(n, now int64) int64 {
	a.extra.Add(n) // before the take: see extra
	g := a.prev.takeUpTo(n, now)
	g += a.cur.takeUpTo(n-g, now)
	a.extra.Add(g - n)
	return g
}

// Holds reports whether n units are held unexpired in one generation at
// now: whether Take(n, now) would succeed, taking nothing.
func (a *Allowance) Holds(n, now int64) bool {
	for _, s := range []*slot{&a.prev, &a.cur} {
		if now < s.expires.Load() && s.units.Load() >= n {
			return true
		}
	}
	return false
}

// TakeUpTo takes up to n units from the allowance (see Allowance.TakeUpTo).
func (e *Entry[P]) TakeUpTo(n, now int64) int64 { return e.allowance.TakeUpTo(n, now) }

// Holds reports whether Take(n, now) would succeed, taking nothing.
func (e *Entry[P]) Holds(n, now int64) bool { return e.allowance.Holds(n, now) }

// CountHit counts a request answered from the allowance other than by
// Take (an AllowAtMost).
func (e *Entry[P]) CountHit() { e.allowance.extra.Add(-1) }

// ClearDenial forgets the recorded denial: units were given back to the
// key, so Redis is asked again.
func (e *Entry[P]) ClearDenial() { e.allowance.Deny(0, 0) }

// Forget drops what the entry holds of its key (the key was reset): its
// units, those set aside to go back, and the recorded denial. Nothing is
// refunded: the state they would go back to is gone. It returns the units
// dropped.
func (e *Entry[P]) Forget() int64 {
	e.mu.Lock()
	units, _ := e.allowance.Drain()
	units += e.back
	e.back = 0
	e.mu.Unlock()
	e.ClearDenial()
	return units
}

// SetRetryAt records when (ns) Redis said the units it denied could be
// admitted: the recorded denial (Deny) may lapse sooner, to ask again.
func (e *Entry[P]) SetRetryAt(at int64) { e.retryAt.Store(at) }

// RetryAt returns when (ns) Redis said the units it last denied could be
// admitted.
func (e *Entry[P]) RetryAt() int64 { return e.retryAt.Load() }

// SetBlocked records that the entry's recorded denial (Deny) is a block of
// its key that ends at until (ns), or, with 0, that it is not a block: set
// at each answer from Redis and by a Block.
func (e *Entry[P]) SetBlocked(until int64) { e.blockedUntil.Store(until) }

// BlockedUntil returns when (ns) the key's block ends, if the recorded
// denial is a block, or 0.
func (e *Entry[P]) BlockedUntil() int64 { return e.blockedUntil.Load() }
