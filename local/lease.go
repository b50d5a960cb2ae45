package local

import "runtime"

// Lease is what a lease of an entry starts from (StartLease), for the
// leaser to size and send it with.
type Lease struct {
	// Rate is the demand in units per second, counting the units taken and
	// wanted since the last lease.
	Rate float64
	// WindowEnd is when (ns) the last grant lapses with its window (0: no
	// window); LastGrant is that grant's size.
	WindowEnd, LastGrant int64
	// Back units, granted at Redis time BackAt (µs), were set aside and go
	// back with this lease: they are the lease's now, no longer the entry's.
	Back, BackAt int64
	// Cold, with a lease in flight (StartLease): that lease asks for its
	// requester's units alone and leaves nothing for a request waiting on
	// it.
	Cold bool
	// Epoch is the entry's epoch at the start (see Forget), for
	// Grant.Epoch; Clears its count of ClearDenials, for Answer.Clears.
	Epoch, Clears uint64
	// Request is the n of the last request that leased (0 before any): the
	// requests that follow are likely of as many.
	Request int64
	// Waiting: callers wait for the entry's units. A caller asleep until
	// its retry asks nothing meanwhile, so the measured demand is less than
	// it wants.
	Waiting bool
}

// StartLease starts a lease at now for a request of n units (0 for a
// prefetch), counting the units taken and wanted since the last lease,
// and n, into the demand, and handing over the units set aside. least is
// the leaser's minimum: with no demand known and least <= n, the lease is
// cold and asks for n alone. If a lease is in flight, StartLease returns
// its channel instead, closed when it ends: the caller waits for it and
// looks at the units again (unless the Lease says Cold). The caller ends
// its lease with EndLease or AbandonLease.
func (e *Entry[P]) StartLease(n, least, now int64) (Lease, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch := e.leasing; ch != nil {
		return Lease{Cold: e.cold, Epoch: e.epoch, Clears: e.clears}, ch
	}
	l := e.startLocked(n, now)
	e.cold = n > 0 && l.Rate == 0 && least <= n
	return l, nil
}

// TryStartLease is StartLease(0, now()) for a lease made ahead of need,
// which never blocks: it gives up when the entry's lock is held, the entry
// left its table (nobody would use the grant: it would only go back, and
// the call would count this instance among the key's members again), a
// lease is in flight, or ready (asked last, under the lock) says no. It
// reports whether it started one.
func (e *Entry[P]) TryStartLease(now func() int64, ready func() bool) (Lease, bool) {
	if !e.mu.TryLock() {
		return Lease{}, false
	}
	defer e.mu.Unlock()
	return e.startAheadLocked(now, ready)
}

// StartLeaseAhead is TryStartLease for a caller off the hit path (a due
// lease's timer), which waits for the entry's lock rather than give up.
func (e *Entry[P]) StartLeaseAhead(now func() int64, ready func() bool) (Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.startAheadLocked(now, ready)
}

// startAheadLocked is TryStartLease under mu.
func (e *Entry[P]) startAheadLocked(now func() int64, ready func() bool) (Lease, bool) {
	if e.gone.Load() || e.leasing != nil || !ready() {
		return Lease{}, false
	}
	l := e.startLocked(0, now())
	e.cold = false
	return l, true
}

// startLocked marks a lease in flight. Requires mu held.
func (e *Entry[P]) startLocked(n, now int64) Lease {
	e.leasing = make(chan struct{})
	taken, asked := e.allowance.taken(), e.asked.Load()
	e.demand.observe(max(0, taken-e.seen+asked-e.askedSeen+n), now)
	e.seen, e.askedSeen = taken, asked
	if n > 0 {
		e.request = n
	}
	l := Lease{Rate: e.demand.estimate(), WindowEnd: e.windowEnd, LastGrant: e.lastGrant, Back: e.back, BackAt: e.backAt, Epoch: e.epoch,
		Clears: e.clears, Request: e.request, Waiting: e.waiting.Load() > 0}
	e.back = 0
	return l
}

// EndLease ends the lease in flight: its waiters wake.
func (e *Entry[P]) EndLease() {
	e.mu.Lock()
	e.endLocked()
	e.mu.Unlock()
}

func (e *Entry[P]) endLocked() {
	close(e.leasing)
	e.leasing, e.tag = nil, nil
}

// Tag records v, the leaser's word on the lease in flight (what it sent),
// for the callers that wait for that lease (Tagged). It does nothing when
// no lease is in flight.
func (e *Entry[P]) Tag(v any) {
	e.mu.Lock()
	if e.leasing != nil {
		e.tag = v
	}
	e.mu.Unlock()
}

// Tagged returns the tag of the lease in flight whose channel is ch (as
// StartLease returned it): nil if that lease is not tagged yet, or ended.
func (e *Entry[P]) Tagged(ch <-chan struct{}) any {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leasing == nil || (<-chan struct{})(e.leasing) != ch {
		return nil
	}
	return e.tag
}

// AbandonLease ends the lease in flight, l, which was never sent (Close
// began, or its caller's context had ended before it went out): the units
// set aside that it took along are set aside again at now or, if the
// entry is gone, returned for the caller to give back; dropped, for the
// caller to count, if the key was forgotten since the lease started (see
// Forget).
func (e *Entry[P]) AbandonLease(l Lease, now int64) (units, at, dropped int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.endLocked()
	switch {
	case l.Back <= 0:
		return 0, 0, 0
	case l.Epoch != e.epoch:
		return 0, 0, l.Back
	case e.gone.Load():
		return l.Back, l.BackAt, 0
	}
	e.setAsideLocked(l.Back, l.BackAt, now)
	return 0, 0, 0
}

// Leasing returns the channel of the lease in flight, closed once its
// answer is in, or nil.
func (e *Entry[P]) Leasing() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leasing
}

// Grant is a lease's grant.
type Grant struct {
	// Units is the grant's size; Keep of them go into the entry (the
	// others were the requester's).
	Units, Keep int64
	// At is the grant's Redis time (µs); the units kept may be used until
	// Expires (ns).
	At, Expires int64
	WindowEnd   int64  // ns: when the grant lapses with its window; 0: no window
	Epoch       uint64 // Lease.Epoch
}

// Answer is Redis's answer to a lease, as Entry.Answer puts it in.
type Answer struct {
	Word Word
	// Members is the key's members Redis counted (0: not counted; the last
	// count stays unless ForgetMembers).
	Members       int64
	ForgetMembers bool
	Shared        bool  // see Entry.Shared
	BlockedUntil  int64 // ns: when the key's block ends; 0: not blocked
	Grant         Grant // Units 0: nothing granted
	// LowWater is set when units of the grant go in (see Entry.LowWater).
	LowWater int64
	// RetryAt and FairShare, if RetryAt is not 0, are set (see
	// Entry.RetryAt). DenyUntil, if not 0, records a denial of DenyUnits
	// until then (see Entry.Denied).
	RetryAt              int64
	FairShare            bool
	DenyUntil, DenyUnits int64
	// Clears is the lease's Lease.Clears (see Entry.ClearDenial).
	Clears uint64
}

// Answer puts a into the entry at now as one answer: a hit that sees its
// word sees its units too (Unchanged). Units held that lapsed meanwhile
// come out, and those keep says are worth a refund are set aside. A grant
// is refused when the entry is gone (kept false: the caller gives the
// units back) and dropped when the key was forgotten since the lease
// started (forgot true); its denial, retry and block are dropped when the
// entry's denial was cleared since (a.Clears). Answers are serialized: an
// abandoned lease's answer may land while the next one's does.
func (e *Entry[P]) Answer(a Answer, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
	if a.ForgetMembers {
		e.members.Store(0)
	}
	e.beginAnswer()
	e.answered(a.Word, a.Members, a.Shared)
	e.mu.Lock() // (ClearDenial's and Block's: an answer is cleared whole, or after)
	current := a.Clears == e.clears
	if current { // (its block before its grant, which a block refuses)
		e.blockedUntil.Store(a.BlockedUntil)
	}
	if a.Grant.Units > 0 {
		l, kept, forgot = e.fillLocked(a.Grant, now, keep)
		if a.Grant.Keep > 0 && kept && !forgot {
			e.lowWater.Store(a.LowWater)
		}
	}
	if current {
		if a.RetryAt != 0 {
			e.setRetryAt(a.RetryAt, a.FairShare)
		}
		if a.DenyUntil != 0 {
			e.allowance.deny(a.DenyUntil, a.DenyUnits)
		}
	}
	e.mu.Unlock()
	e.endAnswer()
	if a.Grant.Units > 0 {
		e.table.bound.touch(e)
	}
	return l, kept, forgot
}

// beginAnswer and endAnswer bracket one answer's word and units, so that
// a reader sees both or neither; beginAnswer waits for another answer's
// endAnswer.
func (e *Entry[P]) beginAnswer() {
	for {
		if v := e.answers.Load(); v&1 == 0 && e.answers.CompareAndSwap(v, v+1) {
			return
		}
		runtime.Gosched()
	}
}

func (e *Entry[P]) endAnswer() { e.answers.Add(1) }

func (e *Entry[P]) answered(w Word, members int64, shared bool) {
	if members > 0 {
		e.members.Store(members)
	}
	e.shared.Store(shared)
	e.decider.Store(int32(w.Limit))
	e.remaining.Store(w.Remaining)
	e.resetAt.Store(w.ResetAt)
}

// fill is fillLocked under the entry's lock.
func (e *Entry[P]) fill(g Grant, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fillLocked(g, now, keep)
}

// fillLocked puts g's size (for the next lease's growth) and the units
// kept into the entry at now: see Answer. Requires mu held.
func (e *Entry[P]) fillLocked(g Grant, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
	if g.Epoch != e.epoch {
		return Lapsed{}, true, g.Keep > 0
	}
	if e.gone.Load() || e.blockedUntil.Load() > now { // (blocked here since the lease began: see Block)
		return Lapsed{}, g.Keep <= 0, false
	}
	e.lastGrant = g.Units
	if g.Keep <= 0 {
		return Lapsed{}, true, false
	}
	if g.WindowEnd != 0 {
		e.windowEnd = g.WindowEnd
	}
	stale, staleAt := e.allowance.add(g.Keep, g.At, g.Expires, now)
	return e.lapsedLocked(stale, staleAt, now, keep), true, false
}
