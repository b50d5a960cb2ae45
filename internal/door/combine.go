package door

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ratelease/ratelease/remote"
)

// inFlight is how many exact decisions (Acquire) to one server may be on
// their way at once before more wait to go together (see combiner): two a
// core of this process, and at least four. Below it, callers never wait
// for each other; above it, they would mostly be waiting for the cores.
func inFlight() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// combiner puts together the exact decisions to one server (the breaker's)
// that come while Door.inFlight are on their way: they wait, and go in one
// pipeline as soon as one of those ends, each still its own atomic call,
// in the order they came. Under load a round trip then carries many
// decisions, and Redis and the client pay a round trip's own work (the
// system calls, reading a request, writing a reply) once for them all, as
// they do for a pipeline of leases. A decision that finds fewer in flight
// goes at once, as it would alone.
type combiner struct {
	mu    sync.Mutex
	going int       // calls and pipelines on their way; requires mu
	queue []*queued // waiting, oldest first; requires mu
}

// queued is an exact decision waiting in a combiner. A caller that gets
// its answer puts its queued back in queuedPool for the next one (with
// done empty again); one that leaves first does not, since the pipeline
// that holds it may still look at it.
type queued struct {
	ctx  context.Context // the caller's
	op   RedisOp         // what the hook is told the call is
	r    remote.Request
	done chan struct{} // given a value (cap 1) once d and err are set
	d    remote.Decision
	err  error
	// taken is set by whichever comes first: the caller that stops
	// waiting (its context ended), or the pipeline that answers it. A
	// caller gone before the pipeline was sent is left out of it; one gone
	// after has its grant refunded.
	taken atomic.Bool
	// owner, when not nil, lets others join r while it waits (Join).
	owner any
}

// decide makes r's decision on the server of pass (see combiner): at once
// when fewer than d.inFlight are on their way there, else in the next
// pipeline of those that waited. op is what the hook is told of it (of
// its pipeline, when it is the oldest there); owner, when not nil, whose
// it is, for Join.
func (d *Door) decide(ctx context.Context, op RedisOp, r remote.Request, pass Pass, owner any) (remote.Decision, error) {
	c := &pass.b.combine
	c.mu.Lock()
	if pass.probe || c.going < d.inFlight {
		// (A probe of a failing server goes alone, at once.)
		c.going++
		c.mu.Unlock()
		// (Deferred: a hook of the caller's that panics must not keep
		// the slot, or the server's calls would queue for good.)
		defer d.release(c, pass.b.node)
		return d.acquire(ctx, op, r, pass.b.node)
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return remote.Decision{}, err
	}
	q := queuedPool.Get().(*queued)
	q.ctx, q.op, q.r, q.owner = ctx, op, r, owner
	c.queue = append(c.queue, q)
	c.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		if q.taken.CompareAndSwap(false, true) {
			return remote.Decision{}, ctx.Err()
		}
		<-q.done // answered just now
	}
	dec, err := q.d, q.err
	*q = queued{done: q.done}
	queuedPool.Put(q)
	return dec, err
}

// Join has owner's decision of key under p (Decide's: a cold key's
// lease), if it still waits in its server's combiner, ask for n units
// more, for another request of n; it reports whether it did. The joiner
// then waits for that decision as for any lease in flight. Only a
// decision asked for n units is joined, since Redis grants whole
// multiples of a call's Min, and never past the key's capacity.
func (d *Door) Join(owner any, p *remote.Policy, key string, n int64) bool {
	c := &d.serverOf(p, key).combine
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.queue {
		if q.owner == owner && q.r.Policy == p && q.r.Key == key && q.r.Min == n &&
			q.r.Max+n <= p.Capacity() && !q.taken.Load() {
			q.r.Max += n
			return true
		}
	}
	return false
}

// queuedPool holds the queued of callers that got their answer.
var queuedPool = sync.Pool{New: func() any { return &queued{done: make(chan struct{}, 1)} }}

// release ends a call or pipeline of c: the decisions waiting, if any, go
// now, in one pipeline, on a goroutine of their own that keeps the slot and
// sends those that come meanwhile in turn.
func (d *Door) release(c *combiner, node string) {
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.going--
		c.mu.Unlock()
		return
	}
	waiting := c.queue
	c.queue = nil
	c.mu.Unlock()
	if !d.guards.Go(func() {
		for waiting != nil {
			d.sendQueued(waiting, node)
			c.mu.Lock()
			waiting, c.queue = c.queue, nil
			if len(waiting) == 0 {
				waiting = nil
				c.going--
			}
			c.mu.Unlock()
		}
	}) {
		// Closing: nothing goes out any more.
		for _, q := range waiting {
			q.answer(remote.Decision{}, ErrClosed)
		}
		c.mu.Lock()
		c.going--
		c.mu.Unlock()
	}
}

// sendQueued makes the decisions of waiting whose callers still wait, in
// one pipeline, bounded by the timeout (no caller's context: a caller that
// leaves takes only itself out), and answers each; the grants of callers
// gone meanwhile are refunded.
func (d *Door) sendQueued(waiting []*queued, node string) {
	live := waiting[:0]
	for _, q := range waiting {
		if !q.taken.Load() {
			live = append(live, q)
		}
	}
	if len(live) == 0 {
		return
	}
	rs := make([]remote.Request, len(live))
	for i, q := range live {
		rs[i] = q.r
	}
	// The hook sees the round trip as made for the oldest caller (its
	// values, a trace's span, its op), never ended by it.
	ds, errs, _ := d.pipeline(context.WithoutCancel(live[0].ctx), live[0].op, node, rs, nil,
		func(i int, err error) error { return Classify(live[i].ctx, err) }, nil)
	// The grants of callers gone meanwhile go back: refundLate refunds
	// what is left granted.
	for i, q := range live {
		if q.answer(ds[i], errs[i]) {
			ds[i] = remote.Decision{}
		}
	}
	d.refundLate(rs, ds, errs)
}

// answer gives q its decision, unless its caller has stopped waiting: it
// reports whether the caller gets it.
func (q *queued) answer(dec remote.Decision, err error) bool {
	if !q.taken.CompareAndSwap(false, true) {
		return false
	}
	q.d, q.err = dec, err
	q.done <- struct{}{}
	return true
}
