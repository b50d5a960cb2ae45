package local

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Entry is the local state of one (policy, key). Its methods say what may
// be done with it:
//
//   - the hit path takes units from its allowance (Take) and reads what
//     Redis last said of the key with the units that go with it
//     (Answers, LastWord, Unchanged, LowWater), lock-free;
//   - the leaser starts a lease (StartLease, TryStartLease), which
//     measures the demand and takes along the units set aside; puts the
//     answer in (BeginAnswer, Answered, Fill, Deny, EndAnswer,
//     SetLowWater); ends it (EndLease);
//     and sets aside units that lapsed unused, to be given back (SetAside,
//     DrainBack, DrainOldBack).
//
// The lease bookkeeping is kept under a lock of the entry's own, which the
// hit path never takes. P is the type its Table's owner names policies
// with. An Entry is made by its Table and is safe for concurrent use.
type Entry[P any] struct {
	allowance allowance

	key    string
	policy P

	// mu guards what follows; it is held only to make or apply a lease, to
	// drain the allowance or to read its hits, never on the hit path.
	mu sync.Mutex
	// demand is the estimated rate at which units of this entry are wanted:
	// admitted, and denied locally.
	demand demand
	// leasing is non-nil while a lease request for this entry is in flight;
	// it is closed when the request ends. Concurrent misses wait on it
	// instead of asking Redis again.
	leasing chan struct{}
	// seen and askedSeen are allowance.Taken() and asked at the last lease,
	// for the demand estimate.
	seen, askedSeen int64
	// back and backAt: units that lapsed unused (granted at Redis time
	// backAt, µs), to be given back with the next lease of this entry;
	// backSince is when (ns) they were set aside.
	back, backAt, backSince int64
	// windowEnd is when (ns) the last grant lapses with its window, for a
	// policy with a window; 0 otherwise.
	windowEnd int64
	// lastGrant is the size of the last grant, for the next lease's growth.
	lastGrant int64
	// request is the units of the last request that leased (its n): a
	// lease made ahead of need asks for whole requests of it.
	request int64
	// cold: the lease in flight asks for its requester's units alone
	// (see StartLease).
	cold bool
	// gone: the entry left its table (Retire); nothing is put in it after.
	gone bool
	// epoch counts the times the entry's key was forgotten (Forget): a
	// lease started before, and answered after, puts nothing in.
	epoch uint64
	// hits is the most Hits has reported.
	hits uint64

	// asked counts the units denied locally (cached denials): wanted, but
	// not taken. Added to off the hit path.
	asked atomic.Int64
	// waiting counts the callers that wait (Wait) for units of the entry,
	// from their first denial until they return.
	waiting atomic.Int64

	// answers counts the answers put in, twice each: odd while one is
	// (between BeginAnswer and EndAnswer). See Unchanged.
	answers atomic.Uint64
	// The last word from Redis on this key (see Word), and the members of
	// the key (0: unknown). Written at each lease.
	decider   atomic.Int32
	remaining atomic.Int64
	resetAt   atomic.Int64
	members   atomic.Int64
	// shared: at the last lease other members wanted the key too, and
	// Redis held this one to its share or denied it.
	shared atomic.Bool
	// blockedUntil: when (ns) the key's block ends, as far as known, while
	// the recorded denial is a block; 0 otherwise (see BlockedUntil).
	blockedUntil atomic.Int64
	// retryAt: when (ns) Redis said the recorded denial's units could be
	// admitted (see RetryAt); fairShare, that the wait is this instance's
	// fair share's, the limits having room.
	retryAt   atomic.Int64
	fairShare atomic.Bool
	// lowWater: when fewer units than this are held, a lease is made ahead
	// of need (prefetch). Written at each lease.
	lowWater atomic.Int64

	table   *Table[P]
	evicted atomic.Bool
}

// Key returns the caller's key of the entry.
func (e *Entry[P]) Key() string { return e.key }

// Policy returns the entry's policy, as its table's owner names it.
func (e *Entry[P]) Policy() P { return e.policy }

// Evicted reports whether the entry has left its table (evicted or closed).
// Units added to an evicted entry must be drained and refunded by whoever
// added them.
func (e *Entry[P]) Evicted() bool { return e.evicted.Load() }

// Take takes n units from the allowance if it holds them, unexpired, at
// now: lock-free (see Allowance.Take).
func (e *Entry[P]) Take(n, now int64) (left int64, ok bool) { return e.allowance.take(n, now) }

// Recheck reports whether a Take of n units that left left units is one
// after which a hit reads the time precisely (see Allowance.Recheck).
func (e *Entry[P]) Recheck(left, n int64) bool { return e.allowance.recheck(left, n) }

// Units returns the units held, expired or not.
func (e *Entry[P]) Units() int64 { return e.allowance.units() }

// Hits returns the number of requests answered from the allowance so far.
// It never goes down: a hit undercounted for a moment (see Allowance.Hits)
// is not reported.
func (e *Entry[P]) Hits() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits = max(e.hits, e.allowance.hits())
	return e.hits
}

// Deny records that Redis denied n units of this key until until (ns).
func (e *Entry[P]) Deny(until, n int64) { e.allowance.deny(until, n) }

// Denied reports whether a recorded denial holds for n units at now, and
// how long until it lapses (see Allowance.Denied).
func (e *Entry[P]) Denied(now, n int64) (bool, int64) { return e.allowance.denied(now, n) }

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

// Merge puts the units of the entry's two leases together, when both hold
// units unexpired at now (see Allowance.Merge), and reports whether it
// did.
func (e *Entry[P]) Merge(now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowance.merge(now)
}

// Drain takes every unit held, for a refund (see Allowance.Drain).
func (e *Entry[P]) Drain() (units, at int64) {
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

// Taken returns the units requests took from the allowance so far (see
// Allowance.Taken): final once the entry is gone.
func (e *Entry[P]) Taken() int64 { return e.allowance.taken() }

// Back returns the units set aside to go back.
func (e *Entry[P]) Back() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.back
}

// Wanted counts n units wanted but not taken from the allowance (a
// cached denial, or a request that leased its own units alongside a cold
// lease): the demand counts them.
func (e *Entry[P]) Wanted(n int64) { e.asked.Add(n) }

// Waiting counts a caller that waits for the entry's units (d = 1), from
// its first denial, and its end (d = -1). While any waits, the leases of
// the entry say so (Lease.Waiting).
func (e *Entry[P]) Waiting(d int64) { e.waiting.Add(d) }

// Word is the last word from Redis on an entry's key: what the Results of
// its local hits and cached denials report.
type Word struct {
	// Limit is the index in the policy of the limit that decided.
	Limit int
	// Remaining is the room that limit had left beyond what was leased.
	Remaining int64
	// ResetAt is when (ns) it would be fully replenished.
	ResetAt int64
}

// LastWord returns Redis's word at the entry's last lease: three atomic
// loads, no lock.
func (e *Entry[P]) LastWord() Word {
	return Word{Limit: int(e.decider.Load()), Remaining: e.remaining.Load(), ResetAt: e.resetAt.Load()}
}

// BeginAnswer and EndAnswer bracket the putting in of one answer from
// Redis: its word (Answered) and its units (Fill). A reader that sees the
// one then sees the other (Unchanged): between the two, the word would say
// what Redis has left after the grant, and the units held would not yet
// count it. One answer at a time: an abandoned lease's answer may land
// while the next lease's does (on another server's lane), and BeginAnswer
// waits for the other's EndAnswer.
func (e *Entry[P]) BeginAnswer() {
	for {
		if v := e.answers.Load(); v&1 == 0 && e.answers.CompareAndSwap(v, v+1) {
			return
		}
		runtime.Gosched()
	}
}

// EndAnswer ends what BeginAnswer began.
func (e *Entry[P]) EndAnswer() { e.answers.Add(1) }

// Answers returns the count of answers put in, to be read before a Take
// whose units left are to be reported with LastWord (see Unchanged).
func (e *Entry[P]) Answers() uint64 { return e.answers.Load() }

// Unchanged reports whether no answer was put in, or is being put in,
// since Answers returned v: then a Take made after that reading and
// LastWord read after the Take go together; else the caller reads both
// again with WordAndUnits. One atomic load, inlined on the hit path.
func (e *Entry[P]) Unchanged(v uint64) bool { return v&1 == 0 && e.answers.Load() == v }

// WordAndUnits returns Redis's last word and the units held, both of the
// same answer: read once no answer is being put in.
func (e *Entry[P]) WordAndUnits() (Word, int64) {
	for {
		if v := e.answers.Load(); v&1 == 0 {
			w, held := e.LastWord(), e.Units()
			if e.answers.Load() == v {
				return w, held
			}
		}
		runtime.Gosched() // an answer is being put in: a lock and a few stores
	}
}

// Members returns the members of the key Redis counted at its last lease
// (the instances that lease it), or 0 when unknown.
func (e *Entry[P]) Members() int64 { return e.members.Load() }

// ClearMembers forgets the member count of the last lease (Members is 0
// until a lease names one again).
func (e *Entry[P]) ClearMembers() { e.members.Store(0) }

// Shared reports whether at the last lease other members wanted the key
// too, and Redis held this one to its share or denied it.
func (e *Entry[P]) Shared() bool { return e.shared.Load() }

// LowWater returns the units below which a lease is made ahead of need.
func (e *Entry[P]) LowWater() int64 { return e.lowWater.Load() }

// SetLowWater sets the units below which a lease is made ahead of need.
func (e *Entry[P]) SetLowWater(n int64) { e.lowWater.Store(n) }

// Answered records Redis's answer to a lease: its word on the key, the
// key's members (0: not counted, the last count stays), and whether the
// key is shared out (see Shared).
func (e *Entry[P]) Answered(w Word, members int64, shared bool) {
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

// Fill puts g into the entry at now: the size, for the next lease's
// growth, and the units kept, into the allowance; the units held that had
// lapsed meanwhile come out, and those keep says are worth a refund are
// set aside, under the same lock. Fills are serialized: an abandoned
// lease's grant may land while the next lease's does.
//
// It refuses the units kept when the entry is gone (evicted, or at
// Close): kept is false, and the caller gives them back. It drops them
// when the entry's key was forgotten since the lease started (Forget):
// kept is true, forgot true, and they go nowhere, as Forget's do.
func (e *Entry[P]) Fill(g Grant, now int64, keep Keep) (l Lapsed, kept, forgot bool) {
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

// SetAside sets aside units that lapsed unused at now (granted at Redis
// time at, µs), to go back with the entry's next lease, or with
// DrainOldBack. It refuses them when the entry is gone, and reports
// whether it took them: the caller gives back what it refused.
func (e *Entry[P]) SetAside(units, at, now int64) bool {
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
