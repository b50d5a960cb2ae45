package sync

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/guard"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// Config configures a Leaser. New checks it (see Validate).
type Config struct {
	// Min and Max bound the size of one lease, in units (1 <= Min <= Max).
	Min, Max int64
	// Refresh: a lease is sized to last about this long at the key's
	// observed demand.
	Refresh time.Duration
	// TTL: leased units unused after this long are refunded. It bounds the
	// overshoot of a token bucket over any window: Rate·TTL.
	TTL time.Duration
	// LowWater, in (0, 1): when fewer than LowWater × the last lease size
	// units are left, the next lease is made ahead of need.
	LowWater float64
	// Timeout bounds each Redis call the Leaser makes.
	Timeout time.Duration
	// Guard runs each Redis call on a goroutine of its own and stops
	// waiting for it at the deadline: for clients that do not honour context
	// deadlines themselves (see remote.HonoursDeadlines). Units granted to
	// a lease that timed out are refunded when they arrive.
	Guard bool
	// Heartbeat is the interval of the membership heartbeat; an instance
	// counts as live for three intervals after its last one.
	Heartbeat time.Duration
	// MaxKeys bounds the number of keys with local state.
	MaxKeys int
}

// ErrConfig is wrapped by Validate's errors.
var ErrConfig = errors.New("invalid lease config")

// ErrClosed is returned by Lease once Close has begun.
var ErrClosed = errors.New("leaser closed")

// Validate reports what is wrong with c, as an error wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Min < 1 || c.Max < c.Min:
		return errorf("need 1 <= Min <= Max, got Min %d, Max %d", c.Min, c.Max)
	case c.Refresh <= 0 || c.TTL <= 0 || c.Timeout <= 0 || c.Heartbeat <= 0:
		return errorf("Refresh, TTL, Timeout and Heartbeat must be positive")
	case c.LowWater <= 0 || c.LowWater >= 1:
		return errorf("LowWater %v must be in (0, 1)", c.LowWater)
	case c.MaxKeys < 1:
		return errorf("MaxKeys %d must be at least 1", c.MaxKeys)
	}
	return nil
}

// Stats counts a Leaser's work.
type Stats struct {
	// Leases counts lease requests answered by Redis; Denied those that
	// granted nothing.
	Leases, Denied uint64
	// RoundTrips counts pipelines sent (each one round trip per node) and
	// heartbeats; Errors the calls in them that failed.
	RoundTrips, Errors uint64
	// UnitsLeased, UnitsRefunded: units granted by and given back to Redis.
	// UnitsExpired: the refunded units that lapsed unused (TTL or window end).
	UnitsLeased, UnitsRefunded, UnitsExpired uint64
	// Instances is the last live-instance count (1 before the first
	// heartbeat).
	Instances int64
}

// Leaser makes and returns leases for the entries of one Limiter.
type Leaser struct {
	store *remote.Store
	cfg   Config
	clock clock.Clock
	base  time.Time
	// elapsed is clock's cheap reading, if it has one (clock.Elapsed), and
	// skew its reading at base.
	elapsed clock.Elapsed
	skew    time.Duration
	id      string
	bound   *local.Bound

	members atomic.Int64
	// goneHits: local hits of entries no longer in the bound.
	goneHits atomic.Uint64

	work  chan struct{} // wakes the batcher
	mu    stdsync.Mutex // guards the queue
	queue               // requires mu held
	// pending counts lease calls not yet applied; Close waits for them
	// before it stops the batcher, so that the units of a lease that lands
	// during Close are refunded too. Added to under mu, only while open.
	pending stdsync.WaitGroup

	// lanes: with a Redis Cluster, one queue per master (node address),
	// kept while it has requests; an idle one is dropped at the next flush.
	// Batcher only.
	lanes map[string]*lane

	stop    chan struct{}
	stopped atomic.Bool
	// closeCtx bounds what Close sends (the last refunds, the leave): one
	// Redis timeout from Close's start. Set with stopped, under mu.
	closeCtx context.Context
	// closing is cancelled when Close begins: a heartbeat in flight then
	// stops waiting (the leave follows).
	closing context.Context
	cancel  context.CancelFunc
	wg      stdsync.WaitGroup
	// guards tracks guarded calls (Config.Guard) that outlived their
	// deadline; Close waits for them until its own deadline only.
	guards guard.Group

	stats struct {
		leases, denied, roundTrips, errors atomic.Uint64
		leased, refunded, expired          atomic.Uint64
	}
}

// call is one lease request on its way through the batcher.
type call struct {
	req   remote.Request
	entry *local.Entry
	start int64 // ns, when the request was made: validity counts from here
	// backoff scales the random wait after a denied batch (see apply): this
	// instance's admitted rate over its fair share, so that the instance
	// that got most comes back last.
	backoff float64
	done    chan struct{}
	d       remote.Decision
	err     error
	// abandoned: the requester stopped waiting; the batcher applies the
	// grant to the entry itself.
	abandoned atomic.Bool
}

// New starts a Leaser: its batcher, sweeper and heartbeat goroutines run
// until Close.
func New(store *remote.Store, clk clock.Clock, cfg Config) (*Leaser, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = crand.Read(id[:])
	l := &Leaser{
		store: store, cfg: cfg, clock: clk, base: clk.Now(), id: hex.EncodeToString(id[:]),
		work: make(chan struct{}, 1), stop: make(chan struct{}), lanes: map[string]*lane{},
	}
	if el, ok := clk.(clock.Elapsed); ok {
		l.elapsed, l.skew = el, el.Elapsed()
	}
	l.closing, l.cancel = context.WithCancel(context.Background())
	l.members.Store(1)
	l.bound = local.NewBound(cfg.MaxKeys, func(e *local.Entry, units, at int64) {
		l.goneHits.Add(e.Hits())
		l.giveBack(e, units, at, false)
	})
	l.wg.Add(3)
	go l.batcher()
	go l.sweeper()
	go l.heartbeat()
	return l, nil
}

// Now returns the Leaser's monotonic time in ns, the time base of every
// allowance it fills.
func (l *Leaser) Now() int64 {
	if l.elapsed != nil {
		return int64(l.elapsed.Elapsed() - l.skew)
	}
	return int64(l.clock.Now().Sub(l.base))
}

// NewTable returns a table of entries for one policy, bounded with all the
// Leaser's other tables.
func (l *Leaser) NewTable(p *remote.Policy) *local.Table { return l.bound.NewTable(p) }

// Instances returns the live-instance count last seen (at least 1).
func (l *Leaser) Instances() int64 { return l.members.Load() }

// Lease gets n units for e's key from Redis, sized for its demand: the
// caller gets its n units directly (granted > 0), and the rest of the grant
// goes into e's allowance for later requests. If another lease for e is in
// flight, Lease waits for it and then tries e's allowance first (taken
// reports that: no Redis call of its own). A denial is recorded in e, so
// that requests before its RetryAfter are denied locally.
func (l *Leaser) Lease(ctx context.Context, p *remote.Policy, e *local.Entry, n int64) (d remote.Decision, taken bool, err error) {
	for {
		e.Mu.Lock()
		if ch := e.Leasing; ch != nil {
			e.Mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return remote.Decision{}, false, ctx.Err()
			}
			now := l.Now()
			if e.Take(n, now) {
				return remote.Decision{}, true, nil
			}
			if denied, _ := e.Denied(now, n); denied {
				return remote.Decision{}, false, nil
			}
			continue
		}
		ch := make(chan struct{})
		e.Leasing = ch
		floor, size, backoff := l.sizeLocked(p, e, n)
		e.Mu.Unlock()
		d, err = l.lease(ctx, p, e, n, floor, size, backoff)
		release(e, ch)
		return d, false, err
	}
}

// Prefetch starts a lease for e in the background, if none is in flight, no
// denial from Redis holds for e, the Leaser is open, and ready (the caller's
// say, such as its circuit breaker's) agrees. ready is asked last, only when
// a lease would start, and must not block. Prefetch never blocks.
func (l *Leaser) Prefetch(p *remote.Policy, e *local.Entry, ready func() bool) {
	if l.stopped.Load() {
		return
	}
	// Redis denied the last lease until a time still to come: asking sooner
	// would only poll it, and under scarcity an instance that holds units
	// and polls would win every batch from those waiting out their denial.
	if denied, _ := e.Denied(l.Now(), math.MaxInt64); denied || !e.Mu.TryLock() {
		return
	}
	if e.Leasing != nil || !ready() {
		e.Mu.Unlock()
		return
	}
	ch := make(chan struct{})
	e.Leasing = ch
	floor, size, backoff := l.sizeLocked(p, e, 0)
	e.Mu.Unlock()
	l.mu.Lock() // Close sets stopped under mu: no Add after its Wait
	if l.stopped.Load() {
		l.mu.Unlock()
		release(e, ch)
		return
	}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
		defer cancel()
		// A failed prefetch changes nothing: the next miss leases itself.
		_, _ = l.lease(ctx, p, e, 0, floor, size, backoff)
		release(e, ch)
	}()
}

// release ends the lease in flight for e, whose Leasing is ch: waiters wake
// and look at the allowance again.
func release(e *local.Entry, ch chan struct{}) {
	e.Mu.Lock()
	e.Leasing = nil
	close(ch)
	e.Mu.Unlock()
}

// sizeLocked observes e's demand and returns the bounds of the next lease,
// for a request of n units (0 for a prefetch): at least floor units, or
// nothing, and at most size.
//
// The size is demand × Refresh, clamped to [Min, Max] and to the policy's
// capacity. The floor is max(n, 1), except when Redis is short of units for
// the key (e.Scarce): then a lease waits until it can bring a useful batch,
// about this instance's fair share of the rate for Refresh, rather than
// asking again for every unit as it frees up. The batch is capped at half a
// fair share of the capacity, so that a small burst is never outwaited (a
// bucket that fills up loses the units that overflow it). Every instance
// short of units waits for the same batch whatever its own demand, which was
// measured in what it was admitted: sized by that, the instance that got most
// would wait for most, and get more still. (Its size may stay larger: the
// script shrinks a scarce grant toward a fair part of what is left anyway.
// Asking for the batch alone measured no different.) Backoff, the scale of
// the random wait after a denied batch, is that admitted rate over the
// instance's fair share, within [1/4, 4]: the instance that got most comes
// back last, and the one that got least first. Chance alone would leave
// shares as uneven as the count of batches each happened to win.
// Requires e.Mu held.
func (l *Leaser) sizeLocked(p *remote.Policy, e *local.Entry, n int64) (floor, size int64, backoff float64) {
	now := l.Now()
	taken := e.Taken()
	e.Demand.Observe(taken-e.Seen+n, now)
	e.Seen = taken
	size = int64(math.Ceil(e.Demand.Rate() * l.cfg.Refresh.Seconds()))
	size = max(l.cfg.Min, min(size, l.cfg.Max))
	size = min(max(size, n), p.Capacity())
	floor, backoff = max(n, 1), 1
	if e.Scarce.Load() {
		share := l.members.Load()
		batch := int64(math.Ceil(p.Rate() / float64(share) * l.cfg.Refresh.Seconds()))
		batch = min(batch, p.Capacity()/(2*share))
		floor = max(floor, batch)
		size = max(size, floor)
		backoff = min(4, max(0.25, e.Demand.Rate()/(p.Rate()/float64(share))))
	}
	return floor, size, backoff
}

// lease asks Redis for between floor and size units and applies the answer
// to e; n of them are the caller's (0 for a prefetch).
func (l *Leaser) lease(ctx context.Context, p *remote.Policy, e *local.Entry, n, floor, size int64, backoff float64) (remote.Decision, error) {
	start := l.Now()
	c := &call{
		req:   remote.Request{Policy: p, Key: e.Key, Min: floor, Max: size, Share: l.members.Load()},
		entry: e, start: start, backoff: backoff,
		done: make(chan struct{}),
	}
	l.mu.Lock()
	if l.stopped.Load() {
		l.mu.Unlock()
		return remote.Decision{}, ErrClosed
	}
	l.pending.Add(1)
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	l.wake()
	select {
	case <-c.done:
	case <-ctx.Done():
		// The call goes on; its grant lands in e, not lost (apply runs in
		// the batcher for abandoned calls).
		if c.abandon() {
			return remote.Decision{}, ctx.Err()
		}
		<-c.done
	}
	defer l.pending.Done()
	if c.err != nil {
		return remote.Decision{}, c.err
	}
	l.apply(c, n)
	return c.d, nil
}

// abandon marks c as no longer awaited, so that the batcher applies its
// grant to the entry itself. It reports false when c was already complete
// (or being completed): the caller must then wait for done and apply it.
func (c *call) abandon() bool { return c.abandoned.CompareAndSwap(false, true) }

// finish completes c: it hands the result to its requester or, if the
// requester left, applies it to the entry (all of the grant goes into the
// allowance).
func (l *Leaser) finish(c *call, d remote.Decision, err error) {
	c.d, c.err = d, err
	if !c.abandoned.CompareAndSwap(false, true) { // the requester left
		if err == nil {
			l.apply(c, 0)
		}
		l.pending.Done()
	}
	close(c.done)
}

// apply puts the answer to c into its entry: the grant beyond the caller's n
// units into the allowance, valid from the request's start for TTL or the
// grant's own validity, whichever ends first; or the denial.
func (l *Leaser) apply(c *call, n int64) {
	e, d, start := c.entry, c.d, c.start
	now := l.Now()
	// Short of units: less than asked for, or too little left for every
	// live instance to lease as much again.
	e.Scarce.Store(d.Granted < c.req.Max || d.Remaining < c.req.Max*c.req.Share)
	e.Decider.Store(int32(d.Decider))
	e.Remaining.Store(d.Remaining)
	e.ResetAt.Store(now + int64(d.ResetAfter))
	if d.Granted == 0 {
		wait := int64(d.RetryAfter)
		if c.req.Min > max(n, 1) && c.req.Share > 1 {
			// A batch was asked for, and the other instances wait for
			// theirs too: the first of them back takes the units. Coming
			// back up to Share-1 batches' time later, at random, spreads
			// them out, so that most asks find their batch; scaled by the
			// call's backoff, it sends the instances that got most to the
			// back of the queue. The units wait in Redis meanwhile: the
			// batch is small enough that the others' batches fit in the
			// bucket (see sizeLocked), and a window's units are still
			// there to be leased when it opens.
			perBatch := float64(c.req.Min) / c.req.Policy.Rate() * 1e9
			wait += int64(rand.Float64() * float64(c.req.Share-1) * perBatch * c.backoff)
		}
		e.Deny(start+wait, max(n, 1))
		return
	}
	valid := l.cfg.TTL
	if d.ValidFor >= 0 && d.ValidFor < valid {
		valid = d.ValidFor
	}
	if keep := d.Granted - n; keep > 0 {
		// Under Mu: an abandoned call's grant (applied by the batcher) may
		// land while the next lease of e lands, and Adds must not overlap.
		e.Mu.Lock()
		stale, staleAt := e.Add(keep, d.At, start+int64(valid), now)
		e.Mu.Unlock()
		if stale > 0 {
			l.giveBack(e, stale, staleAt, true)
		}
		e.LowWater.Store(int64(math.Ceil(l.cfg.LowWater * float64(c.req.Max))))
	}
	l.bound.Touch(e)
	if e.Evicted() { // evicted while the lease was in flight: nobody will use it
		if u, at := e.Drain(); u > 0 {
			l.giveBack(e, u, at, false)
		}
	}
}

// giveBack queues a refund of units granted at at.
func (l *Leaser) giveBack(e *local.Entry, units, at int64, expired bool) {
	if units <= 0 {
		return
	}
	if expired {
		l.stats.expired.Add(uint64(units))
	}
	l.mu.Lock()
	l.backs = append(l.backs, remote.Grant{Policy: e.Policy.(*remote.Policy), Key: e.Key, Units: units, At: at})
	l.mu.Unlock()
	l.wake()
}

// wake tells the batcher that something is queued.
func (l *Leaser) wake() {
	select {
	case l.work <- struct{}{}:
	default:
	}
}

// maxBatch caps the calls sent in one pipeline.
const maxBatch = 256

// queue holds lease calls and refunds waiting to be sent: the Leaser's, and
// each Cluster lane's.
type queue struct {
	calls []*call
	backs []remote.Grant
}

// take removes and returns one pipeline's worth of each: up to maxBatch.
func (q *queue) take() ([]*call, []remote.Grant) {
	calls := q.calls[:min(len(q.calls), maxBatch)]
	q.calls = q.calls[len(calls):]
	backs := q.backs[:min(len(q.backs), maxBatch)]
	q.backs = q.backs[len(backs):]
	return calls, backs
}

// batcher sends what is queued, as soon as it is queued: lease requests in
// one pipeline, refunds in another. Nothing waits to fill a batch; requests
// that arrive while a pipeline is out go together in the next one.
func (l *Leaser) batcher() {
	defer l.wg.Done()
	for {
		select {
		case <-l.work:
		case <-l.stop:
			for l.flush() { // what Close queued
			}
			return
		}
		for l.flush() {
		}
	}
}

// flush takes one batch of each queue and sends it: on the batcher's
// goroutine, or with a Redis Cluster through each master's lane. It reports
// whether anything was taken.
func (l *Leaser) flush() bool {
	l.mu.Lock()
	calls, backs := l.take()
	l.mu.Unlock()
	if len(calls) == 0 && len(backs) == 0 {
		return false
	}
	if !l.store.Sharded() {
		l.send(calls, backs)
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	for _, c := range calls {
		l.lane(l.store.Node(ctx, c.req.Policy, c.req.Key)).push(c, nil)
	}
	for _, g := range backs {
		l.lane(l.store.Node(ctx, g.Policy, g.Key)).push(nil, &g)
	}
	for node, ln := range l.lanes {
		if !l.startLane(ln) {
			// Idle: dropped, and made again when next needed, so that the
			// masters a resharding or a failover left behind do not stay.
			delete(l.lanes, node)
		}
	}
	return true
}

// send sends one pipeline of lease requests and one of refunds, within the
// timeout, or once Close has begun within Close's bound.
func (l *Leaser) send(calls []*call, backs []remote.Grant) {
	l.mu.Lock()
	ctx := l.closeCtx // set once stopped
	l.mu.Unlock()
	if ctx == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), l.cfg.Timeout)
		defer cancel()
	}
	if len(calls) > 0 {
		l.sendLeases(ctx, calls)
	}
	if len(backs) > 0 {
		l.sendRefunds(ctx, backs)
	}
}

// lane is the queue of one Redis Cluster master: its requests go out in
// pipelines of their own, one at a time, so that a master that is down or
// slow holds up only its own keys' requests (one go-redis pipeline across
// masters waits for every one of them).
type lane struct {
	mu    stdsync.Mutex
	busy  bool // a goroutine is sending the lane's queue
	queue      // requires mu held
}

// lane returns the lane of node, making it. Batcher only.
func (l *Leaser) lane(node string) *lane {
	ln := l.lanes[node]
	if ln == nil {
		ln = &lane{}
		l.lanes[node] = ln
	}
	return ln
}

// push queues c or g (either may be nil) in ln.
func (ln *lane) push(c *call, g *remote.Grant) {
	ln.mu.Lock()
	if c != nil {
		ln.calls = append(ln.calls, c)
	}
	if g != nil {
		ln.backs = append(ln.backs, *g)
	}
	ln.mu.Unlock()
}

// startLane starts a goroutine that sends ln's queue until it is empty,
// unless one is at it. It reports whether ln is busy now: false means it
// is idle and empty. Batcher only: Close waits for the goroutine (wg).
func (l *Leaser) startLane(ln *lane) bool {
	ln.mu.Lock()
	if ln.busy || len(ln.calls)+len(ln.backs) == 0 {
		busy := ln.busy
		ln.mu.Unlock()
		return busy
	}
	ln.busy = true
	ln.mu.Unlock()
	l.wg.Add(1) // the batcher's own count is held: no race with Close's Wait
	go func() {
		defer l.wg.Done()
		for {
			ln.mu.Lock()
			calls, backs := ln.take()
			if len(calls)+len(backs) == 0 {
				ln.busy = false
				ln.mu.Unlock()
				return
			}
			ln.mu.Unlock()
			l.send(calls, backs)
		}
	}()
	return true
}

// sendLeases sends one pipeline of lease requests and completes them.
func (l *Leaser) sendLeases(ctx context.Context, calls []*call) {
	rs := make([]remote.Request, len(calls))
	for i, c := range calls {
		rs[i] = c.req
	}
	l.stats.roundTrips.Add(1)
	ds, errs := l.acquireBatch(ctx, rs)
	for i, c := range calls {
		if errs[i] != nil {
			l.stats.errors.Add(1)
		} else {
			l.stats.leases.Add(1)
			l.stats.leased.Add(uint64(ds[i].Granted))
			if ds[i].Granted == 0 {
				l.stats.denied.Add(1)
			}
		}
		l.finish(c, ds[i], errs[i])
	}
}

// sendRefunds sends one pipeline of refunds.
func (l *Leaser) sendRefunds(ctx context.Context, backs []remote.Grant) {
	l.stats.roundTrips.Add(1)
	l.refunded(backs, l.refundBatch(ctx, backs))
}

// refunded counts the outcome of one pipeline of refunds, gs, whose errors
// are errs.
func (l *Leaser) refunded(gs []remote.Grant, errs []error) {
	for i, err := range errs {
		if err != nil {
			// Not retried: the units come back by themselves when their
			// key's state expires.
			l.stats.errors.Add(1)
			continue
		}
		l.stats.refunded.Add(uint64(gs[i].Units))
	}
}

// allFailed returns n errors, each err: what a pipeline that failed as a
// whole gives each of its calls.
func allFailed(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// guarded makes one Redis call, fn: directly, or with Config.Guard on a
// goroutine of its own that the caller stops waiting for at ctx's end (late
// then gets what the call brings back afterwards; see package guard).
func guarded[T any](l *Leaser, ctx context.Context, fn func(context.Context) (T, error), late func(T, error)) (T, error) {
	if !l.cfg.Guard {
		return fn(ctx)
	}
	return guard.Do(&l.guards, ctx, fn, late)
}

// acquireBatch sends one pipeline of lease requests. When the call outlives
// its deadline (Guard), every request fails with the deadline's error, and
// the grants that arrive later are refunded as they arrive: nobody holds
// them.
func (l *Leaser) acquireBatch(ctx context.Context, rs []remote.Request) ([]remote.Decision, []error) {
	type answer struct {
		ds   []remote.Decision
		errs []error
	}
	a, err := guarded(l, ctx, func(ctx context.Context) (answer, error) {
		ds, errs := l.store.AcquireBatch(ctx, rs)
		return answer{ds, errs}, nil
	}, func(a answer, _ error) {
		var gs []remote.Grant
		for i, d := range a.ds {
			if a.errs[i] == nil && d.Granted > 0 {
				l.stats.leased.Add(uint64(d.Granted))
				gs = append(gs, remote.Grant{Policy: rs[i].Policy, Key: rs[i].Key, Units: d.Granted, At: d.At})
			}
		}
		if len(gs) == 0 {
			return
		}
		// Already on a goroutine of its own, past the batcher's deadline
		// (and maybe past Close): refund directly, with a new one.
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
		defer cancel()
		l.stats.roundTrips.Add(1)
		l.refunded(gs, l.store.RefundBatch(ctx, gs))
	})
	if err != nil {
		a.ds, a.errs = make([]remote.Decision, len(rs)), allFailed(len(rs), err)
	}
	return a.ds, a.errs
}

// refundBatch sends one pipeline of refunds (guarded with Config.Guard).
func (l *Leaser) refundBatch(ctx context.Context, gs []remote.Grant) []error {
	errs, err := guarded(l, ctx, func(ctx context.Context) ([]error, error) {
		return l.store.RefundBatch(ctx, gs), nil
	}, nil)
	if err != nil {
		errs = allFailed(len(gs), err)
	}
	return errs
}

// sweeper refunds units that lapsed unused, every quarter TTL.
func (l *Leaser) sweeper() {
	defer l.wg.Done()
	every := max(l.cfg.TTL/4, time.Millisecond)
	for {
		t := l.clock.NewTimer(every)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C():
		}
		now := l.Now()
		l.bound.Range(func(e *local.Entry) bool {
			if u, at := e.DrainExpired(now); u > 0 {
				l.giveBack(e, u, at, true)
			}
			return true
		})
	}
}

// heartbeat keeps this instance in the membership count.
func (l *Leaser) heartbeat() {
	defer l.wg.Done()
	beat := func(leave bool) {
		ctx, cancel := context.WithTimeout(l.closing, l.cfg.Timeout)
		defer cancel()
		if leave {
			l.mu.Lock()
			ctx = l.closeCtx
			l.mu.Unlock()
		}
		l.stats.roundTrips.Add(1)
		n, err := guarded(l, ctx, func(ctx context.Context) (int64, error) {
			return l.store.Heartbeat(ctx, l.id, 3*l.cfg.Heartbeat, leave)
		}, nil)
		if err != nil {
			l.stats.errors.Add(1)
			return
		}
		if !leave {
			l.members.Store(max(n, 1))
		}
	}
	beat(false)
	// Instances that start together each see only those that beat before
	// them: beat again soon, then less often, up to the interval, so that
	// the count settles within about a tenth of it.
	every := max(l.cfg.Heartbeat/16, time.Millisecond)
	for {
		t := l.clock.NewTimer(every)
		every = min(2*every, l.cfg.Heartbeat)
		select {
		case <-l.stop:
			t.Stop()
			beat(true)
			return
		case <-t.C():
			beat(false)
		}
	}
}

// Close refunds every unit held, leaves the membership and stops the
// goroutines. It returns when they are done, within about one Redis timeout
// even when Redis does not answer (calls in flight end by their own
// timeouts, which started earlier; what Close sends shares one). With
// Config.Guard, calls that outlived their deadline are waited for until
// that bound only: they end at the client's own timeouts, and refund what
// they were granted. Units Redis does not take back return by themselves
// when their keys' state expires. Idempotent.
func (l *Leaser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout)
	defer cancel()
	l.mu.Lock()
	first := !l.stopped.Swap(true) // no lease starts after this
	if first {
		l.closeCtx = ctx
	}
	l.mu.Unlock()
	if !first {
		return
	}
	l.cancel()       // a heartbeat in flight stops waiting
	l.bound.Clear()  // queues the refunds of every unit held
	l.pending.Wait() // leases in flight land, and are refunded (their entries are gone)
	close(l.stop)    // the batcher sends what is queued, then stops
	l.wg.Wait()
	l.guards.Close(ctx) // guarded calls past their deadline: until Close's own
}

// LocalHits returns the number of requests answered from allowances, ever:
// the hits of every entry, evicted ones included. It walks every entry:
// for Stats, not for the hot path.
func (l *Leaser) LocalHits() uint64 {
	n := l.goneHits.Load()
	l.bound.Range(func(e *local.Entry) bool { n += e.Hits(); return true })
	return n
}

// Stats returns a snapshot of the counters.
func (l *Leaser) Stats() Stats {
	s := &l.stats
	return Stats{
		Leases: s.leases.Load(), Denied: s.denied.Load(),
		RoundTrips: s.roundTrips.Load(), Errors: s.errors.Load(),
		UnitsLeased: s.leased.Load(), UnitsRefunded: s.refunded.Load(), UnitsExpired: s.expired.Load(),
		Instances: l.members.Load(),
	}
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}
