package tier

import (
	"context"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// FillSlots gives away e's dense slots, so that the policies e leases
// under from now on are kept in its map.
func FillSlots(e *Engine) {
	e.tables.mu.Lock()
	e.tables.used = denseSlots
	e.tables.mu.Unlock()
}

// SlotOf returns p's slot in e, if e gave it one.
func SlotOf(e *Engine, p *remote.Policy) (int, bool) {
	if v, ok := e.tables.slots.Load(p); ok {
		return v.(*remote.Slot).Index, true
	}
	return 0, false
}

// OnPermitWait makes e call f as an acquire or an extension of a leased
// permit begins to wait for a lease call in flight (f must not block for
// long: the waiter waits after it).
func OnPermitWait(e *Engine, f func()) { e.pools.onWait = f }

// AcquireLeasedPastCheck is a lease-mode AcquirePermit that passed the
// engine's closed check before Close began: it races Close.
func AcquireLeasedPastCheck(ctx context.Context, e *Engine, name, key, id string, limit int64, ttl time.Duration) (PermitDecision, error) {
	return e.acquireLeased(ctx, poolKey{name, key, limit, ttl}, id)
}

// Allow decides as the root's Allow does: Hit, then Miss.
func (e *Engine) Allow(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	return e.allow(ctx, p, key, n)
}

// KnowPools bounds what e's regional tier knows of pools to the n it
// refilled last.
func KnowPools(e *Engine, n int) { e.regions.known.Resize(n) }

// Owing returns what e's region owes the global key for the pool of key
// under the pooled policy p.
func Owing(e *Engine, p *remote.Policy, key string) int64 {
	e.regions.mu.Lock()
	defer e.regions.mu.Unlock()
	return e.regions.debts[pool{p, key}]
}

// RefillPastCheck is a background refill of the pool of key under the
// pooled policy p asked for by a decision that passed Answered's closed
// check before Close began: it races Close.
func RefillPastCheck(e *Engine, p *remote.Policy, key string) { e.regions.start(pool{p, key}, 0) }
