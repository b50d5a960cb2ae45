package sync

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// Entry is the local state of one key under a policy, which it names by
// its compiled form.
type Entry = local.Entry[*remote.Policy]

// Table holds the entries of one policy by key.
type Table = local.Table[*remote.Policy]

// Leaser makes and returns leases for the entries of one Limiter: it
// decides what to lease (plan) and applies the answers (apply); its batcher
// sends the calls.
type Leaser struct {
	// door makes every Redis call (its timeout bounds them) and holds the
	// breakers a prefetch asks.
	door  *door.Door
	cfg   Config
	clock clock.Clock
	base  time.Time
	// elapsed is a cheap reading of the time, when there is one: the
	// clock's own (clock.Elapsed), or own, a coarse clock New starts for
	// the system clock so that a hit reads no clock. skew is elapsed's
	// reading at base. coarse is the coarse clock elapsed reads, if it is
	// one (own, or one given): every reading but a hit's is precise
	// (Coarse.Fine), and a hit allows for its lag (HitNow).
	elapsed clock.Elapsed
	own     *clock.Coarse
	coarse  *clock.Coarse
	skew    time.Duration
	// id names this instance among the members of the keys it leases.
	id    string
	bound *local.Bound[*remote.Policy]

	// instances is the most members a key leased had, and when (ns) it
	// was last seen that high (see Instances).
	instances, instancesAt atomic.Int64
	// offset is Redis's clock minus this one's (µs) at the last reply.
	offset atomic.Int64
	// goneHits: local hits of entries no longer in the bound.
	goneHits atomic.Uint64

	// batcher queues the lease calls and refunds, sends them through the
	// door, and completes the calls: it calls back apply, countLease and
	// countRefund (its owner).
	batcher *batcher
	// beforeSend, if set (by tests), is called with each lease's entry
	// before it is handed to the batcher.
	beforeSend func(*Entry)

	// stopped: Close has begun. leasing counts the leases under way (from
	// before their start to their end), which Close waits for: a lease
	// holds the units set aside that it takes along until it ends.
	stopped atomic.Bool
	leasing atomic.Int64
	stop    chan struct{}     // stops the sweeper
	wg      stdsync.WaitGroup // the sweeper

	// stats counts leases and units; the door counts round trips and
	// errors. used: the units of grants their requesters took; goneUsed:
	// those taken from allowances of entries no longer in the bound.
	// returning: units on their way back (refunds queued or sent, and the
	// Back of lease calls), not answered yet.
	stats struct {
		leases, denied                     atomic.Uint64
		leased, refunded, expired, dropped atomic.Uint64
		used, goneUsed                     atomic.Uint64
		returning                          atomic.Int64
	}
}

// New starts a Leaser that makes its Redis calls through d: its batcher's
// and sweeper's goroutines run until Close. The Leaser does not close d.
func New(d *door.Door, clk clock.Clock, cfg Config) (*Leaser, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = crand.Read(id[:])
	l := &Leaser{
		door: d, cfg: cfg, clock: clk, base: clk.Now(), id: hex.EncodeToString(id[:]),
		stop: make(chan struct{}),
	}
	switch c := clk.(type) {
	case clock.System:
		// Leased hits compare against a cached time: one atomic load, not
		// a reading of the system clock on every request.
		l.own = clock.NewCoarse(coarseResolution)
		l.elapsed, l.coarse = l.own, l.own
	case *clock.Coarse:
		l.elapsed, l.coarse = c, c
	case clock.Elapsed:
		l.elapsed = c
	}
	if l.elapsed != nil {
		l.skew = l.elapsed.Elapsed()
	}
	l.bound = local.NewBound(cfg.MaxKeys, l.evicted)
	l.batcher = newBatcher(d, l)
	l.wg.Add(1)
	go l.sweeper()
	return l, nil
}

// coarseResolution is the resolution of the coarse clock a Leaser on the
// system clock reads for hits.
const coarseResolution = time.Millisecond

// RedisTime returns this instance's reading of Redis's clock (µs since
// the Unix epoch): HitNow's reading (two atomic loads with a coarse
// clock: it is read on the hit path), moved by the offset of Redis's TIME
// at the last lease reply. It lags Redis's clock by up to that reply's way
// back (the offset is taken when the reply arrives) and the coarse
// clock's lag, and never leads it (but by a Redis Cluster's skew between
// masters: the offset is the last reply's, of whichever master). 0 before
// any reply.
func (l *Leaser) RedisTime() int64 {
	off := l.offset.Load()
	if off == 0 { // no reply yet
		return 0
	}
	return l.cached()/1e3 + off
}

// Now returns the Leaser's monotonic time in ns, the time base of every
// allowance it fills, read precisely: with a coarse clock, a reading of
// the system's monotonic clock, which brings the coarse clock up to date
// (Coarse.Fine).
func (l *Leaser) Now() int64 {
	if l.coarse != nil {
		return int64(l.coarse.Fine() - l.skew)
	}
	if l.elapsed != nil {
		return int64(l.elapsed.Elapsed() - l.skew)
	}
	return int64(l.clock.Now().Sub(l.base))
}

// HitNow returns the time a hit takes units at: with a coarse clock, its
// cached reading (one atomic load), which may be behind; and how far
// behind it may be (twice the most the clock lagged lately, Coarse.Lag),
// by which the hit's units must outlast it. A hit within that of its
// units' expiry is left to a precise reading (Now): a unit is never used
// past its expiry while the clock's lag stays within twice its recent
// worst. Other clocks read precisely: late is 0.
func (l *Leaser) HitNow() (now, late int64) {
	if l.coarse != nil { // (cached's reading, written out: neither is inlined, and this is the hit path)
		return int64(l.coarse.Elapsed() - l.skew), int64(2 * l.coarse.Lag())
	}
	return l.Now(), 0
}

// cached returns HitNow's reading alone.
func (l *Leaser) cached() int64 {
	if l.coarse != nil {
		return int64(l.coarse.Elapsed() - l.skew)
	}
	return l.Now()
}

// NewTable returns a table of entries for one policy, bounded with all the
// Leaser's other tables. onEmpty, if not nil, is called when the table's
// last entry leaves it (see local.Bound.NewTable).
func (l *Leaser) NewTable(p *remote.Policy, onEmpty func(*Table)) *Table {
	return l.bound.NewTable(p, onEmpty)
}

// instancesFor is how long a member count is remembered by Instances.
const instancesFor = time.Minute

// Instances returns the most members any key leased in the last minute
// had, at least 1: the share FailLocal divides a key by when that key's own
// count is not known.
func (l *Leaser) Instances() int64 {
	if l.Now()-l.instancesAt.Load() > int64(instancesFor) {
		return 1
	}
	return max(1, l.instances.Load())
}

// sawMembers records a key's member count, m, at now.
func (l *Leaser) sawMembers(m, now int64) {
	if m >= l.instances.Load() || now-l.instancesAt.Load() > int64(instancesFor) {
		l.instances.Store(m)
		l.instancesAt.Store(now)
	}
}

// Lease gets n units for e's key from Redis, sized for its demand: the
// caller gets its n units directly (granted > 0), and the rest of the grant
// goes into e's allowance for later requests. If another lease for e is in
// flight, Lease waits for it and then tries e's allowance first (taken
// reports that: no Redis call of its own). A denial is recorded in e, so
// that requests before its RetryAfter are denied locally.
func (l *Leaser) Lease(ctx context.Context, e *Entry, n int64) (d remote.Decision, taken bool, err error) {
	if !l.begin() {
		return remote.Decision{}, false, door.ErrClosed
	}
	defer l.leasing.Add(-1)
	for {
		now := l.Now()
		st, inFlight := e.StartLease(n, l.cfg.Min, now)
		if inFlight != nil && st.Cold {
			// The lease in flight asks for its requester's units alone
			// (a key with no demand known yet, so that a key used once
			// costs one call): waiting for it would find nothing, then
			// lease again, one after another. This request asks for its
			// own, at the same time, as exact mode would; its units count
			// as wanted.
			e.Wanted(n)
			d, err = l.batcher.lease(ctx, l.plan(e, local.Lease{Epoch: st.Epoch}, n, now), n)
			return d, false, err
		}
		if inFlight != nil {
			select {
			case <-inFlight:
			case <-ctx.Done():
				return remote.Decision{}, false, ctx.Err()
			}
			now = l.Now()
			if _, ok := e.Take(n, now); ok {
				return remote.Decision{}, true, nil
			}
			if denied, _ := e.Denied(now, n); denied {
				return remote.Decision{}, false, nil
			}
			continue
		}
		c := l.plan(e, st, n, now)
		l.sending(e)
		d, err = l.batcher.lease(ctx, c, n)
		l.end(e, st, err)
		return d, false, err
	}
}

// Decide asks Redis for n units of key under p as exact mode asks, the
// request's units alone with no member named, but in the batcher's next
// pipeline: for a key with no entry (its first decision), one command that
// shares a round trip with the other calls due, where an exact call has a
// round trip of its own. Nothing is kept: if the requester leaves before
// the answer, a grant goes back.
func (l *Leaser) Decide(ctx context.Context, p *remote.Policy, key string, n int64) (remote.Decision, error) {
	if !l.begin() {
		return remote.Decision{}, door.ErrClosed
	}
	defer l.leasing.Add(-1)
	c := &call{req: remote.Request{Policy: p, Key: key, Min: n, Max: n}, done: make(chan struct{})}
	return l.batcher.lease(ctx, c, n)
}

// sending calls the test hook beforeSend, if set.
func (l *Leaser) sending(e *Entry) {
	if l.beforeSend != nil {
		l.beforeSend(e)
	}
}

// begin counts a lease under way, unless Close has begun: it reports
// whether it did. The count comes first, so that Close, which sets
// stopped and then waits for the count to fall to zero, either waits for
// this lease or is seen here.
func (l *Leaser) begin() bool {
	l.leasing.Add(1)
	if l.stopped.Load() {
		l.leasing.Add(-1)
		return false
	}
	return true
}

// end ends the lease st of e, which its call to the batcher ended with
// err: a call refused (Close began) never went out, and the units set
// aside that it took along are set aside again, or, if e left its table
// meanwhile, given back (Close waits for this before it stops the
// batcher).
func (l *Leaser) end(e *Entry, st local.Lease, err error) {
	if !errors.Is(err, door.ErrClosed) {
		e.EndLease()
		return
	}
	units, at := e.AbandonLease(st, l.Now())
	l.giveBack(e, units, at)
}

// Prefetch starts a lease for e in the background, if none is in flight, no
// denial from Redis holds for e, the Leaser is open, and the breaker of the
// key's server is closed (door.Ready). The breaker is asked last, only when
// a lease would start: with a cluster, naming the key's master costs a
// lookup and allocations, too much for every hit below low water.
// Prefetch never blocks.
func (l *Leaser) Prefetch(e *Entry) {
	if l.stopped.Load() {
		return
	}
	// Redis denied the last lease until a time still to come: asking sooner
	// would only poll it. (The hit's reading of the time: a prefetch is
	// tried on every hit below low water while one is in flight.)
	if denied, _ := e.Denied(l.cached(), math.MaxInt64); denied {
		return
	}
	// The breaker is asked, and the lease counted (begin), under the
	// entry's lock, before the lease takes along the units set aside.
	st, ok := e.TryStartLease(l.Now, func() bool { return l.door.Ready(e.Policy(), e.Key()) && l.begin() })
	if !ok {
		return
	}
	c := l.plan(e, st, 0, l.Now())
	go func() {
		defer l.leasing.Add(-1)
		ctx, cancel := l.door.Bound(context.Background())
		defer cancel()
		// A failed prefetch changes nothing: the next miss leases itself.
		l.sending(e)
		_, err := l.batcher.lease(ctx, c, 0)
		l.end(e, st, err)
	}()
}
