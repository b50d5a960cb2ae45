package local

import "runtime"

// beginAnswer and EndAnswer bracket the putting in of one answer from
// Redis: its word (Answered) and its units (Fill). A reader that sees the
// one then sees the other (Unchanged): between the two, the word would say
// what Redis has left after the grant, and the units held would not yet
// count it. One answer at a time: an abandoned lease's answer may land
// while the next lease's does (on another server's lane), and beginAnswer
// waits for the other's EndAnswer.
func (e *Entry[P]) beginAnswer() {
	for {
		if v := e.answers.Load(); v&1 == 0 && e.answers.CompareAndSwap(v, v+1) {
			return
		}
		runtime.Gosched()
	}
}

// endAnswer ends what BeginAnswer began.
func (e *Entry[P]) endAnswer() { e.answers.Add(1) }

// answered records Redis's answer to a lease: its word on the key, the
// key's members (0: not counted, the last count stays), and whether the
// key is shared out (see Shared).
func (e *Entry[P]) answered(w Word, members int64, shared bool) {
	if members > 0 {
		e.members.Store(members)
	}
	e.shared.Store(shared)
	e.decider.Store(int32(w.Limit))
	e.remaining.Store(w.Remaining)
	e.resetAt.Store(w.ResetAt)
}

// Lease is what a lease of an entry starts from: what StartLease hands
// the leaser to size and send it with.
type Lease struct {
	// Rate is the demand for the entry, in units per second, with the
	// units taken and wanted since the last lease counted in.
	Rate float64
	// WindowEnd is when (ns) the last grant lapses with its window (0: no
	// window); LastGrant is that grant's size.
	WindowEnd, LastGrant int64
	// Back units, granted at Redis time BackAt (µs), were set aside to go
	// back with this lease: they are the lease's now, no longer the
	// entry's.
	Back, BackAt int64
	// Cold, handed with a lease in flight (StartLease): that lease asks
	// for its requester's units alone, and leaves nothing for a request
	// waiting on it.
	Cold bool
	// Epoch is the entry's epoch at the start (see Forget): its grant is
	// filled with it (Grant.Epoch).
	Epoch uint64
	// Request is the units of the last request that leased the entry (its
	// n; 0 before any): the requests that follow are likely of as many.
	Request int64
	// Waiting: callers wait for the entry's units (see Entry.Waiting). A
	// caller asleep until its retry asks nothing meanwhile, so the demand
	// it measures is less than it wants.
	Waiting bool
}

// StartLease starts a lease of the entry at now for a request of n units
// (0 for a prefetch), unless one is in flight: then it returns that one's
// channel, closed when it ends, and the caller waits for it and looks at
// the allowance again (unless the Lease it returns with it says Cold).
// Starting, it counts the units taken and wanted since the last lease, and
// n, into the demand, and hands over the units set aside. least is the
// least a lease asks for (the leaser's minimum): a request's lease with no
// demand known asks for its n units alone, and is cold, when least <= n.
// The caller ends the lease with EndLease.
func (e *Entry[P]) StartLease(n, least, now int64) (Lease, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch := e.leasing; ch != nil {
		return Lease{Cold: e.cold, Epoch: e.epoch}, ch
	}
	l := e.startLocked(n, now)
	e.cold = n > 0 && l.Rate == 0 && least <= n
	return l, nil
}

// TryStartLease is StartLease(0, now()) for a lease made ahead of need,
// which gives up instead of waiting: when the entry's lock is held, when a
// lease is in flight, or when ready, asked last and under the lock (it
// must not block), says no. It reports whether it started one. now is read
// only when it does.
func (e *Entry[P]) TryStartLease(now func() int64, ready func() bool) (Lease, bool) {
	if !e.mu.TryLock() {
		return Lease{}, false
	}
	defer e.mu.Unlock()
	if e.leasing != nil || !ready() {
		return Lease{}, false
	}
	l := e.startLocked(0, now())
	e.cold = false
	return l, true
}

// startLocked marks a lease in flight and returns what it starts from.
// Requires mu held.
func (e *Entry[P]) startLocked(n, now int64) Lease {
	e.leasing = make(chan struct{})
	taken, asked := e.allowance.taken(), e.asked.Load()
	e.demand.observe(taken-e.seen+asked-e.askedSeen+n, now)
	e.seen, e.askedSeen = taken, asked
	if n > 0 {
		e.request = n
	}
	l := Lease{Rate: e.demand.estimate(), WindowEnd: e.windowEnd, LastGrant: e.lastGrant, Back: e.back, BackAt: e.backAt, Epoch: e.epoch,
		Request: e.request, Waiting: e.waiting.Load() > 0}
	e.back = 0
	return l
}

// EndLease ends the lease in flight: waiters wake and look at the
// allowance again.
func (e *Entry[P]) EndLease() {
	e.mu.Lock()
	e.endLocked()
	e.mu.Unlock()
}

func (e *Entry[P]) endLocked() {
	close(e.leasing)
	e.leasing = nil
}

// AbandonLease ends the lease in flight, l, which was never sent (Close
// began): the units set aside that it took along are set aside again, at
// now. If the entry is gone meanwhile, they are returned instead, for the
// caller to give back: nothing the lease held is lost.
func (e *Entry[P]) AbandonLease(l Lease, now int64) (units, at int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.endLocked()
	if l.Back <= 0 {
		return 0, 0
	}
	if e.gone {
		return l.Back, l.BackAt
	}
	e.setAsideLocked(l.Back, l.BackAt, now)
	return 0, 0
}

// Leasing returns the channel of the entry's lease in flight, closed when
// it ends (after its answer is in the allowance), or nil when none is.
func (e *Entry[P]) Leasing() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leasing
}

// Grant is a lease's grant, as Fill puts it into an entry.
type Grant struct {
	// Units is the grant's size; Keep of them go into the allowance (the
	// others were the requester's).
	Units, Keep int64
	// At is the grant's Redis time (µs); the units kept may be used until
	// Expires (ns).
	At, Expires int64
	// WindowEnd, when not 0, is when (ns) the grant lapses with its window.
	WindowEnd int64
	// Epoch is the epoch its lease started in (Lease.Epoch).
	Epoch uint64
}

// fill puts g into the entry at now: the size, for the next lease's
// growth, and the units kept, into the allowance; the units held that had
// lapsed meanwhile come out, and those keep says are worth a refund are
// set aside, under the same lock. Fills are serialized: an abandoned
// lease's grant may land while the next lease's does.
//
// It refuses the units kept when the entry is gone (evicted, or at
// Close): kept is false, and the caller gives them back. It drops them
// when the entry's key was forgotten since the lease started (Forget):
// kept is true, forgot true, and they go nowhere, as Forget's do.
func (e *Entry[P]) fill(g Grant, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return Lapsed{}, g.Keep <= 0, false
	}
	if g.Epoch != e.epoch {
		return Lapsed{}, true, g.Keep > 0
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

// Answer is Redis's answer to a lease, as Entry.Answer puts it in.
type Answer struct {
	// Word is Redis's word on the key; Members the key's members it
	// counted (0: not counted, the last count stays, unless ForgetMembers);
	// Shared, that other members wanted the key too and Redis held this
	// one to its share or denied it.
	Word          Word
	Members       int64
	ForgetMembers bool
	Shared        bool
	// BlockedUntil is when (ns) the key's block ends (0: not blocked).
	BlockedUntil int64
	// Grant is what Redis granted (Units 0: nothing).
	Grant Grant
	// LowWater is the units below which the next lease is made ahead of
	// need, set when units of the grant go into the allowance.
	LowWater int64
	// RetryAt, if not 0, is when (ns) Redis said units could be admitted,
	// and FairShare whether that is this instance's fair share's wait
	// (see RetryAt). DenyUntil, if not 0, records a denial of DenyUnits
	// units until then (see Denied).
	RetryAt              int64
	FairShare            bool
	DenyUntil, DenyUnits int64
}

// Answer puts a into the entry at now, as one answer (see Unchanged): its
// word and members, its block, its grant (as Fill, with keep) and low
// water, its denial and retry time. A granted entry is touched in its
// bound (recently leased). The results are Fill's, zero when nothing was
// granted.
func (e *Entry[P]) Answer(a Answer, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
	if a.ForgetMembers {
		e.members.Store(0)
	}
	e.beginAnswer() // a hit that reads the word reads its units too
	e.answered(a.Word, a.Members, a.Shared)
	e.blockedUntil.Store(a.BlockedUntil)
	if a.Grant.Units > 0 {
		l, kept, forgot = e.fill(a.Grant, now, keep)
		if a.Grant.Keep > 0 && kept && !forgot {
			e.lowWater.Store(a.LowWater)
		}
	}
	if a.RetryAt != 0 {
		e.setRetryAt(a.RetryAt, a.FairShare)
	}
	if a.DenyUntil != 0 {
		e.allowance.deny(a.DenyUntil, a.DenyUnits)
	}
	e.endAnswer()
	if a.Grant.Units > 0 {
		e.table.bound.touch(e)
	}
	return l, kept, forgot
}
