// Package local holds what a Limiter knows without asking Redis.
//
// It is part of ratelease's implementation, not a stable API: it may
// change in any release. Programs use package ratelease.
//
// It owns:
//
//   - [Entry], the state of one (policy, key): its allowance, the units
//     leased for it, which serve every limit of the policy (a lease charges
//     them all at once); Redis's last word on the key; and the bookkeeping
//     of its leases. The hit path reads it lock-free; the leaser changes it
//     under the entry's lock through methods that each move units in one
//     step (StartLease, Answer, Lapse, EndLease), and an entry that left
//     its table refuses units after, so no unit falls between two steps;
//   - [Table], the entries of one policy by key, read without a lock, and
//     [Bound], an LRU (golang-lru/v2, touched only when a lease lands) that
//     caps the entries across its tables and hands back the units of those
//     it evicts.
//
// It must not talk to Redis or decide policy: package sync leases, package
// tier decides. It imports nothing from this module. Entry, Table and
// Bound are safe for concurrent use.
//
// Files: entry.go (the Entry and its hit path), allowance.go (its units:
// two generations, lock-free takes), lease.go (a lease's start, answer and
// end), back.go (units that lapse and go back), operator.go (what Peek,
// Reset, AllowAtMost, Refund and Block do), demand.go (the demand
// estimate), table.go (Table and Bound).
package local
