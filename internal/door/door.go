package door

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/guard"
	"github.com/ratelease/ratelease/remote"
)

// ErrUnavailable is wrapped, together with the cause, by every error that
// comes from Redis failing to answer (a network error, a timeout, a script
// error). Errors of the caller's context are returned unwrapped instead.
var ErrUnavailable = errors.New("ratelease: redis unavailable")

// ErrClosed is returned by calls made once the Door's owner is closing.
var ErrClosed = errors.New("ratelease: limiter closed")

// Config configures a Door. Store, Clock and a positive Timeout are
// required.
type Config struct {
	Store *remote.Store
	// Clock is the breakers' time (their backoff).
	Clock clock.Clock
	// Timeout bounds every Redis call, on top of the caller's context.
	Timeout time.Duration
	// Guard runs each Redis call on its own goroutine and stops waiting for
	// it at the deadline: for clients that do not honour context deadlines
	// themselves (see remote.HonoursDeadlines).
	Guard bool
	// Events, when not nil, is called with every Event: the breakers'
	// changes, the first failure of each run of failures, and warnings,
	// in order, never concurrently, holding no lock, on a goroutine that
	// made a call to Redis: it must not block it for long.
	// With Events, the maxmemory-policy of each server is read once, after
	// the first call to it succeeds (see EventWarning).
	Events func(Event)
	// Recovered, when not nil, is called on a goroutine of its own each
	// time the breaker of the server named node closes after an outage
	// ("" with a single server; see remote.Store.Node).
	Recovered func(node string)
	// Hook, when not nil, is told of each round trip to Redis as it
	// starts and ends (see Hook).
	Hook Hook
	// Pools, when not nil, keeps the regional pools of worldwide policies
	// filled: it is told of every decision of a pooled policy
	// (remote.Policy.Global).
	Pools Pools
}

// Pools keeps regional pools filled from the global Redis (tier's
// regional tier). The door tells it of the decisions of pooled policies.
type Pools interface {
	// Answered is told of a decision d of key under the pooled policy p
	// (granted or denied), to refill the pool, in the background, when it
	// runs low. It must not block.
	Answered(p *remote.Policy, key string, d remote.Decision)
	// Refill refills the pool of key under p now, within ctx, after a
	// pool that held fewer than n units denied a decision of n that the
	// worldwide limit may admit: it reports whether the decision is worth
	// making again, and if not, when it may be (retry; 0: not known).
	Refill(ctx context.Context, p *remote.Policy, key string, n int64) (again bool, retry time.Duration)
}

// Door makes every Redis call of one Limiter. Create it with New; it is
// safe for concurrent use.
type Door struct {
	store   *remote.Store
	clock   clock.Clock
	base    time.Time // the breakers' time is ns since base
	timeout time.Duration
	guard   bool
	// guards tracks the goroutines of guarded calls and of outage charges;
	// Close waits for them until its context ends.
	guards guard.Group
	// closed is set by Close (see Permit).
	closed atomic.Bool
	// breaker stands in front of Redis; with a Redis Cluster (sharded), of
	// the keys whose server cannot be named, and breakers (server address
	// -> *breaker) in front of each master, so that a master that fails
	// takes down only its own keys.
	breaker   *breaker
	breakers  sync.Map
	sharded   bool
	note      *notifier // nil: nobody observes
	recovered func(node string)
	hook      Hook  // nil: none
	pools     Pools // nil: none
	// inFlight is how many exact decisions to one server go at once
	// before more wait to go together (see combiner).
	inFlight int
	// single counts the calls of Acquire, Refund and Charge, batched those
	// of Batch.
	single, batched counters
}

// New returns a Door to cfg.Store.
func New(cfg Config) *Door {
	d := &Door{
		store: cfg.Store, clock: cfg.Clock, base: cfg.Clock.Now(), timeout: cfg.Timeout, guard: cfg.Guard,
		sharded: cfg.Store.Sharded(), note: newNotifier(cfg.Events), recovered: cfg.Recovered, hook: cfg.Hook, pools: cfg.Pools,
		inFlight: inFlight(),
	}
	d.breaker = d.newBreaker("")
	return d
}

// Bound returns ctx limited to the Redis timeout, unless ctx's own
// deadline is sooner (then ctx itself, and no timer is made): the
// deadline of a call made for a caller, whose wait Overtime may extend.
func (d *Door) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	// The wall clock, not d.clock: a context's deadline is on it.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d.timeout {
		return ctx, func() {}
	}
	c, cancel := context.WithTimeout(ctx, d.timeout)
	if d.guard {
		// A guarded client may ignore deadlines: a call of its may not
		// end, and nothing waits for one past the timeout (Overtime).
		return c, cancel
	}
	return &boundCtx{Context: c, parent: ctx}, cancel
}

// boundCtx is a context Bound made: parent with the Redis timeout, which
// Overtime tells apart from parent's own end.
type boundCtx struct {
	context.Context
	parent context.Context
}

// Overtime returns, for ctx made by Bound that ended by the Redis timeout
// while the context it bounds did not, that context, and ctx's deadline:
// a wait for the answer to a Redis call already on its way (a lease in
// flight) may go on under it for as long as this process is late in
// seeing Redis's answers (the caller measures that), since a call ends by
// itself, bounded by its own deadline. ok is false otherwise: ctx did not
// end by the door's timeout, or a deadline of the caller's came first, or
// the client is guarded.
//
// Past the timeout, such a call has either failed, and ends at once, or
// been answered in time and waits for a CPU in this process: when every P
// runs a goroutine that does not block, a goroutine the network woke (the
// answer's reader) waits in the global run queue, behind every goroutine
// preempted meanwhile, for hundreds of ms, while one its deadline's timer
// woke runs next on its P. Taking Redis for busy then would deny what the
// answer on its way admits.
func Overtime(ctx context.Context) (parent context.Context, deadline time.Time, ok bool) {
	b, ok := ctx.(*boundCtx)
	if !ok || !errors.Is(b.Err(), context.DeadlineExceeded) || b.parent.Err() != nil {
		return nil, time.Time{}, false
	}
	deadline, _ = b.Deadline()
	return b.parent, deadline, true
}

// begin returns ctx bounded as Bound bounds it, for one call to Redis, to
// the server named node (see Door.node; "" for any): a dial to it that fails
// (a refused connection, a name that does not resolve, a failed TLS
// handshake) meanwhile ends the call at once, and dialed gives that dial's
// error back as the call's. go-redis would retry the dial, with a backoff,
// until the deadline, and the call would end with the deadline's error.
// The caller ends the call with end, once it is over.
func (d *Door) begin(ctx context.Context, node string) *callCtx {
	// WithTimeout keeps ctx's own deadline when sooner, without a timer.
	c, cancel := context.WithTimeout(ctx, d.timeout)
	cc := &callCtx{Context: c, cancel: cancel, node: node, store: d.store}
	d.store.Watch(cc)
	return cc
}

// node names the server of key under p for begin, as its breaker does:
// with a Redis Cluster its master, once the client knows the cluster's
// layout (remote.Store.Addr); else "", any, since every dial of the client
// is to the one server.
func (d *Door) node(p *remote.Policy, key string) string {
	if !d.sharded {
		return ""
	}
	return d.store.Addr(p, key)
}

// callCtx is the context of one call to Redis (Door.begin), and its
// remote.DialWatcher: it keeps the error of the first dial to its server
// that failed while it ran, and ends then.
type callCtx struct {
	context.Context
	cancel context.CancelFunc
	node   string // the server called; "": any
	store  *remote.Store
	dial   atomic.Pointer[error]
}

var _ remote.DialWatcher = (*callCtx)(nil)

// DialFailed keeps err, if it is the first of the call's server, and
// ends the call.
func (c *callCtx) DialFailed(addr string, err error) {
	if c.node != "" && addr != c.node {
		return // another master of the cluster
	}
	c.dial.CompareAndSwap(nil, &err)
	c.cancel()
}

// end ends the call: it releases the context and stops watching dials.
func (c *callCtx) end() {
	c.store.Unwatch(c)
	c.cancel()
}

// dialed returns err, the error of the call, or, when a dial to its server
// failed and ended it, that dial's error in place of the end it caused.
func (c *callCtx) dialed(err error) error {
	if err == nil {
		return nil
	}
	if dial := c.dial.Load(); dial != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return *dial
	}
	return err
}

// Classify returns what err, the error of a Redis call made for a caller
// whose context is ctx, means to that caller: nil stays nil, ErrClosed
// stays itself, ctx's own error comes back unwrapped once ctx has ended
// (a timeout at ctx's own deadline, once past, too: see atDeadline), and
// anything else is Redis failing: an error wrapping ErrUnavailable and
// err. Only the last counts against Redis's health (Leave), and of it
// not a calendar window's remote.ErrClock.
func Classify(ctx context.Context, err error) error {
	switch {
	case err == nil, errors.Is(err, ErrClosed):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case atDeadline(ctx, err):
		return context.DeadlineExceeded
	case errors.Is(err, ErrUnavailable):
		return err // classified already: say it once
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// atDeadline reports whether err is a timeout and ctx's deadline has
// passed. go-redis gives a connection ctx's deadline, and a dial ctx's:
// they can fire a little before ctx's own timer marks ctx done, and a
// caller's own short deadline would read as Redis failing, and count
// against its breaker.
func atDeadline(ctx context.Context, err error) bool {
	dl, ok := ctx.Deadline()
	// The wall clock, not d.clock: a context's deadline is on it.
	return ok && !time.Now().Before(dl) &&
		(errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded))
}

// Node names the server that holds key's state under p (see
// remote.Store.Node), within ctx.
func (d *Door) Node(ctx context.Context, p *remote.Policy, key string) string {
	return d.store.Node(ctx, p, key)
}

// Sharded reports whether Node can name more than one server.
func (d *Door) Sharded() bool { return d.sharded }

// InFlight is how many exact decisions a Door lets go at once to one
// server before more wait to go together (see combiner).
func (d *Door) InFlight() int { return d.inFlight }

// Guarded reports whether a call's end at its context's deadline is the
// Door's (Config.Guard: it refunds a grant that arrives later) rather
// than the client's, which cuts the call and loses such a grant.
func (d *Door) Guarded() bool { return d.guard }

// Counts are what a Door counted of one kind of call.
type Counts struct {
	// RoundTrips counts round trips (a pipeline counts one, and so does
	// a refund of late grants); Errors the calls in them that failed.
	RoundTrips, Errors uint64
	// LateGranted counts the units granted to guarded calls after their
	// callers stopped waiting; LateRefunded those of them given back.
	LateGranted, LateRefunded uint64
}

// counters are Counts, updated atomically.
type counters struct {
	roundTrips, errors, lateGranted, lateRefunded atomic.Uint64
}

func (c *counters) load() Counts {
	return Counts{RoundTrips: c.roundTrips.Load(), Errors: c.errors.Load(),
		LateGranted: c.lateGranted.Load(), LateRefunded: c.lateRefunded.Load()}
}

// failed counts the errors among errs.
func (c *counters) failed(errs []error) {
	for _, err := range errs {
		if err != nil {
			c.errors.Add(1)
		}
	}
}

// Stats returns the counts of single calls (Acquire, Refund, Charge) and of
// batched ones (Batch: pipelines of leases and refunds).
func (d *Door) Stats() (single, batched Counts) {
	return d.single.load(), d.batched.load()
}

// Total returns the counts of every call, single and batched.
func (d *Door) Total() Counts {
	s, b := d.Stats()
	return Counts{RoundTrips: s.RoundTrips + b.RoundTrips, Errors: s.Errors + b.Errors,
		LateGranted: s.LateGranted + b.LateGranted, LateRefunded: s.LateRefunded + b.LateRefunded}
}

// Timeout returns the Redis timeout that bounds every call.
func (d *Door) Timeout() time.Duration { return d.timeout }

// Close makes every later guarded call and Charge fail with ErrClosed, and
// waits for the guarded calls still running until ctx ends: those left end
// at the client's own timeouts, and refund what they are granted late
// themselves. Idempotent.
func (d *Door) Close(ctx context.Context) {
	d.closed.Store(true)
	d.guards.Close(ctx)
}
