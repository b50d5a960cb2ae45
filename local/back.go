package local

// Lapsed is what an entry did with units that lapsed unused: Units in all,
// Aside of them set aside to go back; the others were not worth a refund
// and are dropped.
type Lapsed struct{ Units, Aside int64 }

// Keep tells whether units that lapsed unused, granted at Redis time at
// (µs), are worth a refund. It is called under the entry's lock: it must
// not call the entry.
type Keep func(units, at int64) bool

// Lapse takes the units expired at now out of the entry and sets aside
// those keep says are worth a refund, in one step under its lock: no
// eviction, Close or Forget comes between the two.
func (e *Entry[P]) Lapse(now int64, keep Keep) Lapsed {
	e.mu.Lock()
	defer e.mu.Unlock()
	units, at := e.allowance.drainExpired(now)
	return e.lapsedLocked(units, at, now, keep)
}

// lapsedLocked sets aside units that lapsed at now, if keep says so.
// Requires mu held.
func (e *Entry[P]) lapsedLocked(units, at, now int64, keep Keep) Lapsed {
	if units <= 0 {
		return Lapsed{}
	}
	if !keep(units, at) {
		return Lapsed{Units: units}
	}
	e.setAsideLocked(units, at, now)
	return Lapsed{Units: units, Aside: units}
}

func (e *Entry[P]) drain() (units, at int64) {
	e.mu.Lock() // hits requires it
	defer e.mu.Unlock()
	return e.allowance.drain()
}

// retire marks the entry gone and takes out every unit it holds, in one
// step under its lock: no lease puts units in after it (fill refuses them,
// and its caller gives them back). The units set aside stay, for
// DrainBack.
func (e *Entry[P]) retire() (units, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone.Store(true)
	return e.allowance.drain()
}

// Gone reports whether the entry left its table (evicted, or at Close):
// nothing is put in it after.
func (e *Entry[P]) Gone() bool { return e.gone.Load() }

// Back returns the units set aside to go back.
func (e *Entry[P]) Back() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.back
}

// setAsideLocked sets aside units granted at Redis time at (µs) that
// lapsed at now (ns). Requires mu held.
func (e *Entry[P]) setAsideLocked(units, at, now int64) {
	if units <= 0 {
		return
	}
	if e.back == 0 {
		e.backAt, e.backSince = at, now
	}
	e.back += units
	e.backAt = min(e.backAt, at)
}

// DrainBack takes every unit set aside, and their oldest grant time.
func (e *Entry[P]) DrainBack() (units, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	units, at = e.back, e.backAt
	e.back = 0
	return units, at
}

// DrainOldBack is DrainBack for units set aside at or before before (ns),
// when no lease is being made or in flight (it would take them along);
// else it takes nothing. It never blocks.
func (e *Entry[P]) DrainOldBack(before int64) (units, at int64) {
	if !e.mu.TryLock() {
		return 0, 0
	}
	defer e.mu.Unlock()
	if e.back == 0 || e.backSince > before || e.leasing != nil {
		return 0, 0
	}
	units, at = e.back, e.backAt
	e.back = 0
	return units, at
}
