// Package clock is the only source of local time in ratelease (but a
// context's deadline, which is on the wall clock).
//
// It owns the [Clock] interface and three implementations:
//
//   - [System], the wall and monotonic clock of the process (time.Now);
//   - [Coarse], a cached time refreshed by one ticker goroutine, for hot paths
//     that read the time on every decision and can live with a resolution of
//     about a millisecond; it must be stopped with [Coarse.Stop];
//   - [Manual], a fake whose time moves only when a test says so, and whose
//     timers fire when that time passes their deadline.
//
// Redis decides every limit with its own TIME inside Lua; a local Clock only
// measures local durations: how long to sleep in Wait, when a lease expires.
// No clock here is package-global: each Limiter is given one.
//
// All implementations are safe for concurrent use. This package imports only
// the standard library, and knows nothing of limits, leases or Redis.
// Unlike the engine's packages, it is public API: users pass a [Manual] to
// ratelease.WithClock.
package clock
