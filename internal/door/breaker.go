package door

import (
	"context"
	"errors"
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
// take a mutex (rare). Times are ns on the Door's clock.
type breaker struct {
	state    atomic.Int32 // a BreakerState
	opens    atomic.Uint64
	fails    atomic.Int32 // consecutive failures; written under mu
	mu       sync.Mutex
	backoff  time.Duration // requires mu held
	probeAt  int64         // requires mu held: when open, no probe before this
	lastErr  error         // requires mu held
	onChange func(BreakerState)
	// closed is called (on its own goroutine) after each close that ends an
	// outage.
	closed func()
}

func newBreaker(onChange func(BreakerState), closed func()) *breaker {
	return &breaker{backoff: breakerMinBackoff, onChange: onChange, closed: closed}
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
	defer b.mu.Unlock()
	switch b.State() {
	case BreakerClosed:
		return true, false, nil
	case BreakerOpen:
		if now >= b.probeAt {
			b.setLocked(BreakerHalfOpen)
			return true, true, nil
		}
	}
	return false, false, openError{b.lastErr}
}

// success records a call that Redis answered.
func (b *breaker) success() {
	if b.State() == BreakerClosed && b.fails.Load() == 0 {
		return // the common case: no lock
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails.Store(0)
	b.lastErr = nil
	if b.State() != BreakerClosed {
		b.backoff = breakerMinBackoff
		b.setLocked(BreakerClosed)
		if b.closed != nil {
			go b.closed()
		}
	}
}

// failure records a failed call at now: a probe's failure reopens the
// breaker with a doubled backoff; enough failures in a row open it.
func (b *breaker) failure(now int64, probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastErr = err
	switch {
	case probe:
		b.backoff = min(2*b.backoff, breakerMaxBackoff)
		b.probeAt = now + int64(b.backoff)
		b.setLocked(BreakerOpen)
	case b.State() == BreakerClosed:
		if b.fails.Add(1) >= breakerFailures {
			b.probeAt = now + int64(b.backoff)
			b.setLocked(BreakerOpen)
		}
	}
}

// abort records a probe that ended for the caller's own reasons (its
// context): the next call may probe at once.
func (b *breaker) abort(now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.State() == BreakerHalfOpen {
		b.probeAt = now
		b.setLocked(BreakerOpen)
	}
}

// setLocked changes the state, counts an opening, and tells the observer:
// opens counts what the observer hears as open. Requires mu held.
func (b *breaker) setLocked(s BreakerState) {
	if BreakerState(b.state.Swap(int32(s))) == s {
		return
	}
	if s == BreakerOpen {
		b.opens.Add(1)
	}
	if b.onChange != nil {
		b.onChange(s)
	}
}

// newBreaker returns a breaker for the server named node; when it closes
// after an outage, the Door's owner hears of it (Config.Recovered).
func (d *Door) newBreaker(node string) *breaker {
	var closed func()
	if d.recovered != nil {
		closed = func() { d.recovered(node) }
	}
	return newBreaker(d.observer, closed)
}

// Pass lets one call through the breaker of a key's server: Enter gives
// it, and Leave takes the call's outcome.
type Pass struct {
	b     *breaker
	probe bool // the call tests a server the breaker had given up on
}

// Enter asks the breaker of the server that holds key's state under p
// whether a call may go to Redis now. When it may not, the error says why
// (the breaker is open, and its last failure), and the caller decides
// without Redis; when it may, the caller reports the call's outcome with
// Leave. With a Redis Cluster, naming the server may load the cluster's
// layout (once, before the first call), within the timeout.
func (d *Door) Enter(p *remote.Policy, key string) (Pass, error) {
	b := d.breaker
	if d.sharded {
		ctx, cancel := d.Bound(context.Background())
		b = d.breakerOf(ctx, p, key)
		cancel()
	}
	ok, probe, cause := b.allow(d.nanos())
	if !ok {
		return Pass{}, cause
	}
	return Pass{b, probe}, nil
}

// Leave reports the outcome of the call made with pass: err is its error,
// as Classify returns it. It returns the cause of a Redis failure (err,
// which wraps ErrUnavailable), or nil: the call succeeded, or ended for the
// caller's own reasons (its context, or ErrClosed).
func (d *Door) Leave(pass Pass, err error) error {
	b := pass.b
	switch {
	case err == nil:
		b.success()
		return nil
	case errors.Is(err, ErrUnavailable):
		b.failure(d.nanos(), pass.probe, err)
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
	node := d.store.Node(ctx, p, key)
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
