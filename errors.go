package ratelease

import (
	"errors"

	"github.com/ratelease/ratelease/tier"
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
	ErrInvalidPolicy = tier.ErrInvalidPolicy
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
	// ErrUnavailable: with WithFailureMode(FailClosed), Redis did not answer
	// within the Redis timeout, failed, or the circuit breaker is open. The
	// error wraps the cause as well (found with errors.Is or errors.As:
	// syscall.ECONNREFUSED, a *net.DNSError, Redis's reply as a redis.Error),
	// and says it naming the server's address. The other failure modes
	// decide instead (Source Fallback).
	ErrUnavailable = tier.ErrUnavailable
	// ErrClosed: the Limiter was closed.
	ErrClosed = tier.ErrClosed
	// ErrEvictionPolicy is never returned by a call: it is wrapped by the
	// Err of an EventWarning (WithEvents) about a Redis server whose
	// maxmemory-policy may evict limiter keys: any but noeviction,
	// volatile-* included, since every limiter key carries a TTL. An
	// evicted key admits a whole new limit at once.
	ErrEvictionPolicy = tier.ErrEvictionPolicy
)
