package tier

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// The operators: AllowAtMost, Refund, RefundAt, Charge, Peek, Reset, Block
// and Unblock. None is on the hit path; each makes at most one Redis call,
// through the door.

// held returns the local entry of key under p when p leases and the entry
// exists; it makes none.
func (e *Engine) held(p *remote.Policy, key string) (*leasesync.Entry, bool) {
	if e.leaser == nil || !leasable(p) {
		return nil, false
	}
	st := e.tables.find(p)
	if st == nil {
		return nil, false
	}
	return st.table.Get(key)
}

// AllowAtMost admits between 1 and n units of key now, as many as p allows
// (n above p's capacity asks for the capacity), and charges them; the
// Decision's Granted says how many, 0 when denied. In lease mode the units
// held locally are taken first, and Redis is asked for the rest (one
// call, not a lease): if it denies them or cannot answer, the local units
// are the grant. With none held, a denial cached locally stands, and a
// Redis failure is decided by the failure mode, as Allow's. A grant with
// local units in it is dated (At) when they were taken: Redis may place
// its call in a later window than theirs, and a refund of the grant
// (Settle) must not give their units back to that window.
func (e *Engine) AllowAtMost(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if e.closed.Load() {
		return Decision{}, door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return Decision{}, err
	}
	n = min(n, p.Capacity())
	var got, takenAt int64
	ent, found := e.held(p, key)
	if found {
		now := e.leaser.Now()
		got = ent.TakeUpTo(n, now)
		if got > 0 {
			takenAt = e.RedisTime()
			e.afterTake(ent, ent.Units())
		}
		if got == n {
			return e.heldDecision(p, ent, got, now, takenAt), nil
		}
		if denied, _ := ent.Denied(now, 1); denied { // Redis has not one unit
			if got > 0 {
				return e.heldDecision(p, ent, got, now, takenAt), nil
			}
			if d, done := e.fromLocal(p, ent, 1, now); done {
				if d.Allowed { // a lease came in meanwhile
					d.Granted = 1
				}
				return d, nil
			}
		}
	}
	d, cause, err := e.door.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: 1, Max: n - got})
	switch {
	case got > 0 && (err != nil || cause != nil || d.Granted == 0):
		// The local units are admitted already: they are the grant, with
		// what a lease in flight took from Redis meanwhile.
		got += e.afterInFlight(ctx, ent, n-got)
		return e.heldDecision(p, ent, got, e.leaser.Now(), takenAt), nil
	case err != nil:
		return Decision{}, err
	case cause != nil:
		return e.unavailableAtMost(p, key, n, cause)
	case found && d.Granted == 0:
		// Redis denied, none held: a lease in flight may have taken the
		// units meanwhile, which are then the grant.
		if k := e.afterInFlight(ctx, ent, n); k > 0 {
			return e.heldDecision(p, ent, k, e.leaser.Now(), e.RedisTime()), nil
		}
	}
	dec := e.decided(p, d)
	if found && d.Granted > 0 && got+d.Granted < n {
		got += e.afterInFlight(ctx, ent, n-got-d.Granted)
	}
	dec.Granted = got + d.Granted
	if takenAt != 0 {
		dec.At = takenAt
	}
	if found { // what this instance holds is charged in Redis, not used
		held := ent.Units()
		dec.Remaining += held
		dec.ResetAfter = max(0, dec.ResetAfter-time.Duration(held*p.UnitRefill(dec.Limit)))
	}
	return dec, nil
}

// afterInFlight takes up to n units from ent's allowance once the lease of
// ent in flight, if any, has put its grant there (or ctx is done), and
// returns how many it took. Redis granted an AllowAtMost less than it
// asked: a lease in flight (a prefetch) may have taken the rest meanwhile,
// and its answer may have come but not yet reached the allowance.
func (e *Engine) afterInFlight(ctx context.Context, ent *leasesync.Entry, n int64) int64 {
	if ch := ent.Leasing(); ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	return ent.TakeUpTo(n, e.leaser.Now())
}

// heldDecision is the Decision of got units taken from ent's allowance at
// now (at: Redis's time then, for the grant's receipt): a hit.
func (e *Engine) heldDecision(p *remote.Policy, ent *leasesync.Entry, got, now, at int64) Decision {
	ent.CountHit()
	d := e.localDecision(p, ent, now)
	d.Granted, d.At = got, at
	return d
}

// unavailableAtMost decides an AllowAtMost of up to n units while Redis
// cannot (cause says why), by the failure mode: FailOpen admits n,
// FailClosed fails, FailLocal admits what this instance's share of the
// key's limits holds now, at least 1, or denies.
func (e *Engine) unavailableAtMost(p *remote.Policy, key string, n int64, cause error) (Decision, error) {
	now := e.clock.Now()
	if e.fallback.mode == FailLocal {
		n = max(1, min(n, e.fallback.avail(p, key, now)))
	}
	d, err := e.unavailable(p, key, n, cause)
	if d.Allowed {
		d.Granted = n
	}
	return d, err
}

// avail returns the units key's local limits (FailLocal) hold at now.
func (f *fallback) avail(p *remote.Policy, key string, now time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	least := int64(math.MaxInt64)
	now = f.monotone(now) // (as decide gives its limits: see monotone)
	for _, l := range f.entryLocked(p, key).limits {
		least = min(least, int64(l.TokensAt(now)))
	}
	return least
}

// Refund gives n units of key back to every limit of p, as if granted now
// and not used, never above a limit's capacity (n above the largest
// capacity gives no more back): see remote.Store.GiveBack. In lease mode
// the units go to Redis, not into the local allowance (other instances may
// use them), and a denial cached locally is dropped. A failure of Redis is
// an error wrapping door.ErrUnavailable, whatever the failure mode.
func (e *Engine) Refund(ctx context.Context, p *remote.Policy, key string, n int64) error {
	return e.giveBack(p, key, func() error { return e.door.GiveBack(ctx, p, key, min(n, p.MaxCapacity())) })
}

// RefundAt gives n units of key back to every limit of p that granted
// them at Redis time at (µs): see remote.Store.Refund. A window that is no
// longer at's gets nothing back, and a token bucket only what could not
// have overflowed it since at. Otherwise as Refund.
func (e *Engine) RefundAt(ctx context.Context, p *remote.Policy, key string, n, at int64) error {
	return e.giveBack(p, key, func() error { return e.door.RefundAt(ctx, p, key, min(n, p.MaxCapacity()), at) })
}

// giveBack runs give, which gives units of key under p back in Redis,
// with the denial cached for key dropped before and after it.
func (e *Engine) giveBack(p *remote.Policy, key string, give func() error) error {
	if e.closed.Load() {
		return door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return err
	}
	ent, found := e.held(p, key)
	if found {
		ent.ClearDenial(false)
	}
	err := give()
	if found {
		// Again: a lease in flight may have been denied before the units
		// were back, and recorded it meanwhile.
		ent.ClearDenial(false)
	}
	return err
}

// RedisTime returns this instance's reading of Redis's clock (µs): the
// time a decision from units held is settled at. 0 in exact mode, and
// before any lease reply (see leasesync.Leaser.RedisTime).
func (e *Engine) RedisTime() int64 {
	if e.leaser == nil {
		return 0
	}
	return e.leaser.RedisTime()
}

// Charge charges n units (1 to remote.MaxCharge) to every limit of key
// under p in Redis, whatever they have left: a cost known once the work is
// done. A limit charged past its room is in debt (Decision.Debt units) and
// denies until it is paid off. In lease mode the units go to Redis
// directly, not out of the local allowance: what this instance holds was
// charged when it was leased, and stays usable; the next lease meets the
// debt. A failure of Redis is an error wrapping door.ErrUnavailable,
// whatever the failure mode: nothing is kept to charge later.
func (e *Engine) Charge(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if e.closed.Load() {
		return Decision{}, door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return Decision{}, err
	}
	d, gp := e.worldwide(p)
	r, err := d.Debit(ctx, gp, key, n)
	if err != nil {
		return Decision{}, err
	}
	dec := decision(r) // a charge is always granted
	dec.Granted, dec.Debt = r.Granted, r.Debt
	return dec, nil
}

// Peek reports what Allow would decide for one unit of key now, charging
// nothing (Granted 1 or 0). In lease mode, when this instance holds a unit
// of key, or a denial of it is cached, that is the answer (Source Local or
// Cached), without a Redis call, as Allow's would be: its Remaining and
// ResetAfter are Redis's last word at the key's last lease, with the units
// held. Otherwise Redis is read (Source Remote), the units held added to
// its Remaining. The fair share of a key among instances is not applied.
// A failure of Redis is an error wrapping door.ErrUnavailable, whatever the
// failure mode.
func (e *Engine) Peek(ctx context.Context, p *remote.Policy, key string) (Decision, error) {
	if e.closed.Load() {
		return Decision{}, door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return Decision{}, err
	}
	ent, found := e.held(p, key)
	if found {
		now := e.leaser.Now()
		if ent.Holds(1, now) {
			d := e.localDecision(p, ent, now)
			d.Granted = 1
			return d, nil
		}
		if denied, left := ent.Denied(now, 1); denied {
			return cachedDenial(ent, left, now), nil
		}
	}
	d, gp := e.worldwide(p)
	r, err := d.Peek(ctx, gp, key)
	if err != nil {
		return Decision{}, err
	}
	dec := Decision{Allowed: r.Granted > 0, Granted: r.Granted, Source: SourceRemote, Limit: r.Decider,
		Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, Blocked: r.Blocked}
	if found {
		dec.Remaining += ent.Units()
	}
	return dec, nil
}

// Reset forgets key's state under p: in Redis, every limit's and the key's
// members (one call); here, the units this instance holds of it, those set
// aside to go back, its cached denial, and what FailLocal admitted of it
// during an outage. Other instances keep what they leased of the key until
// it lapses (the lease TTL, or the end of its window), and their cached
// denials lapse within the TTL too. A failure of Redis is an error wrapping
// door.ErrUnavailable; the local state is forgotten all the same.
func (e *Engine) Reset(ctx context.Context, p *remote.Policy, key string) error {
	if e.closed.Load() {
		return door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return err
	}
	ent, found := e.held(p, key)
	if found {
		e.leaser.Forget(ent)
	}
	e.fallback.forget(p, key)
	err := e.door.Reset(ctx, p, key)
	if d, gp := e.worldwide(p); gp != p {
		// The worldwide key too, and what a partition left owed to it;
		// other regions' pools keep their units until they lapse
		// (docs/regions.md).
		e.regions.forget(p, key)
		err = errors.Join(err, d.Reset(ctx, gp, key))
	}
	if found {
		e.leaser.Forget(ent) // what a lease in flight put in meanwhile (those still in flight put nothing in)
	}
	return err
}

// forget drops key's local limits and what they admitted.
func (f *fallback) forget(p *remote.Policy, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys.Remove(fallbackKey{p, key})
}

// Block blocks key under p in Redis for d (one call): every instance's next
// call to Redis about the key is denied, charging nothing, with the block's
// time left, until it lapses or Unblock. In lease mode this instance's
// units of the key are given back, and the denial is cached as a block (for
// d, or the lease TTL, whichever ends first): other instances use the units
// they hold until those lapse, within the lease bound. A failure of Redis
// is an error wrapping door.ErrUnavailable, and blocks nothing.
func (e *Engine) Block(ctx context.Context, p *remote.Policy, key string, d time.Duration) error {
	if e.closed.Load() {
		return door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return err
	}
	if err := e.door.Block(ctx, p, key, d); err != nil {
		return err
	}
	if g, gp := e.worldwide(p); gp != p {
		// Worldwide: other regions' refills are denied from now on.
		if err := g.Block(ctx, gp, key, d); err != nil {
			return err
		}
	}
	if e.leaser != nil && leasable(p) {
		if ent, err := e.entry(p, key); err == nil { // (else p was redefined: nothing to keep)
			e.leaser.Block(ent, d)
		}
	}
	return nil
}

// Unblock lifts a block of key under p in Redis (one call), and drops this
// instance's cached block of it. Other instances' cached blocks last until
// they lapse, within the lease TTL. A failure of Redis is an error
// wrapping door.ErrUnavailable; the local block is dropped all the same.
func (e *Engine) Unblock(ctx context.Context, p *remote.Policy, key string) error {
	if e.closed.Load() {
		return door.ErrClosed
	}
	if _, err := e.check(p); err != nil {
		return err
	}
	err := e.door.Unblock(ctx, p, key)
	if d, gp := e.worldwide(p); gp != p {
		err = errors.Join(err, d.Unblock(ctx, gp, key))
	}
	if ent, found := e.held(p, key); found {
		// (Whether a block is recorded or not: one may be on its way in
		// the answer to a lease in flight.)
		ent.ClearDenial(true)
	}
	return err
}

// worldwide returns the door and the policy of p's worldwide state: the
// global Redis's and the policy p pools, for a pooled policy (regions);
// else the engine's door and p.
func (e *Engine) worldwide(p *remote.Policy) (*door.Door, *remote.Policy) {
	if g := p.Global(); g != nil && e.regions != nil {
		return e.regions.global, g
	}
	return e.door, p
}

// CountShadowDenied counts a denial of p that was admitted because p is
// in shadow mode (the denial itself is counted where it was decided).
func (e *Engine) CountShadowDenied(p *remote.Policy) {
	c := e.counts(p)
	c.shadowDenied.Add(1)
	e.movedLate(c)
}
