// Package tier is the decision engine of ratelease: given a compiled policy,
// a key and a number of units, it decides, and it makes Wait wait.
//
// It owns the order in which a decision is sought and the accounting of
// where each came from (Stats). With a Leaser (lease mode, the default of
// the root package), a policy that can lease is decided from the key's local
// allowance first (package local: a lock-free hit), then from a cached
// denial, then by a lease (package sync: one coalesced, batched Redis call);
// policies with a SlidingWindowLog or LeakyBucket, and every policy in exact
// mode, are decided by one atomic call to the Redis tier (package remote).
//
// Every Redis call, the Leaser's included, goes through the engine's one
// Door (package internal/door, made by New and handed to the Leaser), which
// bounds it by the Redis timeout and the caller's context, guards it for
// clients that ignore deadlines, refunds grants that come late, counts it,
// and puts a circuit breaker in front of it (one per master with a Redis
// Cluster); the door also tells the engine's observer
// (Config.Events) of the breakers' changes, first failures and warnings.
// What a failure means is decided here: while Redis is unavailable,
// requests that the local allowance cannot answer are decided by the
// failure mode (FailLocal's per-key x/time/rate limits, FailOpen,
// FailClosed), and what the fallback admitted is charged to Redis when the
// breaker closes.
//
// It also counts each policy's decisions (PolicyStats), without a counter
// on the hit path: a policy's local hits are the sum of its entries'. The
// state it keeps of each policy (its table, its counters) is bounded by the
// key store, so that policies made at run time do not accumulate: a
// policy's table goes with its last entry, a policy decided exactly goes
// when it is collected.
//
// Files: engine.go (Source, Decision, Config, Engine, Stats, New, Close),
// decide.go (Hit, Miss, leased decisions), firstuse.go (a key's first two
// uses, decided as exact mode decides them), definitions.go (a policy name's
// limits, and its redefinition), tables.go (the state of each policy, and
// when it goes), stats.go (PolicyStats, LimitName, the counters), exact.go
// (exact decisions, Wait), waitqueue.go (the queue of exact-mode Waits by
// key), fallback.go (FailureMode, the failure mode, the charge after an
// outage), permits.go (AcquirePermit, ReleasePermit, ExtendPermit, and the
// fallback's permits), permitlease.go (lease mode's slots of permits),
// operator.go (AllowAtMost, Refund, RefundAt, Charge, Peek, Reset, Block,
// Unblock, and the count of shadow mode's would-be denials, which the root
// admits), ping.go (Ping), region.go (the regional tier: the pools of
// worldwide policies in this region's Redis, refilled from the global
// Redis through a door of its own, Config.Global), regionwindow.go (the
// global key's windows as a region sees them: a refill too late in one
// waits for the next), partition.go (a region cut off from the global
// Redis: its failure-mode share and what it owes).
//
// It does not validate input (the root package does, once), build Redis
// keys or scripts (remote does), make, size or hold leases (sync does),
// call Redis but through its door, or read the time but through the
// injected clock.Clock (a context's deadline aside, which is on the wall
// clock). An Engine is safe for concurrent use.
//
// It is part of ratelease's implementation, with no API promise of its
// own: it may change in any release. Programs use package ratelease.
package tier
