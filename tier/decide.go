package tier

import (
	"context"
	"runtime"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// members returns how many instances share key under p, for FailLocal: the
// members Redis counted at the key's last lease, or, for a key not leased
// yet, the most any key had lately.
func (e *Engine) members(p *remote.Policy, key string) int64 {
	if ent, ok := e.held(p, key); ok {
		if m := ent.Members(); m > 0 {
			return m
		}
	}
	return e.leaser.Instances()
}

// allow decides whether n units of key may be used now, charging them if
// so. A denial is a Decision, never an error. It is Hit, then Miss.
func (e *Engine) allow(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if limit, remaining, resetAfter, ok := e.Hit(p, key, n); ok {
		return hitDecision(limit, remaining, resetAfter), nil
	}
	return e.Miss(ctx, p, key, n)
}

// Hit is the hit path: it takes n units of key from the local allowance if
// it holds them, with a lookup, a read of the Leaser's time (a coarse
// clock's, and how far behind it may be: Leaser.HitNow) and an atomic add
// or compare-and-swap (no lock, no allocation, no Redis call), and starts
// a background lease when the allowance runs low. On a hit it returns what
// a Decision of Source Local holds (it is Allowed, with no RetryAfter):
// the deciding limit's index, the remaining estimate, the time until full
// replenishment. The results are scalars, passed in registers: a Decision
// would be built and copied through memory, a large part of a hit's cost.
// ok is false on a miss (or a closed engine, or a policy that does not
// lease): the caller goes on with Miss.
func (e *Engine) Hit(p *remote.Policy, key string, n int64) (limit int, remaining int64, resetAfter time.Duration, ok bool) {
	if e.closed.Load() || e.leaser == nil || !leasable(p) {
		return 0, 0, 0, false
	}
	st := e.tables.cached(p)
	if st == nil {
		if st = e.tables.findSlow(p); st == nil { // no key of p is held
			return 0, 0, 0, false
		}
	}
	now, late := e.leaser.HitNow()
	ent, found := st.table.Get(key)
	if !found {
		return 0, 0, 0, false
	}
	// The units must outlast the time by as much as the cached reading may
	// be behind it: a take within that of their expiry is a miss, and Miss
	// takes them at a precise reading.
	v := ent.Answers()
	left, ok := ent.Take(n, now+late)
	if !ok {
		return 0, 0, 0, false
	}
	if ent.Recheck(left, n) {
		// One take in a 64th of a lease brings the cached reading up to
		// date: however far it lags (its ticker waits for a CPU while
		// callers spin), at most that many of a lease's units are taken
		// past their expiry.
		e.leaser.Now()
	}
	e.afterTake(ent, left)
	w := ent.LastWord()
	if !ent.Unchanged(v) { // an answer came in meanwhile: its word and units
		w, left = ent.WordAndUnits()
	}
	limit, remaining, resetAfter = hitState(p, w, left, now)
	return limit, remaining, resetAfter, true
}

// afterTake starts a background lease for ent if its allowance ran low
// with the take, which left left units.
func (e *Engine) afterTake(ent *leasesync.Entry, left int64) {
	if left < ent.LowWater() {
		e.leaser.Prefetch(ent) // which asks the door's breaker, if a lease would start
	}
}

// Miss decides a request that Hit did not answer: from a cached denial,
// a lease, one exact Redis call, or the failure mode.
func (e *Engine) Miss(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if e.closed.Load() {
		return Decision{}, door.ErrClosed
	}
	v, err := e.check(p)
	if err != nil {
		return Decision{}, err
	}
	if e.leaser != nil && leasable(p) && v == current {
		return e.allowLeased(ctx, p, key, n)
	}
	return e.allowExact(ctx, p, key, n)
}

// leasable reports whether p's decisions may come from leases: not when it
// has a SlidingWindowLog (exact by choice: its entries are its accuracy) or
// a LeakyBucket (its point is spacing, which a batch of units would break).
func leasable(p *remote.Policy) bool {
	return !p.Uses(remote.SlidingWindowLog) && !p.Uses(remote.LeakyBucket)
}

// entry returns the entry of key in p's table, making the table and the
// entry if needed. A table found retired (its last entry left, and the
// engine is dropping it) is made anew.
// A policy a redefinition replaced since its check gets errRedefined.
func (e *Engine) entry(p *remote.Policy, key string) (*leasesync.Entry, error) {
	for {
		st := e.tables.find(p)
		if st == nil {
			var err error
			if st, err = e.tables.getOrMake(p, e.leaser); err != nil {
				return nil, err
			}
		}
		if ent := st.table.GetOrCreate(key); ent != nil {
			return ent, nil
		}
	}
}

// allowLeased decides a request that missed the allowance: from a cached
// denial, or units held or come in meanwhile, or else by leasing (one
// Redis call, coalesced with concurrent misses on the key), keeping n units
// of the grant.
func (e *Engine) allowLeased(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	exact, first, known := e.firstUse(p, key)
	if exact {
		return e.decideFirst(ctx, p, key, n)
	}
	ent, err := e.entry(p, key)
	if err != nil { // errRedefined: check again
		return e.Miss(ctx, p, key, n)
	}
	if known {
		// Made at the key's third use: its demand counts the second's
		// units (this request's n stands for them; the first's start the
		// clock), as if made at the second.
		ent.Seed(first, n, e.leaser.Now())
	}
	// Read after entry(), which may have made the table and the entry and
	// evicted others (their locks, their refunds): the units are taken at
	// the time they are taken.
	now := e.leaser.Now()
	if d, done := e.fromLocal(p, ent, n, now); done {
		return d, nil
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	var d remote.Decision
	var taken bool
	if dec, done, err := e.viaDoor(ctx, p, key, n, func(ctx context.Context) (err error) {
		d, taken, err = e.leaser.Lease(ctx, ent, n)
		return err
	}); done {
		return dec, err
	}
	if taken { // a concurrent lease filled the allowance
		return e.localDecision(p, ent, now), nil
	}
	if d.Granted == 0 && d.RetryAfter == 0 { // a concurrent lease was denied
		if dd, done := e.fromLocal(p, ent, n, e.leaser.Now()); done {
			return dd, nil
		}
	}
	if p.EmptyPool(d) {
		// The region's pool ran dry, not the worldwide limit: decided as
		// exact mode decides it, which waits for the pool's refill.
		return e.allowExact(ctx, p, key, n)
	}
	dec := e.decided(p, d)
	// What Redis has left, and what this instance holds (charged in Redis,
	// not used: see hitState).
	held := ent.Units()
	dec.Remaining += held
	dec.ResetAfter = max(0, dec.ResetAfter-time.Duration(held*p.UnitRefill(dec.Limit)))
	return dec, nil
}

// decideFirst decides one of the first two uses of key (firstUse) as
// exact mode decides it (through the door's combiner, the request's units
// alone), and makes no entry. It is counted as a lease of those units
// (Leaser.Decided); a grant whose requester left goes back rather than
// being lost.
func (e *Engine) decideFirst(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	if !e.leaser.Begin() {
		return Decision{}, door.ErrClosed
	}
	defer e.leaser.End()
	r := remote.Request{Policy: p, Key: key, Min: n, Max: n}
	cctx := ctx
	if !e.door.Guarded() {
		// The client would cut the call at ctx's end and lose its grant:
		// the call goes on, bounded by the Redis timeout, and Decided
		// gives the grant back. (A guarded call returns at ctx's end, and
		// the door refunds a grant that lands later.) Always detached:
		// asking first whether ctx can end (Done) would make a fresh
		// context's channel, an allocation as dear as the detaching.
		cctx = context.WithoutCancel(ctx)
	}
	d, cause, err := e.door.Acquire(cctx, r)
	if err != nil {
		return Decision{}, err
	}
	if cause != nil {
		return e.unavailable(p, key, n, cause)
	}
	left := ctx.Err()
	e.leaser.Decided(r, d, left == nil)
	if left != nil {
		return Decision{}, left
	}
	dec := decision(d)
	if !dec.Allowed && !dec.Blocked {
		if held, ok := e.heldBeside(ctx, p, key, n); ok {
			return held, nil
		}
	}
	// Counted with the policy, held keys or not (a policy whose keys are
	// all used once holds none), as an exact policy's decisions are.
	e.countIn(&e.tables.exact(p).counts, p, SourceRemote, dec.Allowed, deciding(dec))
	return dec, nil
}

// heldBeside answers a first use that Redis denied from the units a use
// beside it leased into this process meanwhile, if they are there: the
// key's third use makes its entry and leases, Redis may run that lease
// before this use's call, and the lease may take every unit the key has.
// Units held are taken at once; else a lease of the entry in flight is
// waited for (it is bounded by the Redis timeout) and the units looked at
// again. ok is false when the key has no entry, or its entry holds fewer
// than n units: the denial stands. (A block's denial stands too: the
// caller does not ask.)
func (e *Engine) heldBeside(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, bool) {
	ent, ok := e.held(p, key)
	if !ok {
		return Decision{}, false
	}
	if d, ok := e.take(p, ent, n, e.leaser.Now()); ok {
		return d, true
	}
	leasing := ent.Leasing()
	if leasing == nil {
		return Decision{}, false
	}
	select {
	case <-leasing:
	case <-ctx.Done():
	}
	return e.take(p, ent, n, e.leaser.Now())
}

// viaDoor makes call, the Leaser's Redis call for key of p, through the
// door: the key's breaker must let it through, call's context is bounded by
// the timeout, and its outcome goes back to the breaker. Where the breaker
// refuses it, or the call fails and opens it, the failure mode decides; a
// call that fails otherwise returns its error. done reports either: the
// caller returns dec and err.
func (e *Engine) viaDoor(ctx context.Context, p *remote.Policy, key string, n int64, call func(context.Context) error) (dec Decision, done bool, err error) {
	pass, cause := e.door.Enter(p, key)
	if cause != nil {
		dec, err = e.unavailable(p, key, n, cause)
		return dec, true, err
	}
	lctx, cancel := e.door.Bound(ctx)
	defer cancel()
	if err := call(lctx); err != nil {
		err = door.Classify(ctx, err)
		if cause := e.door.Leave(pass, err); cause != nil {
			dec, err = e.unavailable(p, key, n, cause)
			return dec, true, err
		}
		return Decision{}, true, err
	}
	e.door.Leave(pass, nil)
	return Decision{}, false, nil
}

// firstUse reports whether key of p has no entry and is among its first
// two uses lately (firstUses): its decision is then made as exact mode
// makes it. Otherwise first is its first use's time, if known (firstUses).
func (e *Engine) firstUse(p *remote.Policy, key string) (exact bool, first int64, known bool) {
	if e.firsts == nil {
		return false, 0, false
	}
	if _, ok := e.held(p, key); ok {
		return false, 0, false
	}
	return e.firsts.use(p, key, e.leaser.Now())
}

// fromLocal answers from ent if it can: units taken from the allowance
// (then perhaps a prefetch), or a cached denial. Units held are used first,
// even while Redis denies the key: a prefetch may have been denied while
// some were left. done is false on a miss.
func (e *Engine) fromLocal(p *remote.Policy, ent *leasesync.Entry, n, now int64) (Decision, bool) {
	if d, ok := e.take(p, ent, n, now); ok {
		return d, true
	}
	if denied, left := ent.Denied(now, n); denied {
		ent.Wanted(n) // the demand counts it
		// A caller that spins on a denied key must not hold its core: the
		// goroutines that refill the allowance (the lease's reply, the
		// batcher, the requester it wakes) would wait behind every spinner
		// for a time slice each, while the key's share makes units nobody
		// takes. A denial served locally
		// yields first: it costs the denial a scheduling round, and the
		// refill no more than one.
		runtime.Gosched()
		d := cachedDenial(ent, left, now)
		e.countBy(p, SourceCached, false, deciding(d))
		return d, true
	}
	return Decision{}, false
}

// take answers from the units ent holds, if it holds n: a hit.
func (e *Engine) take(p *remote.Policy, ent *leasesync.Entry, n, now int64) (Decision, bool) {
	v := ent.Answers()
	left, ok := ent.Take(n, now)
	if !ok && n > 1 && ent.Units() >= n && ent.Merge(now) {
		// Neither lease held n units, both together may.
		left, ok = ent.Take(n, now)
	}
	if !ok {
		return Decision{}, false
	}
	e.afterTake(ent, left)
	w := ent.LastWord()
	if !ent.Unchanged(v) {
		w, left = ent.WordAndUnits()
	}
	return hitDecision(hitState(p, w, left, now)), true
}

// cachedDenial is the Decision of ent's denial cached at now, left before
// it lapses. RetryAfter: what Redis said, while it lasts; past it (this
// instance waits for its share's next batch), left. Remaining: what Redis
// last said it had left, and what this instance holds (too few). A block
// reports its own time left instead (longer than the cache's, capped at the
// lease TTL), and nothing remaining.
func cachedDenial(ent *leasesync.Entry, left, now int64) Decision {
	if until := ent.BlockedUntil(); until > now {
		return Decision{Source: SourceCached, Blocked: true,
			RetryAfter: time.Duration(until - now), ResetAfter: time.Duration(until - now)}
	}
	w, held := ent.WordAndUnits()
	// Redis's RetryAfter (the cache may ask again sooner, at left, or
	// later: its share's next batch).
	at, share := ent.RetryAt()
	retry := at - now
	if retry <= 0 {
		retry, share = left, true
	}
	return Decision{Source: SourceCached, Limit: w.Limit, RetryAfter: time.Duration(retry), FairShare: share,
		Remaining:  w.Remaining + held,
		ResetAfter: time.Duration(max(0, w.ResetAt-now))}
}

// localDecision is the Decision of a hit on ent at now.
func (e *Engine) localDecision(p *remote.Policy, ent *leasesync.Entry, now int64) Decision {
	w, held := ent.WordAndUnits()
	return hitDecision(hitState(p, w, held, now))
}

// hitState is what a hit reports, from w, Redis's last word on the entry,
// and the units it holds at now: the deciding limit; the remaining
// estimate, what Redis had left at the last lease plus what this instance
// holds; and the time until full replenishment, Redis's at the last lease
// less what the units held would take to refill a token bucket (they are
// charged in Redis, but not used). Scalars in, scalars out: it is inlined
// on the hit path.
func hitState(p *remote.Policy, w local.Word, held, now int64) (limit int, remaining int64, resetAfter time.Duration) {
	return w.Limit, w.Remaining + held, time.Duration(max(0, w.ResetAt-now-held*p.UnitRefill(w.Limit)))
}

// hitDecision is the Decision of a hit, from hitState's results.
func hitDecision(limit int, remaining int64, resetAfter time.Duration) Decision {
	return Decision{Allowed: true, Source: SourceLocal, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}
