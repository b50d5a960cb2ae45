package tier

import (
	"context"
	"errors"
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

// breaker stops calls to a failing Redis. Callers ask allow before a call
// and report its outcome with success, failure or abort. The closed state
// is one atomic load; transitions take a mutex (rare). Times are ns on the
// engine's clock.
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
	return false, false, errors.Join(errBreakerOpen, b.lastErr)
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
			b.opens.Add(1)
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

// setLocked changes the state and tells the observer. Requires mu held.
func (b *breaker) setLocked(s BreakerState) {
	if BreakerState(b.state.Swap(int32(s))) != s && b.onChange != nil {
		b.onChange(s)
	}
}

// newBreaker returns a breaker for the server named node; when it closes
// after an outage, what the fallback admitted for that server's keys is
// charged to it.
func (e *Engine) newBreaker(node string) *breaker {
	return newBreaker(e.observer, func() { e.chargeOutage(node) })
}

// breakerFor returns the breaker in front of the server that holds key's
// state under p. With a cluster, naming the server may load the cluster's
// layout (once, before the first call): that is bounded by the timeout.
func (e *Engine) breakerFor(p *remote.Policy, key string) *breaker {
	if !e.sharded {
		return e.breaker
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	return e.breakerOf(ctx, p, key)
}

// breakerOf is breakerFor within ctx, which bounds only a load of the
// cluster's layout.
func (e *Engine) breakerOf(ctx context.Context, p *remote.Policy, key string) *breaker {
	if !e.sharded {
		return e.breaker
	}
	node := e.store.Node(ctx, p, key)
	if node == "" {
		return e.breaker
	}
	if b, ok := e.breakers.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := e.breakers.LoadOrStore(node, e.newBreaker(node))
	return b.(*breaker)
}

// nanos is the breaker's time: ns on the engine's clock since New.
func (e *Engine) nanos() int64 { return int64(e.clock.Now().Sub(e.base)) }

// eachBreaker calls f with every breaker.
func (e *Engine) eachBreaker(f func(*breaker)) {
	f(e.breaker)
	e.breakers.Range(func(_, b any) bool {
		f(b.(*breaker))
		return true
	})
}
