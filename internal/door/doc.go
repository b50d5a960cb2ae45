// Package door is the one way from a Limiter to Redis: every Redis call of
// packages tier and sync goes through the Limiter's Door.
//
// A Door owns, for one Limiter:
//
//   - the Redis timeout: every call is bounded by it on top of the caller's
//     context, and every deadline a caller needs for Redis comes from Bound;
//     a call also ends as soon as a dial to its server fails (the Store
//     tells the door: remote.DialWatcher), with that dial's error, since
//     go-redis retries a failed dial until the deadline;
//   - the guard (package internal/guard) for clients that do not honour
//     context deadlines: such a call runs on a goroutine of its own, which
//     the Door tracks and Close waits for, for a bounded time (after
//     Close, a permit's release or lease call, which gives back, runs on
//     one it no longer tracks: see Permit);
//   - late refunds: a grant that arrives after its guarded call's caller
//     stopped waiting is refunded where it arrives, since nobody holds it;
//   - the circuit breakers: one in front of Redis, and with a Redis
//     Cluster one in front of each master, asked before a call (Enter,
//     Ready) and told its outcome (Leave); when one closes after an
//     outage, the Door tells its owner (Config.Recovered);
//   - exact decisions that come together: while two a core of the process
//     (at least four) are on their way to a server, more wait in that
//     server's breaker and go together in one pipeline as soon as one of
//     those ends, each its own atomic call; a caller that leaves takes
//     only itself out, and a grant it leaves behind is refunded;
//   - the counters of round trips and errors (Stats);
//   - the events told to its owner's observers: each change of a breaker
//     and the first failure of a run, with their causes, and an
//     EventWarning for a server whose maxmemory-policy may evict limiter
//     keys (read once per server, in the background, after the first call
//     to it succeeds). They are delivered in order, outside every lock, on
//     a goroutine that posted one;
//   - the hook (Config.Hook), told of each round trip as it starts and
//     ends: what it does, its calls, its outcome;
//   - the pools of worldwide policies (Config.Pools): told of each
//     decision of a pooled policy, and asked for a refill when an empty
//     pool denied an exact call (Claim and Deposit make a refill's calls).
//
// Files: door.go (Config, Door, New, Bound, Classify, Node, Stats,
// Timeout, Close, the context of one call), calls.go (Acquire, Refund,
// Charge, Batch, Ping: the calls of the decisions and the leases),
// combine.go (the combiner of exact decisions), breaker.go (BreakerState,
// ErrBusy, Pass, Enter, Leave, Ready, Breakers), events.go (Event, the
// notifier, the eviction check), operator.go (Peek, GiveBack, RefundAt,
// Debit, Permit, Reset, Block, Unblock: calls whose caller waits for the
// outcome), hook.go (Hook, RedisOp, RedisOutcome).
//
// It must not decide requests or choose what a failure means to them
// (package tier does, and charges what its fallback admitted through
// Charge), make, size or hold leases (package sync does, and sends them
// through Batch), or build keys and run scripts itself (package remote
// does, in the Store a Door is given). It imports remote, clock and
// internal/guard from this module. A Door is safe for concurrent use.
//
// It is part of ratelease's implementation, with no API promise of its
// own: it may change in any release. Programs use package ratelease.
package door
