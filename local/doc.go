// Package local holds the in-process parts of ratelease: what a Limiter
// knows without asking Redis.
//
// It owns:
//
//   - [allowance], the units leased for one (policy, key): an atomic counter
//     with an expiry, taken from without a lock. One allowance serves every
//     limit of its policy, because a lease charges all of them at once
//     (all-or-nothing), so a leased unit is already paid for everywhere;
//   - [Entry], the state of one (policy, key): its allowance, Redis's last
//     word on the key (what a hit reports), and the bookkeeping of its
//     leases (the demand, the lease in flight, units set aside to go back).
//     Its state is its own: the hit path reads it lock-free (Take,
//     LastWord, LowWater), the leaser changes it under the entry's lock
//     through methods that say what happens (StartLease, Fill, Answered,
//     Lapse, DrainBack, EndLease, AbandonLease). Each takes units out and
//     puts them where they go in one step under that lock, and an entry
//     that left its table (evicted, or at Close) refuses what comes after:
//     no unit falls between two steps;
//   - [demand], an estimate of how fast an allowance is used, from which the
//     lease size is chosen;
//   - [Table], the allowances of one policy by key, read without a lock, and
//     [Bound], which caps how many allowances exist across all tables (an
//     LRU from golang-lru/v2, touched only when a lease is made, never on the
//     hit path) and hands back the unused units of the ones it evicts. A
//     table keeps the hits of the entries it lost, and tells its owner
//     when its last entry leaves, so that the owner may retire it (Retire)
//     and let the policy go.
//
// It must not talk to Redis or decide policy: it keeps state, and the tier
// and sync packages act on it. It imports only clock from this module.
// Every type is safe for concurrent use unless its doc says otherwise.
//
// It is part of ratelease's implementation: its API may change in any
// release, with no compatibility promise of its own. Programs use package
// ratelease.
package local
