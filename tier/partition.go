package tier

import (
	"context"
	"math"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// Partitions (docs/regions.md, "Partitions and failures"): a region cut
// off from the global Redis gets its failure-mode share, owed to the
// global key until it answers.

// partitioned ends the claimed refill c of pl, whose global call failed:
// the pool gets the region's failure-mode share (what the global key gave
// it lately, else the worldwide rate divided among the regions it last
// counted) for the time since the region last got one (refillSpan at the
// partition's start, cutSpan at most), owed to the global key until it
// answers (docs/regions.md, "Partitions"). The time is the pool's (the
// claim's cut: whichever of the region's instances deposited the last
// share), and the global call's since the claim (claimed, r's clock): the
// share is the region's, however many instances take turns at it. The
// units last cutSpan, so that the pool is not dry while the next refill's
// global call takes its timeout to fail. It reports whether the pool got
// units.
func (r *regions) partitioned(ctx context.Context, pl pool, k known, c remote.Claim, claimed time.Time) bool {
	g := pl.p.Global()
	share := min(k.share, g.Rate())
	if share <= 0 {
		share = g.Rate() / float64(max(1, k.members, 2))
	}
	span := refillSpan
	if c.Cut > 0 {
		since := time.Duration(c.Now-c.Cut)*time.Microsecond + r.clock.Now().Sub(claimed)
		span = min(since, r.cutSpan())
	}
	units := min(g.Capacity(), int64(math.Ceil(share*max(0, span.Seconds()))))
	if r.failClosed {
		// FailClosed: nothing the global key did not grant. The refill
		// ends; the region is denied until the link is back.
		units = 0
	}
	// (From the deposit, not the claim: the global call took its timeout
	// to fail.)
	dep := remote.Deposit{Granted: units, Valid: -1, Since: c.Now, FromNow: true, TTL: r.cutSpan(), Wait: refillSpan}
	if _, err := r.local.Deposit(ctx, pl.p, pl.key, dep); err != nil {
		return false
	}
	r.owe(pl, units)
	r.owed.Add(uint64(units))
	r.later(pl, refillSpan)
	return units > 0
}

// cutSpan is the longest a failure-mode share lasts, and the most a
// partition's deposit covers: a refill's span and the global call's
// timeout, the longest the next refill takes to fail.
func (r *regions) cutSpan() time.Duration { return refillSpan + r.global.Timeout() }

// forget drops what pl owes the global key: its key was reset.
func (r *regions) forget(p *remote.Policy, key string) {
	r.mu.Lock()
	delete(r.debts, pool{p, key})
	r.mu.Unlock()
}

// owe adds n units to what pl owes the global key. Debts are charged by
// the next refill of the pool that reaches the global Redis, or by
// settle, which owe arms for refillSpan later (one timer for them all),
// whichever comes first: an instance that owes need not refill again.
func (r *regions) owe(pl pool, n int64) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.debts[pl] += n
	if r.settling != nil || r.closed.Load() {
		return
	}
	r.work.Add(1)
	r.settling = time.AfterFunc(refillSpan, func() {
		defer r.work.Done()
		r.mu.Lock()
		r.settling = nil
		debts := r.debts
		r.debts = make(map[pool]int64)
		r.mu.Unlock()
		r.settle(debts)
	})
}

// owing takes what pl owes the global key, for the caller to charge.
func (r *regions) owing(pl pool) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.debts[pl]
	delete(r.debts, pl)
	return n
}

// settle charges debts to the global key; what it cannot charge is owed
// again.
func (r *regions) settle(debts map[pool]int64) {
	ctx, cancel := r.global.Bound(context.Background())
	defer cancel()
	for pl, n := range debts {
		if _, err := r.global.Debit(ctx, pl.p.Global(), pl.key, n); err != nil {
			r.owe(pl, n)
			continue
		}
		r.charged.Add(uint64(n))
	}
}
