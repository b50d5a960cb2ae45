package sync

import (
	"context"
	"errors"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// call is one lease request on its way through the batcher.
type call struct {
	req   remote.Request
	entry *Entry
	start int64 // ns, when the request was made: validity counts from here
	// epoch and clears: the entry's at the lease's start (local.Lease)
	epoch, clears uint64
	rate          float64       // units/s: the demand plan sized it by (req.Demand, rounded)
	done          chan struct{} // made as the batcher queues it
	d             remote.Decision
	err           error
	// abandoned: the requester stopped waiting, or none waits (posted);
	// the batcher has the Leaser apply the grant to the entry itself.
	abandoned atomic.Bool
	// posted: queued by post, for no requester (a prefetch); the batcher
	// tells the owner as it sends it and as it ends.
	posted bool
	// due is the deadline of the pipeline that carries c (ns from the
	// batcher's base), once sent (sendBatch); -1 once handed to the
	// batcher or the door, until then; 0 before.
	due atomic.Int64
	// owner, when not nil, is the channel of the entry's lease in flight
	// that this call is, which its waiters wait on: a waiter holding it
	// may join the call (Leaser.send).
	owner any
	// tagged is when (ns from the batcher's base) a request's lease put c
	// on its entry for its waiters (Entry.Tag); 0: not (a prefetch).
	// ended, when finish handed c's answer back; 0: not yet.
	tagged int64
	ended  atomic.Int64
}

// abandon marks c as no longer awaited, so that the batcher has its grant
// applied to the entry itself. It reports false when c was already
// complete (or being completed): the caller must then wait for done and
// apply it.
func (c *call) abandon() bool { return c.abandoned.CompareAndSwap(false, true) }

// owner is what a batcher needs of the Leaser that owns it: applying the
// answer to a call, and counting what Redis answered.
type owner interface {
	// apply puts the answer to c into its entry, n units of the grant the
	// caller's (0: all of it into the allowance).
	apply(c *call, n int64)
	// returning counts units on their way back: a refund queued, or the
	// units a lease call gives back (its Back), queued with it.
	returning(units int64)
	// countLease counts the answer d to the lease request r (its Back
	// went back with it); countRefund counts the units of a refund, which
	// Redis took (ok) or not (an error: they are dropped, and come back by
	// themselves when their key's state expires).
	countLease(r remote.Request, d remote.Decision)
	countRefund(units int64, ok bool)
	// sending is told of a posted call's entry as the call is sent, and
	// ended of the call once it ended, its grant applied if it came.
	sending(e *Entry)
	ended(c *call)
}

var _ owner = (*Leaser)(nil)

// batcher sends a Leaser's lease calls and refunds to Redis, through the
// door: it queues them, sends what is queued as soon as it is queued,
// refunds and lease requests in one pipeline (with a Redis Cluster, one per
// master, each master in a lane of its own), measures the round trip, and
// completes the calls, having its owner apply each answer. It decides
// nothing about what is leased. Its methods are safe for concurrent use,
// but for those marked batcher only: they run on its goroutine.
type batcher struct {
	door  *door.Door
	owner owner

	work  chan struct{} // wakes the batcher
	mu    stdsync.Mutex // guards the queue, closed and closeCtx
	queue               // requires mu held
	// closed: Close has begun; no lease call is queued after it. closeCtx
	// bounds what is sent from then on (the last refunds): one Redis
	// timeout from Close's start. Both set by closing, under mu.
	closed   bool
	closeCtx context.Context
	// pending counts lease calls not yet applied; close waits for them
	// before it stops the batcher, so that the units of a lease that lands
	// during Close are refunded too. Added to under mu, only while open.
	pending stdsync.WaitGroup

	// lanes: with a Redis Cluster, one queue per master (node address),
	// kept while it has requests; an idle one is dropped at the next flush.
	// Batcher only.
	lanes map[string]*lane

	// rtt is the measured lease round trip (ns, a moving average).
	rtt atomic.Int64
	// out is the deadline of the last pipeline sent, while it is out, in
	// ns from base; 0: none (see sendBatch). behind is when (ns from
	// base) this process last showed it did not keep up (answered): an
	// answer seen, or a queue looked at (flush), an eighth of the timeout
	// or more late. queued: when something was queued for a batcher not
	// sending (under mu: it took something at its last look), until it
	// looks; 0: none.
	// spawned is queued's for a goroutine started to send (spawn).
	out, behind, queued, spawned atomic.Int64
	sending                      bool
	base                         time.Time

	stop chan struct{}
	wg   stdsync.WaitGroup // the batcher's goroutine and its lanes'
}

// newBatcher starts a batcher that sends through d for o: its goroutine
// runs until close.
func newBatcher(d *door.Door, o owner) *batcher {
	b := &batcher{door: d, owner: o, work: make(chan struct{}, 1), base: time.Now(),
		lanes: map[string]*lane{}, stop: make(chan struct{})}
	b.wg.Add(1)
	go b.run()
	return b
}

// lease queues c, waits for its answer and has the owner apply it, n units
// of the grant the caller's (0 for a prefetch). If ctx has ended already,
// nothing is queued: ctx's error, as a notSent (the caller takes back
// what c was to give back), unless renew gives a fresh timeout (Redis was
// not asked yet, and this goroutine ran late). If ctx ends meanwhile,
// lease returns ctx's error, and the call goes on: its grant lands in the
// entry, not lost (applied by the batcher, as the requester left). Once
// Close has begun, lease returns door.ErrClosed.
func (b *batcher) lease(ctx context.Context, c *call, n int64) (remote.Decision, error) {
	if err := ctx.Err(); err != nil {
		renewed, cancel, ok := b.renew(ctx, false)
		if !ok {
			// Ended already: not queued, where the batcher could take it
			// before the abandon (and grant units nobody waits for).
			return remote.Decision{}, notSent{err}
		}
		defer cancel()
		ctx = renewed
	}
	if !b.enqueue(c) {
		return remote.Decision{}, door.ErrClosed
	}
	return b.await(ctx, c, n)
}

// post queues c, a call nobody waits for (a prefetch): the batcher
// applies its grant and tells the owner (sending, ended), so that no
// goroutine of its own waits for a CPU (tens of milliseconds or more in a
// process whose cores are all busy) while requests wait for the lease.
// It returns door.ErrClosed, queueing nothing, once Close has begun; with
// try, errBusy when the batcher's lock is held (it does not wait).
func (b *batcher) post(c *call, try bool) error {
	c.posted = true
	c.abandoned.Store(true)
	switch {
	case !try:
		b.mu.Lock()
	case !b.mu.TryLock():
		return errBusy
	}
	if !b.enqueueLocked(c) {
		return door.ErrClosed
	}
	return nil
}

// errBusy: post found the batcher's lock held.
var errBusy = errors.New("sync: the batcher's lock is held")

// enqueue queues c, counted in pending, and wakes the batcher. It reports
// false, queueing nothing, once Close has begun.
func (b *batcher) enqueue(c *call) bool {
	b.mu.Lock()
	return b.enqueueLocked(c)
}

// enqueueLocked is enqueue with mu held, which it releases.
func (b *batcher) enqueueLocked(c *call) bool {
	if b.closed {
		b.mu.Unlock()
		return false
	}
	c.done = make(chan struct{})
	c.due.Store(-1)
	b.pending.Add(1)
	b.calls = append(b.calls, c)
	b.waiting()
	b.mu.Unlock()
	b.owner.returning(c.req.Back)
	b.wake()
	return true
}

// await waits for c, counted in pending, to be finished, and applies its
// grant for a request of n units; or leaves at ctx's end, if c is not
// finished yet, for finish to apply it and end its count.
func (b *batcher) await(ctx context.Context, c *call, n int64) (remote.Decision, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		if came, _ := b.answered(ctx, c.done, c); !came && c.abandon() {
			return remote.Decision{}, ctx.Err()
		}
		<-c.done
	}
	defer b.pending.Done()
	if c.err != nil {
		return remote.Decision{}, c.err
	}
	b.owner.apply(c, n)
	return c.d, nil
}

// notSent is the error of a lease call that was not sent: its context had
// ended. It unwraps to that context's error.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// hold counts a lease call that goes outside the batcher (Leaser.send's
// exact calls) until its answer is applied, as lease counts its own, so
// that close waits for it: a grant that lands in an entry gone meanwhile
// queues its refund, which close then sends. It reports false once Close
// has begun: the call is not made. Release with release.
func (b *batcher) hold() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.pending.Add(1)
	return true
}

// release ends what hold began.
func (b *batcher) release() { b.pending.Done() }

// queueBack queues the refund g: taken even once Close has begun, which
// queues the last ones.
func (b *batcher) queueBack(g remote.Grant) {
	b.owner.returning(g.Units)
	b.mu.Lock()
	b.backs = append(b.backs, g)
	b.waiting()
	b.mu.Unlock()
	b.wake()
}

// wake tells the batcher that something is queued.
func (b *batcher) wake() {
	select {
	case b.work <- struct{}{}:
	default:
	}
}

// roundTrip returns the measured lease round trip: 0 before the first.
func (b *batcher) roundTrip() time.Duration { return time.Duration(b.rtt.Load()) }

// closing begins Close: lease calls are refused from now on, and what is
// sent is bounded by ctx.
func (b *batcher) closing(ctx context.Context) {
	b.mu.Lock()
	b.closed, b.closeCtx = true, ctx
	b.mu.Unlock()
}

// close waits for the lease calls queued to be applied (those whose
// entries are gone queue their refunds), then sends everything queued and
// stops. Call it once, after closing.
func (b *batcher) close() {
	b.pending.Wait()
	close(b.stop)
	b.wg.Wait()
}

// finish completes c: it hands the result to its requester or, if the
// requester left or none waits (posted), has the owner apply it to the
// entry (all of the grant goes into the allowance), and tells the owner
// that a posted call ended.
func (b *batcher) finish(c *call, d remote.Decision, err error) {
	c.d, c.err = d, err
	c.ended.Store(b.since(time.Now()))
	if !c.abandoned.CompareAndSwap(false, true) { // the requester left, or none waits
		if err == nil {
			b.owner.apply(c, 0)
		}
		if c.posted {
			b.owner.ended(c)
		}
		b.pending.Done()
	}
	close(c.done)
}

// maxBatch caps the calls sent in one pipeline.
const maxBatch = 256

// queue holds lease calls and refunds waiting to be sent: the batcher's,
// and each Cluster lane's.
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

// run sends what is queued, as soon as it is queued: refunds and lease
// requests in one pipeline. Nothing waits to fill a batch; requests that
// arrive while a pipeline is out go together in the next one. It is the
// batcher's goroutine.
func (b *batcher) run() {
	defer b.wg.Done()
	for {
		select {
		case <-b.work:
		case <-b.stop:
			for b.flush() { // what Close queued
			}
			return
		}
		for b.flush() {
		}
	}
}

// flush takes one batch of each queue and sends it: on the batcher's
// goroutine, or with a Redis Cluster through each master's lane. It reports
// whether anything was taken. Batcher only.
func (b *batcher) flush() bool {
	b.mu.Lock()
	calls, backs := b.take()
	b.sending = len(calls)+len(backs) > 0
	if at := b.queued.Swap(0); at != 0 {
		// In a process that keeps up, the goroutine a channel send wakes
		// runs at once.
		b.lateSince(at, b.since(time.Now()))
	}
	b.mu.Unlock()
	if len(calls) == 0 && len(backs) == 0 {
		return false
	}
	if !b.door.Sharded() {
		b.send(calls, backs)
		return true
	}
	ctx, cancel := b.door.Bound(context.Background()) // for loading the cluster's layout
	defer cancel()
	for _, c := range calls {
		b.lane(b.door.Node(ctx, c.req.Policy, c.req.Key)).push(c, nil)
	}
	for _, g := range backs {
		b.lane(b.door.Node(ctx, g.Policy, g.Key)).push(nil, &g)
	}
	for node, ln := range b.lanes {
		if !b.startLane(ln) {
			// Idle: dropped, and made again when next needed, so that the
			// masters a resharding or a failover left behind do not stay.
			delete(b.lanes, node)
		}
	}
	return true
}

// send sends one pipeline of refunds and lease requests, within the
// door's timeout, or once Close has begun within Close's bound if sooner.
func (b *batcher) send(calls []*call, backs []remote.Grant) {
	b.mu.Lock()
	ctx := b.closeCtx // set once closed
	b.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, b.door.Timeout())
	defer cancel()
	b.sendBatch(ctx, calls, backs)
}

// sendBatch sends one pipeline of refunds and lease requests through the
// door (which refunds the grants that arrive after ctx's end) and
// completes the requests. It measures the lease round trip, of pipelines
// Redis answered. It keeps the pipeline's deadline (ctx's) while it is out
// (out, and each call's due), and marks this process behind if Redis
// answered and the answer was seen an eighth of the timeout or more past
// that deadline: Redis answered in time (a read past its deadline fails),
// and this process saw it that much later (see answered). Both are read
// as the round trip ends, before a hook of the user's hears of it.
func (b *batcher) sendBatch(ctx context.Context, calls []*call, backs []remote.Grant) {
	rs := make([]remote.Request, len(calls))
	for i, c := range calls {
		rs[i] = c.req
		if c.posted {
			b.owner.sending(c.entry)
		}
	}
	var due int64 // 0: not followed
	if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		// (send's deadline, always there; a pipeline whose deadline has
		// passed already, as Close's last refunds' may, fails at once.)
		due = b.since(dl)
		for _, c := range calls {
			c.due.Store(due)
		}
		// With a Cluster's lanes, pipelines are out side by side: out is
		// the deadline of the last one sent, while it is out. A later send
		// hides an earlier one's: late is said less often, never wrongly.
		b.out.Store(due)
	}
	start := time.Now()    // the wall clock: the round trip is Redis's real latency, which an injected test clock does not see pass
	var took time.Duration // of a round trip Redis answered; 0: none
	ds, errs, gerrs := b.door.Batch(ctx, rs, backs, func(answered bool) {
		now := time.Now()
		if due != 0 {
			b.out.CompareAndSwap(due, 0) // out no more, answered or not
		}
		if !b.door.Sharded() {
			// What comes while the answers are put in owes a look too.
			b.mu.Lock()
			b.sending = false
			b.mu.Unlock()
		}
		if !answered {
			// A refused dial (about 0) or a deadline (the timeout) is not
			// Redis's latency: after an outage, the first leases would be
			// sized for either.
			return
		}
		took = now.Sub(start)
		b.lateSince(due, b.since(now))
	})
	if len(calls) > 0 && took > 0 {
		b.measured(took)
	}
	for i, err := range gerrs {
		// A refund that failed is not retried: its units come back by
		// themselves when their key's state expires.
		b.owner.countRefund(backs[i].Units, err == nil)
	}
	for i, c := range calls {
		if errs[i] == nil {
			b.owner.countLease(c.req, ds[i])
		} else {
			// Whether the units it gave back reached Redis is not known:
			// counted as dropped (they come back by themselves).
			b.owner.countRefund(c.req.Back, false)
		}
		b.finish(c, ds[i], errs[i])
	}
}

// measured folds one lease round trip into the moving average.
func (b *batcher) measured(d time.Duration) {
	old := b.rtt.Load()
	if old == 0 {
		b.rtt.Store(int64(d))
		return
	}
	b.rtt.Store(old + (int64(d)-old)/8)
}
