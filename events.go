package ratelease

import (
	"fmt"

	"github.com/ratelease/ratelease/internal/door"
)

// Event is something that happened between a Limiter and Redis, told with
// its cause to the function given to WithEvents. The zero value is no
// event.
type Event struct {
	// Kind says what happened; ignore kinds you do not know.
	Kind EventKind
	// Breaker is the state of Node's circuit breaker after the event.
	Breaker BreakerState
	// Err is the cause: for EventFirstFailure the failure (wrapping
	// ErrUnavailable and Redis's or the network's error, naming the
	// server); for EventBreaker opening, the failure that opened it, else
	// nil; for EventWarning, what is wrong (ErrEvictionPolicy).
	Err error
	// Node names the server with a Redis Cluster or a Ring; else "".
	Node string
}

// EventKind says what an Event reports.
type EventKind string

// The kinds of events.
const (
	// EventFirstFailure: a Redis call failed after a healthy period; the
	// failures after it in the same run are not events.
	EventFirstFailure EventKind = "first-failure"
	// EventBreaker: the circuit breaker changed state (to Event.Breaker);
	// when it opens, Event.Err is why.
	EventBreaker EventKind = "breaker"
	// EventWarning: a Redis server is configured in a way that endangers
	// the limits (ErrEvictionPolicy), told once per server.
	EventWarning EventKind = "warning"
)

// WithEvents calls f with each Event: the first failure of a run of failed
// Redis calls, each change of the circuit breaker, and warnings about
// Redis's configuration (for which the Limiter reads each server's
// maxmemory-policy once, in the background; a server that refuses CONFIG
// says nothing). f is called in order, never concurrently, holding no
// lock, often on a request's goroutine: it must return quickly. A nil f is
// an error wrapping ErrInvalidOption.
func WithEvents(f func(Event)) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: nil events function", ErrInvalidOption)
		}
		c.events = f
		return nil
	})
}

// events returns f for the engine, converting each of its events; nil for
// nil.
func events(f func(Event)) func(door.Event) {
	if f == nil {
		return nil
	}
	return func(e door.Event) {
		f(Event{Kind: EventKind(e.Kind.String()), Breaker: breakerState(e.Breaker), Err: rootErr(e.Err), Node: e.Node})
	}
}
