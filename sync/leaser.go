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

// Entry is the local state of one key under a compiled policy.
type Entry = local.Entry[*remote.Policy]

// Table holds the entries of one policy by key.
type Table = local.Table[*remote.Policy]

// Leaser makes and returns the leases of one Limiter's entries: it decides
// what to lease (plan) and applies the answers (apply); its batcher sends
// the calls.
type Leaser struct {
	door  *door.Door
	cfg   Config
	clock clock.Clock
	base  time.Time
	// elapsed is a cheap reading of the time, if there is one: the clock's
	// own, or own, a coarse clock New starts for the system clock so that
	// a hit reads no clock. skew is its reading at base. coarse is the
	// coarse clock elapsed reads, if any: a hit allows for its lag
	// (HitNow), every other reading is precise (Coarse.Fine).
	elapsed clock.Elapsed
	own     *clock.Coarse
	coarse  *clock.Coarse
	skew    time.Duration
	id      string // this instance among the members of the keys it leases
	bound   *local.Bound[*remote.Policy]

	// instances is the most members a key had, last seen at instancesAt
	// (ns).
	instances, instancesAt atomic.Int64
	offset                 atomic.Int64  // µs: Redis's clock minus this one's at the last reply
	goneHits               atomic.Uint64 // hits of entries no longer in the bound

	batcher    *batcher
	beforeSend func(*Entry) // a test's hook

	// stopped: Close has begun. leasing counts the leases under way, which
	// Close waits for: a lease holds the units set aside that it took
	// along until it ends.
	stopped atomic.Bool
	leasing atomic.Int64
	stop    chan struct{}     // stops the sweeper and the dues
	wg      stdsync.WaitGroup // the sweeper
	// dues counts the goroutines of due's leases, under duesMu; dueOf
	// holds the one pending for each entry (requires duesMu held).
	dues   stdsync.WaitGroup
	duesMu stdsync.Mutex
	dueOf  map[*Entry]*pendingDue

	// used: units of grants their requesters took; goneUsed: those taken
	// from entries no longer in the bound. returning: units on their way
	// back, not answered yet.
	stats struct {
		leases, denied                     atomic.Uint64
		leased, refunded, expired, dropped atomic.Uint64
		used, goneUsed                     atomic.Uint64
		returning                          atomic.Int64
	}
}

// New starts a Leaser that calls Redis through d, with goroutines that run
// until Close. It does not close d.
func New(d *door.Door, clk clock.Clock, cfg Config) (*Leaser, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = crand.Read(id[:])
	l := &Leaser{
		door: d, cfg: cfg, clock: clk, base: clk.Now(), id: hex.EncodeToString(id[:]),
		stop: make(chan struct{}), dueOf: map[*Entry]*pendingDue{},
	}
	switch c := clk.(type) {
	case clock.System:
		// A hit reads a cached time, not the system clock.
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

const coarseResolution = time.Millisecond

// RedisTime returns this instance's reading of Redis's clock (µs since
// the Unix epoch), cheap enough for the hit path: HitNow's reading moved
// by the offset of Redis's TIME at the last lease reply. It lags Redis's
// clock by up to that reply's way back and the coarse clock's lag, and
// never leads it (but by a Cluster's skew between masters). 0 before any
// reply.
func (l *Leaser) RedisTime() int64 {
	off := l.offset.Load()
	if off == 0 { // no reply yet
		return 0
	}
	return l.cached()/1e3 + off
}

// Now returns the Leaser's monotonic time in ns, the time base of its
// entries, read precisely (with a coarse clock, Coarse.Fine).
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
// cached reading, which may be behind by up to late (twice its recent
// worst lag), by which the hit's units must outlast it; a hit within late
// of their expiry is left to a precise reading (Now). Other clocks read
// precisely: late is 0.
func (l *Leaser) HitNow() (now, late int64) {
	if l.coarse != nil { // cached, written out: the hit path does not inline it
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

// NewTable returns a table for policy p, bounded with the Leaser's other
// tables (see local.Bound.NewTable).
func (l *Leaser) NewTable(p *remote.Policy, onEmpty func(*Table)) *Table {
	return l.bound.NewTable(p, onEmpty)
}

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

// Lease gets n units for e's key from Redis in a lease sized for its
// demand: the caller gets its n units (granted > 0), the rest goes into e.
// If a lease of e is in flight, Lease waits for it and takes from e
// (taken), making no call of its own. A denial is recorded in e, so that
// requests before its RetryAfter are denied locally.
func (l *Leaser) Lease(ctx context.Context, e *Entry, n int64) (d remote.Decision, taken bool, err error) {
	if !l.begin() {
		return remote.Decision{}, false, door.ErrClosed
	}
	defer l.leasing.Add(-1)
	again := false // leasing again after an overtime wait (see answered)
	for {
		now := l.Now()
		st, inFlight := e.StartLease(n, l.cfg.Min, now)
		if inFlight != nil && st.Cold && !l.door.Join(inFlight, e.Policy(), e.Key(), n) {
			// The lease in flight asks for its requester's units alone,
			// and is on its way: waiting for it would find nothing. This
			// request asks for its own at the same time, as exact mode
			// would. (While that lease waits in the door's combiner, Join
			// has it ask for this request's units too, and this request
			// waits for it below as for any lease: one call, not two.)
			e.Wanted(n)
			d, err = l.send(ctx, l.plan(e, local.Lease{Epoch: st.Epoch, Clears: st.Clears}, n, now), n)
			return d, false, sentOrNot(err)
		}
		if inFlight != nil {
			v := e.Answers()
			late := false
			select {
			case <-inFlight:
			case <-ctx.Done():
				var came bool
				c, _ := e.Tagged(inFlight).(*call)
				if came, late = l.batcher.answered(ctx, inFlight, c); !came {
					return remote.Decision{}, false, ctx.Err()
				}
			}
			now = l.Now()
			if _, ok := e.Take(n, now); ok {
				return remote.Decision{}, true, nil
			}
			if denied, _ := e.Denied(now, n); denied {
				return remote.Decision{}, false, nil
			}
			if ctx.Err() != nil {
				// The lease in flight ended past this request's timeout
				// (it ran late, or waited in overtime: see answered), and
				// its units went to the callers before this one. If Redis
				// answered it, and this process shows it does not keep
				// up, the process was late, not Redis: this request leases
				// once more, with a timeout of its own.
				// Else the wait is over.
				if again || e.Unchanged(v) {
					return remote.Decision{}, false, ctx.Err()
				}
				renewed, cancel, ok := l.batcher.renew(ctx, late)
				if !ok {
					return remote.Decision{}, false, ctx.Err()
				}
				defer cancel() // once: again
				again, ctx = true, renewed
			}
			continue
		}
		c := l.plan(e, st, n, now)
		c.owner = e.Leasing() // this lease's: what its waiters wait on
		c.tagged = l.batcher.since(time.Now())
		e.Tag(c) // for them too (answered)
		l.sending(e)
		d, err = l.send(ctx, c, n)
		l.end(e, st, err)
		return d, false, sentOrNot(err)
	}
}

// sentOrNot returns err, a notSent's own error for a notSent.
func sentOrNot(err error) error {
	if ns, ok := errors.AsType[notSent](err); ok {
		return ns.err
	}
	return err
}

// send makes the call c for a request of n units and has its answer
// applied. A call that names no member and gives nothing back (a cold
// key's lease: an exact decision) goes as exact mode's decisions go,
// through the door's combiner, in one round trip with the first uses and
// exact decisions that come with it (decide); any other through the
// batcher, with the leases and refunds that come with it. Either way, if
// ctx ends before the answer, send returns ctx's error at once and the
// grant lands in the entry; once Close has begun, send makes no call
// (door.ErrClosed).
func (l *Leaser) send(ctx context.Context, c *call, n int64) (remote.Decision, error) {
	if c.req.Demand > 0 || c.req.Back > 0 {
		return l.batcher.lease(ctx, c, n)
	}
	if !l.batcher.hold() { // close waits for the call: a refund it queues is sent
		return remote.Decision{}, door.ErrClosed
	}
	if l.door.Guarded() || ctx.Done() == nil {
		c.due.Store(-1) // handed to the door
		// A guarded call returns at ctx's end, and the door refunds a
		// grant that lands later.
		defer l.batcher.release()
		d, err := l.door.Decide(ctx, c.req, c.owner)
		if err != nil {
			return remote.Decision{}, err
		}
		c.d = d
		l.countLease(c.req, d)
		l.apply(c, n)
		return d, nil
	}
	// The client would cut the call at ctx's end and lose its grant: the
	// call goes on without ctx, bounded by the Redis timeout, on a
	// goroutine of its own, and is finished as the batcher finishes its
	// calls (applied to the entry if the requester left).
	c.done = make(chan struct{})
	go func() {
		c.due.Store(-1) // handed to the door
		d, err := l.door.Decide(context.WithoutCancel(ctx), c.req, c.owner)
		if err == nil {
			l.countLease(c.req, d)
		}
		l.batcher.finish(c, d, err)
	}()
	return l.batcher.await(ctx, c, n)
}

// Begin counts a decision of a key with no entry (one of its first uses)
// under way, as a lease, which Close waits for; End ends it. Close waits
// for its end past its own bound on leases too, as for a cold lease
// (batcher.hold), so that a grant whose requester left, which Decided
// queues to go back, is sent. Begin reports false once Close has begun:
// the decision is not made.
func (l *Leaser) Begin() bool {
	if !l.begin() {
		return false
	}
	if !l.batcher.hold() {
		l.leasing.Add(-1)
		return false
	}
	return true
}

// End ends what Begin began.
func (l *Leaser) End() {
	l.batcher.release()
	l.leasing.Add(-1)
}

// Decided counts d, Redis's answer to r, an exact decision of a key with
// no entry (its first use, between Begin and End), as a lease of the
// request's units alone: used by its requester (used), or else given
// back, so that nothing is lost.
func (l *Leaser) Decided(r remote.Request, d remote.Decision, used bool) {
	l.countLease(r, d)
	switch {
	case d.Granted > 0 && used:
		l.stats.used.Add(uint64(d.Granted))
	case d.Granted > 0:
		l.batcher.queueBack(remote.Grant{Policy: r.Policy, Key: r.Key, Units: d.Granted, At: d.At})
	}
}

// sending calls a test's hook (SetBeforeSend) with e, whose lease is
// about to be sent: on the requester's goroutine, or the batcher's for a
// prefetch.
func (l *Leaser) sending(e *Entry) {
	if l.beforeSend != nil {
		l.beforeSend(e)
	}
}

// begin counts a lease under way unless Close has begun, and reports
// whether it did. Counting first, then checking, Close (which sets stopped
// and then waits for the count) either waits for this lease or is seen.
func (l *Leaser) begin() bool {
	l.leasing.Add(1)
	if l.stopped.Load() {
		l.leasing.Add(-1)
		return false
	}
	return true
}

// end ends e's lease st, whose call ended with err. A call refused (Close
// began) or not sent (its context had ended: notSent) never went out: the
// units set aside that it took along are set aside again or, if e is
// gone, given back.
func (l *Leaser) end(e *Entry, st local.Lease, err error) {
	if _, ns := errors.AsType[notSent](err); !errors.Is(err, door.ErrClosed) && !ns {
		e.EndLease()
		return
	}
	units, at, dropped := e.AbandonLease(st, l.Now())
	l.stats.dropped.Add(uint64(dropped))
	l.giveBack(e, units, at)
}

// Prefetch starts a lease of e in the background if none is in flight, no
// denial from Redis holds, the Leaser is open and the key's server's
// breaker is closed (door.Ready). It never blocks. The breaker is asked
// last: with a Cluster, naming the key's master costs a lookup and
// allocations, too much for every hit below low water.
func (l *Leaser) Prefetch(e *Entry) { l.prefetch(e, false) }

// prefetch is Prefetch, which with wait waits for the entry's lock
// (StartLeaseAhead, for a due lease: its timer would come to nothing when
// the lock is held for a moment) rather than give up (TryStartLease, on
// the hit path).
func (l *Leaser) prefetch(e *Entry, wait bool) {
	if l.stopped.Load() {
		return
	}
	// Asking before a denial lapses would only poll Redis. (The hit's
	// cheap time: this runs on every hit below low water.)
	if denied, _ := e.Denied(l.cached(), math.MaxInt64); denied {
		return
	}
	// The breaker is asked, and the lease counted (begin), under the
	// entry's lock, before the lease takes along the units set aside.
	ready := func() bool { return l.door.Ready(e.Policy(), e.Key()) && l.begin() }
	var st local.Lease
	var ok bool
	if wait {
		st, ok = e.StartLeaseAhead(l.Now, ready)
	} else {
		st, ok = e.TryStartLease(l.Now, ready)
	}
	if !ok {
		return
	}
	// The batcher applies the grant and ends the lease (ended). A failed
	// prefetch changes nothing: the next miss leases itself. (Not tagged:
	// Entry.Tag waits for the entry's lock, and a hit never does.)
	l.post(e, st, l.plan(e, st, 0, l.Now()), !wait)
}

// post posts the prefetch c of e's lease st to the batcher, without
// waiting for its lock (try) or waiting, or ends the lease if it cannot
// go (Close has begun). A hit never waits for the lock: when it is held,
// a goroutine of its own waits.
func (l *Leaser) post(e *Entry, st local.Lease, c *call, try bool) {
	switch err := l.batcher.post(c, try); {
	case errors.Is(err, errBusy):
		l.batcher.spawn(func() { l.post(e, st, c, false) })
	case err != nil:
		l.end(e, st, err)
		l.leasing.Add(-1)
	}
}

// ended ends the lease of c, a prefetch's call (post) the batcher sent,
// its grant applied if it came, and its count (begin).
func (l *Leaser) ended(c *call) {
	c.entry.EndLease()
	l.leasing.Add(-1)
}
