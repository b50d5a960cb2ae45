package ratelease

import (
	"errors"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// The errors of ratelease, matched with errors.Is. A denial is never an
// error: it is a Result with Allowed false. Errors of the caller's context
// are returned unwrapped.
var (
	// ErrInvalidLimit: a Limit's values cannot be enforced (see NewPolicy).
	ErrInvalidLimit = errors.New("ratelease: invalid limit")
	// ErrInvalidPolicy: a nil or zero Policy or Concurrency, a name that
	// cannot be part of a Redis key, or a policy a later one of the same
	// name redefined in this Limiter.
	ErrInvalidPolicy = errors.New("ratelease: invalid policy")
	// ErrInvalidKey: an empty key, or one longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("ratelease: invalid key")
	// ErrInvalidN: a number of units that is zero or negative.
	ErrInvalidN = errors.New("ratelease: n must be positive")
	// ErrExceedsCapacity: n above the policy's Capacity: never admitted.
	ErrExceedsCapacity = errors.New("ratelease: n exceeds the policy's capacity")
	// ErrInvalidOption: New was given a nil client or an invalid option.
	ErrInvalidOption = errors.New("ratelease: invalid option")
	// ErrInvalidDuration: a Block's or a permit's TTL out of its range.
	ErrInvalidDuration = errors.New("ratelease: invalid duration")
	// ErrNilContext: a nil context.Context (use context.Background()).
	ErrNilContext = errors.New("ratelease: nil context")
	// ErrUnavailable: Redis failed, did not answer within the Redis
	// timeout, or the circuit breaker is open. Decisions return it only
	// with FailClosed; calls that need Redis's own word (Peek, Reset,
	// Refund, Charge, Block, Unblock, Ping) whatever the failure mode. It
	// wraps the cause (a *net.OpError, Redis's redis.Error, ...).
	ErrUnavailable = errors.New("ratelease: redis unavailable")
	// ErrClosed: the Limiter was closed.
	ErrClosed = errors.New("ratelease: limiter closed")
	// ErrPermitLost: a Permit's Release or Extend found it no longer held.
	ErrPermitLost = errors.New("ratelease: permit no longer held")
	// ErrEvictionPolicy is wrapped by the Err of an EventWarning about a
	// Redis whose maxmemory-policy may evict limiter keys: an evicted key
	// admits a whole new limit at once.
	ErrEvictionPolicy = errors.New("ratelease: redis may evict limiter keys")
)

// engineSentinels pairs the engine's sentinels with the root's.
var engineSentinels = [...]struct{ root, engine error }{
	{ErrInvalidPolicy, remote.ErrInvalidPolicy},
	{ErrUnavailable, door.ErrUnavailable},
	{ErrClosed, door.ErrClosed},
	{ErrEvictionPolicy, door.ErrEvictionPolicy},
}

// rootErr returns an error of the engine in the root's words: one that
// also matches the root's sentinel for each of the engine's it wraps.
func rootErr(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range engineSentinels {
		if errors.Is(err, s.engine) {
			return &engineError{err: err}
		}
	}
	return err
}

// engineError matches the root's sentinels for the engine's it wraps.
type engineError struct{ err error }

func (e *engineError) Error() string { return e.err.Error() }

func (e *engineError) Unwrap() error { return e.err }

// Is reports whether target is a root sentinel whose engine's err wraps.
func (e *engineError) Is(target error) bool {
	for _, s := range engineSentinels {
		if target == s.root {
			return errors.Is(e.err, s.engine)
		}
	}
	return false
}
