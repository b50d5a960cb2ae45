// Package sync keeps local allowances in step with Redis.
//
// Its name shadows the standard library's; inside this module import it as
//
//	leasesync "github.com/ratelease/ratelease/sync"
//
// It will own prefetching at the low-water mark, coalescing of concurrent
// misses on one key, batching of many keys' lease requests into one pipeline
// per Redis node, adaptive lease sizes, the expiry and refund of unused
// units, and the membership heartbeat that counts live instances.
//
// It must not decide requests (tier does) or hold the scripts (remote does).
// It imports local, remote and clock from this module.
//
// In the current release every decision is exact (one Redis call), so the
// package holds no code yet.
package sync
