// Package sync keeps local allowances in step with Redis.
//
// Its name shadows the standard library's; inside this module import it as
//
//	leasesync "github.com/ratelease/ratelease/sync"
//
// It owns the [Leaser], which makes every lease: on a miss, concurrent
// requests for one key wait for a single Redis call (coalescing); below the
// low-water mark a lease is made ahead of need (prefetch); lease sizes follow
// each key's measured demand over a horizon (three quarters of Config.TTL, or
// Config.Refresh) and never less than a few measured round trips (a cold key
// asks for the request's own units); each lease reports this instance's
// demand for the key, which the script uses for the key's members and its
// max-min fair share; lease requests and refunds that are due at the same
// moment go out together, one pipeline per flush, refunds first (with a
// Redis Cluster, one per master, each master in a lane of its own); units
// unused after Config.TTL (or the end of their window) go back with the
// key's next lease, or on their own a sweep later, or not at all when a
// refund could no longer give anything back; those of evicted entries and,
// at Close, all of them go back at once, with this instance's leave from
// the keys' members.
//
// The Leaser decides what to lease and applies the answers; its batcher, a
// type of its own, queues the lease calls and refunds, sends them in
// pipelines through the door (with a Cluster, per master lane), measures
// the round trip and completes the calls, calling back the Leaser (its
// owner) to apply each answer and count it.
//
// Files: leaser.go (the Leaser; leases: plan, apply), batch.go (the
// batcher: queue, pipelines, Cluster lanes, round trip), sweep.go (units
// given back: lapsed, evicted, at Close; statistics), config.go.
//
// Every Redis call goes through the Limiter's Door (package internal/door,
// given to New), which bounds it by the Redis timeout, guards it for
// clients that ignore deadlines (refunding grants that come after the
// deadline), counts its round trips and errors, and holds the circuit
// breakers: a prefetch starts only while the key's server's breaker is
// closed (door.Ready); for a lease a request waits for, the caller (package
// tier) asks and tells the breaker.
//
// It must not decide requests (package tier does), hold the scripts
// (package remote does), or call Redis but through the door. It imports
// local, remote, clock and internal/door from this module. A Leaser is
// safe for concurrent use.
//
// It is part of ratelease's implementation: its API may change in any
// release, with no compatibility promise of its own. Programs use package
// ratelease.
package sync
