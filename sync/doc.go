// Package sync keeps local allowances in step with Redis.
//
// Its name shadows the standard library's; inside this module import it as
//
//	leasesync "github.com/ratelease/ratelease/sync"
//
// It owns the [Leaser], which makes every lease: on a miss, concurrent
// requests for one key wait for a single Redis call (coalescing); below the
// low-water mark a lease is made ahead of need (prefetch); lease sizes follow
// each key's observed demand (units per second × Config.Refresh, clamped to
// [Min, Max]; a cold key starts at Min), and shrink toward a fair share when
// the budget is scarce; lease requests and refunds that are due at the same
// moment go out together, one pipeline per flush (with a Redis Cluster, one
// per master, each master in a lane of its own); units unused after
// Config.TTL (or the end of their window) are refunded, as are those of
// evicted entries and, at Close, all of them; and a heartbeat keeps this
// instance in the membership count that the fair share divides by.
//
// It must not decide requests (package tier does) or hold the scripts
// (package remote does). It imports local, remote and clock from this module.
// A Leaser is safe for concurrent use.
package sync
