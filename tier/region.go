package tier

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// regions is the regional tier (docs/regions.md): it keeps the pools of
// worldwide policies in this region's Redis filled from the global Redis.
// A pool's refill is claimed in the region's Redis (one in flight per
// region and key), made by one call to the global Redis as this region, a
// member of the global key with the region's demand (so that regions share
// a scarce limit max-min, as instances do), and deposited in the pool. The
// door tells it of every decision of a pooled policy (door.Pools).
type regions struct {
	name string
	// failClosed: in a partition, the region gets no failure-mode share.
	failClosed bool
	ttl        time.Duration // the longest a pool keeps units
	local      *door.Door    // the region's Redis: the engine's door
	global     *door.Door
	clock      clock.Clock
	// flight holds the refills this process has in flight, by pool.
	flight sync.Map // pool -> *refill
	// rtt is a moving average of the global round trip (ns).
	rtt atomic.Int64
	// known is what this process knows of each pool it refilled lately.
	known *lru.Cache[pool, known]
	// refills counts the global calls made, units what they deposited;
	// owed the units deposited in partitions, charged those charged since.
	refills, units, owed, charged atomic.Uint64
	closed                        atomic.Bool
	work                          sync.WaitGroup // background refills, and the timers of later ones
	mu                            sync.Mutex
	timers                        map[pool]*wakeup // later's, by pool
	settling                      *time.Timer      // owe's, while debts wait for it
	// debts are the units this process's refills deposited while the
	// global Redis did not answer, by pool, until charged to it: never
	// forgotten with what is known of a pool. Under mu.
	debts map[pool]int64
}

// pool names a regional pool: a pooled policy and a key.
type pool struct {
	p   *remote.Policy
	key string
}

// refill is a refill in flight in this process; done is closed at its
// end; claim is its claim's time once it holds the pool's (see close).
type refill struct {
	done  chan struct{}
	claim atomic.Int64
	// putOff: how long it was put off, to the next window (doomed), so
	// that nothing comes now (ns; 0: not).
	putOff atomic.Int64
}

// RegionTTL is the longest a regional pool keeps the units it is given.
const RegionTTL = 5 * time.Second

// defaultRTT is the global round trip assumed until one is measured.
const defaultRTT = 100 * time.Millisecond

func newRegions(name string, global *door.Door, c clock.Clock, failClosed bool) *regions {
	cache, _ := lru.New[pool, known](4096) // (an error only for a size <= 0)
	r := &regions{name: name, failClosed: failClosed, ttl: RegionTTL, global: global, clock: c, known: cache, timers: make(map[pool]*wakeup),
		debts: make(map[pool]int64)}
	r.rtt.Store(int64(defaultRTT))
	return r
}

// lead is how long ahead of need a pool is refilled: a few global round
// trips.
func (r *regions) lead() time.Duration { return 3*time.Duration(r.rtt.Load()) + 50*time.Millisecond }

// low is the units under which the pool of key under p may want a
// refill, as far as this process knows: half its last refill, or what its
// region took over the lead at its last claim, whichever is more; before
// either is known, what the worldwide rate gives over the lead. The claim
// decides, from what the region takes now.
func (r *regions) low(pl pool) int64 {
	k, ok := r.known.Get(pl)
	if !ok {
		return max(1, int64(math.Ceil(pl.p.Rate()*r.lead().Seconds())))
	}
	return max(1, k.size/2, int64(math.Ceil(float64(k.taken)*r.lead().Seconds())))
}

// known is what this process knows of a pool: what its region took
// lately (units/s) at its last claim, its last refill's size, how many
// regions shared the global key then, and what the global key gave the
// region lately (share, units/s) and when it last did (at, ns).
type known struct {
	taken, size, members int64
	share                float64
	at                   int64
	end                  int64 // ns: the global window's end, as the last grant said (see doomed)
}

// Answered refills the pool in the background when the decision d left it
// below its low water, unless the worldwide limit denied it.
func (r *regions) Answered(p *remote.Policy, key string, d remote.Decision) {
	pl := pool{p, key}
	if d.Blocked || (d.Granted == 0 && d.ResetAfter > 0) || d.Remaining >= r.low(pl) {
		return
	}
	r.start(pl, 0)
}

// start starts a refill of pl in the background, for a decision of need
// units (0: none waits), unless one is in flight in this process (or
// Close began), and returns the refill in flight.
func (r *regions) start(pl pool, need int64) *refill {
	f := &refill{done: make(chan struct{})}
	if other, busy := r.flight.LoadOrStore(pl, f); busy {
		return other.(*refill)
	}
	// (Checked and counted under mu, as later does: close waits for the
	// work counted before it, and none starts after.)
	r.mu.Lock()
	if r.closed.Load() {
		r.mu.Unlock()
		r.flight.Delete(pl)
		close(f.done)
		return f
	}
	r.work.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.work.Done()
		r.run(context.Background(), pl, f, need)
	}()
	return f
}

// Refill refills the pool now, for a decision of n units that it held
// too few for, and reports whether to make the decision again: a refill
// (this one, or one in flight already) ended within a couple of global
// round trips. A refill that takes longer goes on in the background, and
// the decision stands: no decision waits on the global Redis for long.
// One put off to the next window (doomed) says when its units land
// (retry): the decision's denial holds until then.
func (r *regions) Refill(ctx context.Context, p *remote.Policy, key string, n int64) (again bool, retry time.Duration) {
	f := r.start(pool{p, key}, n)
	rtt := time.Duration(r.rtt.Load())
	t := time.NewTimer(2*rtt + 10*time.Millisecond)
	defer t.Stop()
	select {
	case <-f.done:
		if w := f.putOff.Load(); w > 0 {
			return false, time.Duration(w) + rtt
		}
		return true, 0
	case <-t.C:
	case <-ctx.Done():
	}
	return false, 0
}

// run makes the refill f of pl and ends it, for a decision of need units
// (0: none waits); it reports whether the decision is worth making again.
func (r *regions) run(ctx context.Context, pl pool, f *refill, need int64) bool {
	defer func() {
		r.flight.Delete(pl)
		close(f.done)
	}()
	rtt := time.Duration(r.rtt.Load())
	k, _ := r.known.Get(pl)
	if ctx.Err() != nil {
		return false
	}
	if wait, ok := r.doomed(pl.p.Global(), k, rtt, need); ok {
		// Its units would lapse as they land: the next window's instead.
		f.putOff.Store(int64(wait))
		r.later(pl, wait)
		return false
	}
	// The claim goes on if the caller leaves: one cut off on its way
	// would be in the pool, holding its refills off for its hold, with
	// nobody to deposit.
	// (A pool that holds fewer than the decision asks is low, however
	// many it holds: else a request above its usual refill never fits.
	// A refill ahead of need, a decision's low water or a timer's wake,
	// asks with low 0: only a pool in use is refilled, not one whose key
	// nobody uses any more, nor one whose key was used once.)
	low := need
	c, err := r.local.Claim(context.WithoutCancel(ctx), pl.p, pl.key, low, r.lead(), gapOf(pl.p.Global()), 2*r.global.Timeout(), rtt)
	if err != nil {
		return false
	}
	k.taken = c.Taken
	r.known.Add(pl, k)
	switch {
	case c.Denied:
		// Nothing more for the region until then: a refill then, if the
		// pool is still low (one timer per pool: this refill's).
		r.later(pl, c.Wait)
		return false
	case c.Busy:
		// Another instance refills: a decision waiting for this refill
		// asks again once it may have landed (never long).
		time.Sleep(min(c.Wait, 2*rtt))
		return true
	case !c.Refill:
		// The pool holds units: a refill later, if it asks for one.
		r.later(pl, c.Wait)
		return true
	}
	f.claim.Store(c.Now)
	claimed := r.clock.Now()
	// The global call and the deposit go on if the caller leaves: a grant
	// is in the pool or lost until it lapses, never in nobody's hands.
	gctx := context.WithoutCancel(ctx)
	g := pl.p.Global()
	k.size = max(r.size(g, c.Taken, c.Demand), min(need, g.Capacity()))
	r.known.Add(pl, k)
	// The region's demand, as its instances say it; before they do (a
	// key's first decisions name no member), the whole worldwide rate:
	// the fair share between regions holds it to its part.
	demand := max(c.Demand, c.Taken)
	if demand == 0 {
		demand = int64(math.Ceil(g.Rate()))
	}
	req := remote.Request{Policy: g, Key: pl.key, Min: 1, Max: k.size, Member: r.name,
		Demand: demand, Horizon: refillSpan, Back: c.Lapsed, BackAt: c.LapsedAt, Refill: true}
	if owed := r.owing(pl); owed > 0 {
		// Back from a partition: what the region admitted from its
		// failure-mode share is charged first.
		r.settle(map[pool]int64{pl: owed})
	}
	start := r.clock.Now()
	dec, cause, err := r.global.Acquire(gctx, req)
	if cause != nil || err != nil {
		return r.partitioned(gctx, pl, k, c, claimed)
	}
	now := r.clock.Now()
	r.observe(now.Sub(start))
	r.refills.Add(1)
	k.members = dec.Members
	if since := now.Sub(time.Unix(0, k.at)).Seconds(); k.at > 0 && since > 0 {
		// What the global key gives the region per second, lately: its
		// failure-mode share in a partition. (Never more than the
		// worldwide rate: refills close together measure a burst, and
		// none apart, nothing.)
		rate := min(float64(dec.Granted)/since, g.Rate())
		k.share += (rate - k.share) / 4
	}
	k.at = now.UnixNano()
	if d := now.Sub(start); dec.Granted > 0 && dec.ValidFor >= 0 && (rtt == 0 || d <= 2*rtt) {
		// The window's end (see doomed), to within half this call's round
		// trip: not from a reply that came slowly.
		k.end = start.Add(d/2 + dec.ValidFor).UnixNano()
	}
	r.known.Add(pl, k)
	// The global key's waits count from its decision, about half a round
	// trip after this call set out: a refill set out that long after the
	// call's start reaches the global Redis as they end, not a round trip
	// late.
	ahead := func(w time.Duration) time.Duration {
		if w <= 0 {
			return 0
		}
		return max(time.Millisecond, w-now.Sub(start)+aim)
	}
	dep := remote.Deposit{Granted: dec.Granted, Valid: dec.ValidFor, At: dec.At, Since: c.Now, TTL: r.ttl, Wait: ahead(dec.Next)}
	switch {
	case dec.Granted == 0:
		dep.Wait = ahead(max(dec.RetryAfter, dec.Next, time.Millisecond))
	case dec.Granted < fullRefill(req, dec):
		// Held to its share (or the limit): the region asks again a gap
		// later, its pool empty or not, and is denied meanwhile.
		dep.Wait = max(dep.Wait, gapOf(g))
	}
	wake := dep.Wait
	if dec.Granted > 0 && dec.ValidFor > 0 && dec.ValidFor < r.ttl {
		// The grant ends with a window of the global key's: the region
		// refills as the next one opens (its room is anybody's anew),
		// held back no longer.
		end := ahead(dec.ValidFor)
		dep.Wait = min(dep.Wait, end)
		if wake == 0 || end < wake {
			wake = end
		}
	}
	if _, err := r.local.Deposit(gctx, pl.p, pl.key, dep); err != nil {
		// Lost (or kept, if only the reply was): never counted twice.
		return false
	}
	r.units.Add(uint64(dec.Granted))
	r.later(pl, wake)
	return dec.Granted > 0
}

// fullRefill is what a refill req gets when neither the region's share
// nor the limit holds it back: all it asked for, or, from a window that
// ends within its horizon, that part of it (acquire.lua).
func fullRefill(req remote.Request, dec remote.Decision) int64 {
	if dec.ValidFor >= 0 && dec.ValidFor < req.Horizon {
		return max(req.Min, int64(math.Ceil(float64(req.Max)*float64(dec.ValidFor)/float64(req.Horizon))))
	}
	return req.Max
}

// later refills pl in the background after wait, if the pool is low
// then (the claim says): one timer per pool, the soonest asked for (a
// window that opens sooner than a hold ends wakes the pool then). close
// stops the timers.
func (r *regions) later(pl pool, wait time.Duration) {
	if wait <= 0 {
		return
	}
	at := time.Now().Add(wait)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return
	}
	if old := r.timers[pl]; old != nil {
		if !at.Before(old.at) || !old.t.Stop() {
			return // a sooner one stands, or is firing
		}
		r.work.Done()
	}
	w := &wakeup{at: at}
	r.work.Add(1)
	w.t = time.AfterFunc(wait, func() {
		defer r.work.Done()
		r.mu.Lock()
		if r.timers[pl] == w {
			delete(r.timers, pl)
		}
		r.mu.Unlock()
		if r.closed.Load() {
			return
		}
		f := &refill{done: make(chan struct{})}
		if _, busy := r.flight.LoadOrStore(pl, f); !busy {
			r.run(context.Background(), pl, f, 0)
		}
	})
	r.timers[pl] = w
}

// wakeup is later's timer of a pool, due at at.
type wakeup struct {
	t  *time.Timer
	at time.Time
}

// size is how many units a refill asks for: what the region takes in
// refillSpan (or twice the lead, if longer), or what its instances say
// they want, if more (a region held below its demand asks for it, and
// the global fair share holds it to its part); before it has taken
// anything, what the worldwide rate gives over the lead. The policy's
// capacity bounds it.
func (r *regions) size(g *remote.Policy, taken, demand int64) int64 {
	var n float64
	if taken > 0 {
		rate := float64(max(taken, demand))
		n = rate * max(refillSpan, 2*r.lead()).Seconds()
	} else {
		n = g.Rate() * r.lead().Seconds()
	}
	return min(g.Capacity(), max(1, int64(math.Ceil(n))))
}

// refillGap is the shortest time between two refills of a pool that
// holds units: a region crosses to the global Redis at most about once in
// it per key while its pool does not run dry.
const refillGap = 3 * refillSpan / 5

// gapOf is refillGap for the worldwide policy g, shorter when its tightest
// limit is a sliding window counter of a short window: its room comes a
// little at a time, as a bucket's does, yet lapses with the window, so a
// region takes it a quarter window at a time, or lets most of it lapse.
func gapOf(g *remote.Policy) time.Duration {
	if l := g.Limits()[g.Tightest()]; l.Algorithm == remote.SlidingWindowCounter {
		return min(refillGap, l.Period/4)
	}
	return refillGap
}

// aim is how long after the global key's wait ends a refill that waited
// for it is meant to reach the global Redis: a margin for the round
// trip's jitter, which would otherwise find it a moment early.
const aim = 10 * time.Millisecond

// refillSpan is how long a refill is meant to last at the region's
// demand: a region crosses to the global Redis about once in it per key,
// and holds about that much of its demand at most.
const refillSpan = time.Second

// observe moves the moving average of the global round trip toward d.
func (r *regions) observe(d time.Duration) {
	old := r.rtt.Load()
	r.rtt.Store(old + (int64(d)-old)/4)
}

// close stops new refills and waits for those in flight, until ctx ends.
func (r *regions) close(ctx context.Context) {
	r.mu.Lock()
	r.closed.Store(true)
	for pl, w := range r.timers {
		if w.t.Stop() {
			r.work.Done()
		}
		delete(r.timers, pl)
	}
	if r.settling != nil && r.settling.Stop() {
		r.work.Done()
	}
	r.settling = nil
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.work.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Refills still on their way to the global Redis (its calls have
		// ten timeouts): their claims end here, so that the region's other
		// instances refill at once; a grant that lands later finds the
		// doors closed and is lost, in the global key until it refills
		// (docs/regions.md).
		rctx, cancel := r.local.Bound(context.Background())
		defer cancel()
		r.flight.Range(func(k, v any) bool {
			if claim := v.(*refill).claim.Load(); claim != 0 {
				pl := k.(pool)
				_, _ = r.local.Deposit(rctx, pl.p, pl.key, remote.Deposit{Since: claim, TTL: r.ttl})
			}
			return true
		})
	}
	// What partitions left owed is charged now, if the global Redis
	// answers: an instance that stops takes no debt with it.
	r.mu.Lock()
	debts := r.debts
	r.debts = make(map[pool]int64)
	r.mu.Unlock()
	r.settle(debts)
	r.global.Close(ctx)
}
