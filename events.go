package ratelease

import (
	"fmt"

	"github.com/ratelease/ratelease/internal/door"
)

// Event is something that happened between a Limiter and Redis, told with
// its cause to the function given to WithEvents. The zero value is no
// event.
type Event struct {
	// Kind says what happened. Kinds may be added in later releases: an
	// observer ignores those it does not know.
	Kind EventKind
	// Breaker is the state of Node's circuit breaker after the event: the
	// new state for EventBreaker, BreakerClosed for EventFirstFailure and
	// EventWarning.
	Breaker BreakerState
	// Err is the event's cause. For EventFirstFailure, the failure: an
	// error wrapping ErrUnavailable and the cause, naming the server's
	// address (a dial's error: connection refused, a lookup that failed, a
	// TLS handshake's; Redis's reply: WRONGPASS, NOAUTH, NOPERM, READONLY
	// from a replica, OOM from a full Redis; context deadline exceeded for
	// a call that took longer than the Redis timeout, ...). For
	// EventBreaker, when the breaker opens, the failure that opened it (the
	// last of a run, or the failed probe's); nil for its other changes. For
	// EventWarning, what is wrong: errors.Is(Err, ErrEvictionPolicy).
	Err error
	// Node names the server: with a Redis Cluster the master's address
	// (each master has its own breaker); with a Ring the shard's address,
	// for a warning; else "".
	Node string
}

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of events.
const (
	// EventFirstFailure: a Redis call failed after a healthy period: the
	// breaker is closed and the calls since the last failure succeeded (or
	// there were none). The failures after it in the same run are not
	// events; the fifth in a row opens the breaker, which is. A failure
	// after a success starts a new run.
	EventFirstFailure EventKind = iota + 1
	// EventBreaker: the circuit breaker changed state (to Event.Breaker);
	// when it opens, Event.Err is why.
	EventBreaker
	// EventWarning: a Redis server is configured in a way that endangers
	// the limits. The only one so far: a maxmemory-policy that may evict
	// limiter keys (ErrEvictionPolicy), reported once per server.
	EventWarning
)

// String returns "first-failure", "breaker", "warning", or "unknown".
func (k EventKind) String() string { return door.EventKind(k).String() }

// MarshalText makes the kind a word in JSON and logs, as String says it.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// WithEvents calls f with each Event, so that what goes wrong with Redis is
// seen with its cause, not only counted (Stats): the first failure of a run
// of failed Redis calls (EventFirstFailure), each change of the circuit
// breaker, an opening with the failure that opened it (EventBreaker), and
// warnings about Redis's configuration (EventWarning).
//
// For the warning, the Limiter reads each server's maxmemory-policy with
// CONFIG GET, once, in the background, after its first call to that server
// succeeds (New never waits for Redis); a policy other than noeviction is
// reported with ErrEvictionPolicy. A server that refuses CONFIG (an ACL
// user without +config|get, a managed Redis that does not offer it) says
// nothing, and the refusal is not counted in Stats.Errors. Without
// WithEvents, nothing is read.
//
// f is called in the order the events happen, never concurrently, holding
// no lock of the Limiter, on a goroutine that was calling Redis, often a
// request's, which waits for f: f must return quickly (log, count, or hand
// the event on without blocking). It may call the Limiter. With
// WithObserver as well, both are called. Of several WithEvents, the last
// wins. A nil f is an error wrapping ErrInvalidOption.
func WithEvents(f func(Event)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: nil events function", ErrInvalidOption)
		}
		c.events = f
		return nil
	})
}

// observer returns f for the engine, taking its states; nil for nil.
func observer(f func(BreakerState)) func(door.BreakerState) {
	if f == nil {
		return nil
	}
	return func(s door.BreakerState) { f(BreakerState(s)) }
}

// events returns f for the engine, converting each of its events; nil for
// nil.
func events(f func(Event)) func(door.Event) {
	if f == nil {
		return nil
	}
	return func(e door.Event) {
		f(Event{Kind: EventKind(e.Kind), Breaker: BreakerState(e.Breaker), Err: rootErr(e.Err), Node: e.Node})
	}
}
