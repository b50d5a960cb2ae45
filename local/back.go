package local

// Lapsed is what an entry did with units that lapsed unused: Units in
// all, Aside of them set aside to go back to Redis; the others were not
// worth a refund, and are dropped.
type Lapsed struct{ Units, Aside int64 }

// Keep tells whether units that lapsed unused, granted at Redis time at
// (µs), are worth setting aside to go back (a refund would give something
// back). It is called under the entry's lock: it must not call the entry.
type Keep func(units, at int64) bool

// Lapse takes the units expired at now out of the allowance and, under
// the same lock, sets aside those keep says are worth a refund (see
// SetAside): no eviction, Close or Forget can come between the two.
func (e *Entry[P]) Lapse(now int64, keep Keep) Lapsed {
	e.mu.Lock() // with Hits: see Allowance.Hits
	defer e.mu.Unlock()
	units, at := e.allowance.drainExpired(now)
	return e.lapsedLocked(units, at, now, keep)
}

// lapsedLocked sets aside units that lapsed at now, if keep says so.
// Requires mu held, and the entry not gone (a gone entry holds nothing).
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

// drain takes every unit held, for a refund (see Allowance.drain).
func (e *Entry[P]) drain() (units, at int64) {
	e.mu.Lock() // with Hits: see Allowance.Hits
	defer e.mu.Unlock()
	return e.allowance.drain()
}

// retire marks the entry gone (it left its table) and takes every unit it
// holds, for a refund, in one step under its lock: no lease, lapse or
// abandoned lease puts units in after it (Fill and SetAside refuse them,
// and their callers give them back). The units set aside stay, for
// DrainBack.
func (e *Entry[P]) retire() (units, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone = true
	e.evicted.Store(true)
	return e.allowance.drain()
}

// Back returns the units set aside to go back.
func (e *Entry[P]) Back() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.back
}

// setAside sets aside units that lapsed unused at now (granted at Redis
// time at, µs), to go back with the entry's next lease, or with
// DrainOldBack. It refuses them when the entry is gone, and reports
// whether it took them: the caller gives back what it refused.
func (e *Entry[P]) setAside(units, at, now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return false
	}
	e.setAsideLocked(units, at, now)
	return true
}

// setAsideLocked sets aside units. Requires mu held.
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

// DrainOldBack takes the units set aside, and their oldest grant time, if
// they were set aside at or before before (ns) and no lease of the entry
// is being made, is in flight or is being put in (they may go with it):
// else it takes nothing.
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
