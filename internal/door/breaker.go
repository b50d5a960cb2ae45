package door

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// BreakerState is the state of the circuit breaker in front of Redis.
type BreakerState int32

// The breaker's states.
const (
	// BreakerClosed: Redis answers; every call goes to it.
	BreakerClosed BreakerState = iota
	// BreakerOpen: Redis failed repeatedly; no call goes to it until the
	// backoff has passed, and decisions come from the failure mode.
	BreakerOpen
	// BreakerHalfOpen: one call (the probe) is testing Redis; the others
	// are decided as while open.
	BreakerHalfOpen
)

// String returns "closed", "open", "half-open", or "unknown".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "unknown"
}

// MarshalText makes the state a word in JSON, expvar and logs, as String
// says it.
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Breaker tuning: it opens after breakerFailures failed calls in a row, and
// probes after a backoff that starts at breakerMinBackoff and doubles after
// every failed probe, up to breakerMaxBackoff.
const (
	breakerFailures   = 5
	breakerMinBackoff = 100 * time.Millisecond
	breakerMaxBackoff = 5 * time.Second
)

// A call that times out is Redis being busy, not failing, while the
// server answered another call within busyWindow, and either its answers
// had been slow (the mean of their times, a moving average of weight 1/8,
// at least 1/busySlow of the timeout: an overloaded Redis slows down
// before it times out) or fewer than breakerFailures calls have timed
// out since its last answer (a stall of the server or of this machine, a
// moment long, is no outage). A Redis that hangs or is cut off after
// quick answers is an outage from the next timeout on: it opens the
// breaker breakerFailures timeouts later.
const (
	busyWindow = time.Second
	busySlow   = 4
)

// ErrBusy is wrapped by the cause of a call that timed out on a server
// that answers other calls (it answered one within busyWindow): an
// overloaded Redis, not one that is gone. Such a call does not count
// against the breaker, and its request is denied for the timeout rather
// than decided by the failure mode (package tier).
var ErrBusy = errors.New("redis busy: it answers other calls, but not this one in time")

// busyError is the cause of a call that timed out on a busy server: it
// wraps ErrBusy and the call's error (which wraps ErrUnavailable).
type busyError struct{ err error }

func (e busyError) Error() string {
	return ErrUnavailable.Error() + ": " + ErrBusy.Error() + ": " + strings.TrimPrefix(e.err.Error(), ErrUnavailable.Error()+": ")
}

func (e busyError) Unwrap() []error { return []error{ErrBusy, e.err} }

// timedOut reports whether err is a call's timeout (its deadline, a
// socket's read or write deadline).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// errBreakerOpen is the cause of a decision made without calling Redis
// because the breaker is open.
var errBreakerOpen = errors.New("circuit breaker open")

// openError is the error of a call the open breaker refused: it wraps
// ErrUnavailable, errBreakerOpen and the failure that opened the breaker
// (last, itself wrapping ErrUnavailable), and says each once, on one line.
type openError struct{ last error }

func (e openError) Error() string {
	if e.last == nil {
		return ErrUnavailable.Error() + ": " + errBreakerOpen.Error()
	}
	cause := strings.TrimPrefix(e.last.Error(), ErrUnavailable.Error()+": ")
	return ErrUnavailable.Error() + ": " + errBreakerOpen.Error() + " after: " + cause
}

func (e openError) Unwrap() []error {
	if e.last == nil {
		return []error{ErrUnavailable, errBreakerOpen}
	}
	return []error{ErrUnavailable, errBreakerOpen, e.last}
}

// breaker stops calls to a failing Redis. Callers ask allow before a call
// and report its outcome with success, failure or abort (the Door does,
// in Enter and Leave). The closed state is one atomic load; transitions
// take a mutex (rare). Times are ns on the Door's clock. Its events (its
// changes, the first failure of a run) are posted under mu, so in the
// order they happen, and delivered once mu is released.
type breaker struct {
	state atomic.Int32 // a BreakerState
	opens atomic.Uint64
	fails atomic.Int32 // consecutive failures; written under mu
	// answered is when a call through the breaker was last answered (ns
	// on the Door's clock; 0: none yet), and took, the moving average of
	// the answered calls' times (ns), for Leave's reading of a timeout.
	answered, took atomic.Int64
	// stalled counts the calls that timed out since the last answer.
	stalled atomic.Int32
	mu      sync.Mutex
	backoff time.Duration // requires mu held
	probeAt int64         // requires mu held: when open, no probe before this
	lastErr error         // requires mu held
	node    string        // the server's name (see remote.Store.Node)
	note    *notifier     // nil: nobody observes
	// checked is set once the servers behind the breaker have been read
	// for their eviction policy (checkEviction), or need not be; checks,
	// the readings that failed (they are tried again, up to
	// evictionTries in all).
	checked atomic.Bool
	checks  atomic.Int32
	// closed is called (on its own goroutine) after each close that ends an
	// outage.
	closed func()
	// combine puts together the exact decisions to the servers behind the
	// breaker that come while others are on their way (Door.decide).
	combine combiner
}

func newBreaker(node string, note *notifier, closed func()) *breaker {
	return &breaker{backoff: breakerMinBackoff, node: node, note: note, closed: closed}
}

// State returns the current state.
func (b *breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// allow reports whether a call may go to Redis at now; probe is true when
// this call is the one that tests a Redis the breaker had given up on. When
// not allowed, cause says why.
func (b *breaker) allow(now int64) (ok, probe bool, cause error) {
	if b.State() == BreakerClosed {
		return true, false, nil
	}
	b.mu.Lock()
	switch b.State() {
	case BreakerClosed:
		ok = true
	case BreakerOpen:
		if now >= b.probeAt {
			b.setLocked(BreakerHalfOpen, nil)
			ok, probe = true, true
		}
	}
	if !ok {
		cause = openError{b.lastErr}
	}
	b.mu.Unlock()
	if probe { // changed the state: the rest of the time, while open, no event
		b.note.deliver()
	}
	return ok, probe, cause
}

// success records a call that Redis answered.
func (b *breaker) success() {
	if b.State() == BreakerClosed && b.fails.Load() == 0 {
		return // the common case: no lock
	}
	b.mu.Lock()
	b.fails.Store(0)
	b.lastErr = nil
	if b.State() != BreakerClosed {
		b.backoff = breakerMinBackoff
		b.setLocked(BreakerClosed, nil)
		if b.closed != nil {
			go b.closed()
		}
	}
	b.mu.Unlock()
	b.note.deliver()
}

// failure records a failed call at now: a probe's failure reopens the
// breaker with a doubled backoff; enough failures in a row open it. The
// first failure of a run is an event of its own.
func (b *breaker) failure(now int64, probe bool, err error) {
	b.mu.Lock()
	b.lastErr = err
	switch {
	case probe:
		b.backoff = min(2*b.backoff, breakerMaxBackoff)
		b.probeAt = now + int64(b.backoff)
		b.setLocked(BreakerOpen, err)
	case b.State() == BreakerClosed:
		fails := b.fails.Add(1)
		if fails == 1 {
			b.note.post(Event{Kind: EventFirstFailure, Breaker: BreakerClosed, Err: err, Node: b.node})
		}
		if fails >= breakerFailures {
			b.probeAt = now + int64(b.backoff)
			b.setLocked(BreakerOpen, err)
		}
	}
	b.mu.Unlock()
	b.note.deliver()
}

// abort records a probe that ended for the caller's own reasons (its
// context): the next call may probe at once.
func (b *breaker) abort(now int64) {
	b.mu.Lock()
	if b.State() == BreakerHalfOpen {
		b.probeAt = now
		b.setLocked(BreakerOpen, b.lastErr)
	}
	b.mu.Unlock()
	b.note.deliver()
}

// setLocked changes the state, counts an opening, and posts the change
// with its cause: opens counts what the observer hears as open. Requires
// mu held.
func (b *breaker) setLocked(s BreakerState, cause error) {
	if BreakerState(b.state.Swap(int32(s))) == s {
		return
	}
	if s == BreakerOpen {
		b.opens.Add(1)
	}
	b.note.post(Event{Kind: EventBreaker, Breaker: s, Err: cause, Node: b.node})
}

// newBreaker returns a breaker for the server named node; when it closes
// after an outage, the Door's owner hears of it (Config.Recovered). Its
// servers' eviction policy is read after its first success, when events
// are observed and the breaker stands for servers that can be named.
func (d *Door) newBreaker(node string) *breaker {
	var closed func()
	if d.recovered != nil {
		closed = func() { d.recovered(node) }
	}
	b := newBreaker(node, d.note, closed)
	if d.note == nil || d.note.events == nil || d.sharded && node == "" {
		b.checked.Store(true)
	}
	return b
}

// Pass lets one call through the breaker of a key's server: Enter gives
// it, and Leave takes the call's outcome.
type Pass struct {
	b     *breaker
	probe bool      // the call tests a server the breaker had given up on
	start time.Time // when the call entered, on the wall clock: the timeout's
}

// Enter asks the breaker of the server that holds key's state under p
// whether a call may go to Redis now. When it may not, the error says why
// (the breaker is open, and its last failure), and the caller decides
// without Redis; when it may, the caller reports the call's outcome with
// Leave. With a Redis Cluster, naming the server may load the cluster's
// layout (once, before the first call), within the timeout.
func (d *Door) Enter(p *remote.Policy, key string) (Pass, error) {
	return d.enter(func(ctx context.Context) string { return d.store.Node(ctx, p, key) })
}

// enterKey is Enter for a call on one Redis key, named whole (a
// concurrency limit's permits): the breaker of the server holding it.
func (d *Door) enterKey(redisKey string) (Pass, error) {
	return d.enter(func(ctx context.Context) string { return d.store.NodeOf(ctx, redisKey) })
}

// enter is Enter through the breaker of the server node names (with a
// Redis Cluster; else the one breaker).
func (d *Door) enter(node func(context.Context) string) (Pass, error) {
	b := d.breaker
	if d.sharded {
		ctx, cancel := d.Bound(context.Background())
		b = d.breakerAt(node(ctx))
		cancel()
	}
	now := d.nanos()
	ok, probe, cause := b.allow(now)
	if !ok {
		return Pass{}, cause
	}
	return Pass{b, probe, time.Now()}, nil
}

// Leave reports the outcome of the call made with pass: err is its error,
// as Classify returns it. It returns the cause of a Redis failure (err,
// which wraps ErrUnavailable), or nil: the call succeeded, or ended for the
// caller's own reasons (its context, or ErrClosed). A call that timed out
// while its server answers others (see busyWindow; not a probe) is Redis
// being busy: its cause wraps ErrBusy as well, and it does not count
// against the breaker: an overloaded Redis slows its callers, it does not
// send a fleet to the failure mode. A calendar window that Redis's time
// is not in (remote.ErrClock) is returned as a cause, for the caller's
// failure mode to decide that call, but counts as Redis answering: it is
// this host's clock, and one policy's quota must not open the breaker of
// every policy on the server.
func (d *Door) Leave(pass Pass, err error) error {
	b := pass.b
	switch {
	case err == nil:
		now := d.nanos()
		b.answered.Store(max(1, now))
		b.stalled.Store(0)
		// A call that took longer than the timeout and still succeeded
		// was seen late by this process (Overtime), or queued behind
		// others in the combiner: its time is not Redis's, and is left
		// out. (Measured on the wall clock, as the timeout is, not on
		// d.clock, which a test may move.)
		if took, t := b.took.Load(), int64(time.Since(pass.start)); t <= int64(d.timeout) { // (a lost update of the average is harmless)
			b.took.Store(took + (t-took)/8)
		}
		b.success()
		if !b.checked.Load() {
			d.checkEviction(b) // once: the first time Redis answers
		}
		return nil
	case errors.Is(err, remote.ErrClock):
		b.answered.Store(max(1, d.nanos()))
		b.stalled.Store(0)
		b.success()
		return err
	case errors.Is(err, ErrUnavailable):
		now := d.nanos()
		if at := b.answered.Load(); !pass.probe && at > 0 && now-at < int64(busyWindow) && timedOut(err) {
			stalled := b.stalled.Add(1)
			if stalled <= breakerFailures || b.took.Load() >= int64(d.timeout)/busySlow {
				cause := busyError{err}
				if stalled == 1 {
					// The first call of a run to time out is told, as
					// a failure's first is: Redis is slow.
					b.note.post(Event{Kind: EventFirstFailure, Breaker: b.State(), Err: cause, Node: b.node})
					b.note.deliver()
				}
				return cause
			}
		}
		b.failure(now, pass.probe, err)
		return err
	default:
		if pass.probe {
			b.abort(d.nanos())
		}
		return nil
	}
}

// Ready reports whether the breaker of the server that holds key's state
// under p is closed: for a call in the background (a prefetch), which
// neither probes a failing server nor goes through an open breaker. It
// makes no timer: the key was leased before, so a cluster's layout is
// loaded.
func (d *Door) Ready(p *remote.Policy, key string) bool {
	return d.breakerOf(context.Background(), p, key).State() == BreakerClosed
}

// Breakers returns the breakers' state, the worst of them (open, then
// half-open, then closed), and the times they opened, all together.
func (d *Door) Breakers() (state BreakerState, opens uint64) {
	d.eachBreaker(func(b *breaker) {
		if bs := b.State(); bs == BreakerOpen || bs == BreakerHalfOpen && state == BreakerClosed {
			state = bs
		}
		opens += b.opens.Load()
	})
	return state, opens
}

// breakerOf returns the breaker in front of the server that holds key's
// state under p; ctx bounds only a load of the cluster's layout.
func (d *Door) breakerOf(ctx context.Context, p *remote.Policy, key string) *breaker {
	if !d.sharded {
		return d.breaker
	}
	return d.breakerAt(d.store.Node(ctx, p, key))
}

// serverOf is breakerOf for a call with no context of its own: a
// cluster's layout is loaded within the timeout.
func (d *Door) serverOf(p *remote.Policy, key string) *breaker {
	if !d.sharded {
		return d.breaker
	}
	ctx, cancel := d.Bound(context.Background())
	defer cancel()
	return d.breakerOf(ctx, p, key)
}

// breakerAt returns node's breaker, made when first asked for; the
// general one for a node that cannot be named ("").
func (d *Door) breakerAt(node string) *breaker {
	if node == "" {
		return d.breaker
	}
	if b, ok := d.breakers.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := d.breakers.LoadOrStore(node, d.newBreaker(node))
	return b.(*breaker)
}

// nanos is the breakers' time: ns on the Door's clock since New.
func (d *Door) nanos() int64 { return int64(d.clock.Now().Sub(d.base)) }

// eachBreaker calls f with every breaker.
func (d *Door) eachBreaker(f func(*breaker)) {
	f(d.breaker)
	d.breakers.Range(func(_, b any) bool {
		f(b.(*breaker))
		return true
	})
}
