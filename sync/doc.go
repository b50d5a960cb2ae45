// Package sync keeps local allowances in step with Redis.
//
// It is part of ratelease's implementation, not a stable API: it may
// change in any release. Programs use package ratelease. Its name shadows
// the standard library's; inside this module import it as
//
//	leasesync "github.com/ratelease/ratelease/sync"
//
// It owns the [Leaser], which makes every lease: concurrent misses of a
// key wait for one Redis call; below the low-water mark a lease is made
// ahead of need; a lease is sized to the key's measured demand over a
// horizon (Config.Refresh, or three quarters of Config.TTL), never less
// than a few round trips, and reports that demand for the key's max-min
// fair share. Its batcher sends the lease calls and refunds due at the
// same moment in one pipeline (with a Redis Cluster, one per master, each
// in a lane of its own). Units unused after Config.TTL go back with the
// key's next lease or on their own a sweep later (not at all when a refund
// could give nothing back); those of evicted entries, and at Close all of
// them, go back at once. Details: docs/leasing.md.
//
// Every Redis call goes through the Limiter's door (package internal/door),
// which bounds it by the Redis timeout, counts it, and holds the circuit
// breakers: a prefetch starts only while its server's breaker is closed;
// for a lease a request waits for, the caller asks and tells the breaker.
//
// It must not decide requests (package tier does), hold the scripts
// (package remote does), or call Redis but through the door. It imports
// local, remote, clock and internal/door from this module. A Leaser is
// safe for concurrent use.
//
// Files: leaser.go (the Leaser, its clock, a lease's start and end),
// plan.go (sizing a lease, applying its answer), batch.go (the batcher:
// queue, pipelines, Cluster lanes, round trip), sweep.go (units given
// back: lapsed, evicted, at Close; Stats; Block), config.go.
package sync
