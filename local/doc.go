// Package local holds the in-process parts of ratelease: what a Limiter
// knows without asking Redis.
//
// It will own the per-(policy, key, limit) allowance of leased units (an
// atomic counter with an expiry), the key store bounded by golang-lru/v2
// whose eviction hands unused units back for refund, per-key demand
// estimation, and the outage fallback limiter built on golang.org/x/time/rate.
//
// It must not talk to Redis or decide policy: it keeps state, and the tier
// and sync packages act on it. It imports only clock from this module.
//
// In the current release every decision is exact (one Redis call), so the
// package holds no code yet.
package local
