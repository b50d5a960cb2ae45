package ratelease

import (
	"errors"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// The errors of ratelease, matched with errors.Is. A denial is never an
// error: it is a Result with Allowed false. Errors of the caller's context
// are returned unwrapped (context.Canceled, context.DeadlineExceeded).
var (
	// ErrInvalidLimit: a Limit's values cannot be enforced (see NewPolicy).
	ErrInvalidLimit = errors.New("ratelease: invalid limit")
	// ErrInvalidPolicy: a nil or zero *Policy, a policy name that cannot be
	// part of a Redis key, or a policy that a Limiter may no longer use: a
	// policy of the same name with other limits, made later, redefined it
	// in that Limiter (see "Limits changed while running" in
	// docs/operations.md).
	ErrInvalidPolicy = errors.New("ratelease: invalid policy")
	// ErrInvalidKey: an empty key, or one longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("ratelease: invalid key")
	// ErrInvalidN: a number of units that is zero or negative.
	ErrInvalidN = errors.New("ratelease: n must be positive")
	// ErrExceedsCapacity: n is more than the policy's smallest capacity
	// (Burst, or Rate for windows; at most MaxLogUnits with a
	// SlidingWindowLog), so it could never be admitted.
	ErrExceedsCapacity = errors.New("ratelease: n exceeds the policy's capacity")
	// ErrInvalidOption: New was given a nil client or an option with an
	// invalid value.
	ErrInvalidOption = errors.New("ratelease: invalid option")
	// ErrInvalidDuration: a duration out of its range, such as a Block's
	// (1ms to MaxBlock).
	ErrInvalidDuration = errors.New("ratelease: invalid duration")
	// ErrUnavailable: Redis did not answer within the Redis timeout,
	// failed, or the circuit breaker is open. A decision (Allow, Wait,
	// AllowAtMost) returns it only with WithFailureMode(FailClosed): the
	// other failure modes decide instead (SourceFallback). Peek, Reset,
	// Refund, Block, Unblock and Ping, which need Redis's own word, return
	// it whatever the failure mode. The error wraps the cause as well
	// (found with errors.Is or errors.As: syscall.ECONNREFUSED, a
	// *net.DNSError, Redis's reply as a redis.Error), and says it naming
	// the server's address.
	ErrUnavailable = errors.New("ratelease: redis unavailable")
	// ErrClosed: the Limiter was closed.
	ErrClosed = errors.New("ratelease: limiter closed")
	// ErrPermitLost: a Permit's Release or Extend found it no longer held:
	// its TTL ended first (it counted as released from then on), or it
	// was released already.
	ErrPermitLost = errors.New("ratelease: permit no longer held")
	// ErrEvictionPolicy is never returned by a call: it is wrapped by the
	// Err of an EventWarning (WithEvents) about a Redis server whose
	// maxmemory-policy may evict limiter keys: any but noeviction,
	// volatile-* included, since every limiter key carries a TTL. An
	// evicted key admits a whole new limit at once.
	ErrEvictionPolicy = errors.New("ratelease: redis may evict limiter keys")
)

// engineSentinels pairs each sentinel that the engine (package tier) has
// a word for with the root's own, of the same message.
var engineSentinels = [...]struct{ root, engine error }{
	{ErrInvalidPolicy, remote.ErrInvalidPolicy},
	{ErrUnavailable, door.ErrUnavailable},
	{ErrClosed, door.ErrClosed},
	{ErrEvictionPolicy, door.ErrEvictionPolicy},
}

// rootErr returns err, an error of the engine, in the root's words: when
// it matches one of the engine's sentinels, an error that matches the
// root's as well, says the same and wraps err, so that the causes err
// wraps (syscall.ECONNREFUSED, a redis.Error, ...) are still found. Every
// error from the engine passes through it on its way to the caller: on
// error paths only, never on a decision's.
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

// engineError is an error of the engine that matches the root's sentinels
// for the engine's that it wraps.
type engineError struct{ err error }

func (e *engineError) Error() string { return e.err.Error() }

func (e *engineError) Unwrap() error { return e.err }

// Is reports whether target is a root sentinel whose engine counterpart
// err wraps.
func (e *engineError) Is(target error) bool {
	for _, s := range engineSentinels {
		if target == s.root {
			return errors.Is(e.err, s.engine)
		}
	}
	return false
}
