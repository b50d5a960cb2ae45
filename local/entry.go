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

// deny records that Redis denied n units of this key until until (ns).
func (e *Entry[P]) deny(until, n int64) { e.allowance.deny(until, n) }

// Denied reports whether a recorded denial holds for n units at now, and
// how long until it lapses (see Allowance.Denied).
func (e *Entry[P]) Denied(now, n int64) (bool, int64) { return e.allowance.denied(now, n) }

// Merge puts the units of the entry's two leases together, when both hold
// units unexpired at now (see Allowance.Merge), and reports whether it
// did.
func (e *Entry[P]) Merge(now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowance.merge(now)
}

// Taken returns the units requests took from the allowance so far (see
// Allowance.Taken): final once the entry is gone.
func (e *Entry[P]) Taken() int64 { return e.allowance.taken() }

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

// Shared reports whether at the last lease other members wanted the key
// too, and Redis held this one to its share or denied it.
func (e *Entry[P]) Shared() bool { return e.shared.Load() }

// LowWater returns the units below which a lease is made ahead of need.
func (e *Entry[P]) LowWater() int64 { return e.lowWater.Load() }
