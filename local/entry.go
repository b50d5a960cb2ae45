package local

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Entry is the local state of one (policy, key), made by its Table. The
// hit path takes its units (Take) and reads Redis's last word with them
// (Answers, LastWord, Unchanged) lock-free; the leaser starts a lease
// (StartLease, TryStartLease), puts its answer in (Answer) and ends it
// (EndLease), and sets aside lapsed units to go back (Lapse, DrainBack,
// DrainOldBack) under a lock of the entry's own, which the hit path never
// takes. P is the type the table's owner names policies with.
type Entry[P any] struct {
	allowance allowance

	key    string
	policy P

	// mu guards what follows; the hit path never takes it.
	mu     sync.Mutex
	demand demand // units wanted: taken, and denied locally
	// leasing is non-nil while a lease is in flight, and closed when it
	// ends: concurrent misses wait on it instead of asking Redis again.
	leasing chan struct{}
	// tag is the leaser's word on the lease in flight (Tag); nil: none.
	tag any
	// seen and askedSeen are allowance.taken() and asked at the last lease.
	seen, askedSeen int64
	// back units lapsed unused (granted at Redis time backAt, µs) and go
	// back with the next lease; set aside at backSince (ns).
	back, backAt, backSince int64
	windowEnd               int64 // ns: when the last grant lapses with its window; 0: no window
	lastGrant               int64 // bounds the next lease's growth
	// request is the last leasing request's n: a lease made ahead of need
	// asks for whole requests of it.
	request int64
	cold    bool // the lease in flight asks for its requester's units alone
	// epoch counts Forgets: a lease started before one puts nothing in.
	// clears counts ClearDenials (Forget's, Refund's, Unblock's): the
	// answer to a lease started before one records no denial or block.
	epoch, clears uint64
	hits          uint64 // the most Hits has reported

	asked   atomic.Int64 // units denied locally: wanted, not taken; less waiters' retries (Retried)
	waiting atomic.Int64 // callers waiting for units (see Waiting)

	// answers counts answers put in, twice each: odd while one is being
	// put in (see Unchanged).
	answers atomic.Uint64
	// Redis's last word (see Word) and the key's members (0: unknown).
	decider      atomic.Int32
	remaining    atomic.Int64
	resetAt      atomic.Int64
	members      atomic.Int64
	shared       atomic.Bool
	blockedUntil atomic.Int64
	// retryAt is RetryAt's time (ns) and fair-share flag in one word, so
	// that a reader never sees one answer's time with another's flag: the
	// time doubled, plus 1 for the fair share.
	retryAt  atomic.Int64
	lowWater atomic.Int64

	table *Table[P]
	// gone: the entry left its table (set under mu, read without it by
	// lookups): nothing is put in after.
	gone    atomic.Bool
	lookups atomic.Int32 // the table's snapshot missed it (up to repeated)
}

// Key returns the caller's key of the entry.
func (e *Entry[P]) Key() string { return e.key }

// Policy returns the entry's policy, as its table's owner names it.
func (e *Entry[P]) Policy() P { return e.policy }

// Take takes n units if one of the entry's two leases holds them unexpired
// at now, and returns about how many are left. Lock-free: atomic loads and,
// for one unit, one atomic add.
func (e *Entry[P]) Take(n, now int64) (left int64, ok bool) { return e.allowance.take(n, now) }

// Recheck reports whether a Take of n units that left left is one after
// which the caller, taking at a cached time, reads the time precisely:
// about one per 64th of the last lease, so that at most that share of a
// lease is taken past its expiry however far the cached time lags.
func (e *Entry[P]) Recheck(left, n int64) bool { return e.allowance.recheck(left, n) }

// Units returns the units held, expired or not.
func (e *Entry[P]) Units() int64 { return e.allowance.units() }

// Hits returns the requests answered from the entry's units so far. It
// never goes down; hits under way may not be counted yet.
func (e *Entry[P]) Hits() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits = max(e.hits, e.allowance.hits())
	return e.hits
}

// Denied reports whether Redis's last denial, of n units or fewer, holds
// at now, and how long until it lapses.
func (e *Entry[P]) Denied(now, n int64) (bool, int64) { return e.allowance.denied(now, n) }

// Merge puts the units of the entry's two leases together, under the
// earlier expiry, when both hold units unexpired at now, so that a Take of
// more than either holds finds them. It reports whether it did.
func (e *Entry[P]) Merge(now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowance.merge(now)
}

// Taken returns the units taken so far: final once the entry is gone.
func (e *Entry[P]) Taken() int64 { return e.allowance.taken() }

// Wanted counts n units wanted but not taken (a cached denial, or a
// request leasing its own units beside a cold lease) into the demand.
func (e *Entry[P]) Wanted(n int64) { e.asked.Add(n) }

// Retried takes back n units for a waiter's retry (its first try counted them).
func (e *Entry[P]) Retried(n int64) { e.asked.Add(-n) }

// Seed has the demand start at first (ns), as if used units had been
// taken since: the key's uses before the entry. Not once it has leased.
func (e *Entry[P]) Seed(first, used, now int64) {
	e.mu.Lock()
	e.demand.seed(first, used, now)
	e.mu.Unlock()
}

// Waiting counts a caller that starts (d = 1) or stops (d = -1) waiting
// for the entry's units; while any waits, its leases say so
// (Lease.Waiting).
func (e *Entry[P]) Waiting(d int64) { e.waiting.Add(d) }

// Word is Redis's last word on an entry's key, which local hits and
// cached denials report.
type Word struct {
	Limit     int   // the index in the policy of the limit that decided
	Remaining int64 // that limit's room beyond what was leased
	ResetAt   int64 // ns: when it would be fully replenished
}

// LastWord returns Redis's word at the entry's last lease, lock-free.
func (e *Entry[P]) LastWord() Word {
	return Word{Limit: int(e.decider.Load()), Remaining: e.remaining.Load(), ResetAt: e.resetAt.Load()}
}

// Answers returns the count of answers put in, read before a Take whose
// units left are reported with LastWord (see Unchanged).
func (e *Entry[P]) Answers() uint64 { return e.answers.Load() }

// Unchanged reports whether no answer was put in, or is being put in,
// since Answers returned v: then a Take after that reading and LastWord
// after the Take belong together; else the caller reads both again with
// WordAndUnits.
func (e *Entry[P]) Unchanged(v uint64) bool { return v&1 == 0 && e.answers.Load() == v }

// WordAndUnits returns Redis's last word and the units held, of the same
// answer.
func (e *Entry[P]) WordAndUnits() (Word, int64) {
	for {
		if v := e.answers.Load(); v&1 == 0 {
			w, held := e.LastWord(), e.Units()
			if e.answers.Load() == v {
				return w, held
			}
		}
		runtime.Gosched() // an answer is being put in
	}
}

// Members returns the instances leasing the key that Redis counted at the
// last lease, or 0 when unknown.
func (e *Entry[P]) Members() int64 { return e.members.Load() }

// Shared reports whether at the last lease other members wanted the key
// too, and Redis held this one to its share or denied it.
func (e *Entry[P]) Shared() bool { return e.shared.Load() }

// LowWater returns the units below which a lease is made ahead of need.
func (e *Entry[P]) LowWater() int64 { return e.lowWater.Load() }
