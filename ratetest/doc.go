// Package ratetest helps test code that uses ratelease: it gives the code a
// real Limiter on an embedded, in-memory Redis (miniredis) whose time moves
// only when the test says so.
//
//	func TestSearchIsLimited(t *testing.T) {
//		env := ratetest.New(t) // closed when t ends
//		srv := newServer(env.Limiter())
//		if err := env.Exhaust(ctx, searchPolicy, "user:42"); err != nil {
//			t.Fatal(err)
//		}
//		// ... srv answers user 42 with 429 ...
//		env.Advance(time.Second) // the limit refills: Redis and the Limiter see the same second go by
//		// ... and admits it again ...
//	}
//
// An Env holds one clock (a *clock.Manual) that drives everything that
// tells time: the Limiter's own clock (ratelease.WithClock), which times
// Wait's sleeps; Redis's TIME, which the Lua scripts decide every limit by
// (miniredis SetTime); and the expiry of Redis keys (miniredis
// FastForward). Env.Advance moves all three at once, so a test says "a
// second later" and every limit refills, every window moves and every
// sleeping Wait wakes, exactly as they would a second later in production.
// Nothing else moves the time: a test that does not call Advance sees a
// frozen clock, and its decisions never depend on how fast the machine is.
// The clocks start at Epoch, a whole day since the Unix epoch, where the
// windows of every window algorithm with a period of up to a day begin.
//
// # Exact mode by default
//
// The Env's Limiter decides in exact mode (ratelease.WithExact): every
// decision is one atomic Redis call, so every Allow, Peek and Wait follows
// the policy's limits exactly, decision by decision, and the same test
// gives the same answers on every run. That is what a test of one's own
// limits wants: "the 11th request in a second is denied, with RetryAfter
// 100ms". A Limiter in lease mode (production's default) decides from units
// it leased in batches, which a background goroutine renews at times the
// scheduler picks, which lapse after the lease TTL on the manual clock, and
// which take more from Redis than the requests used so far; its decisions
// follow the limits within the lease bound (docs/leasing.md), not exactly.
// To test lease mode itself, pass ratelease.WithLease(…): options are
// applied after the Env's, so they override them, except the clock.
//
// The Env's Limiter is ratelease.New's with these options first:
// WithExact(), WithRedisTimeout(5s) (an in-memory Redis slowed by a loaded
// machine is not an outage: a decision is never left to the failure mode
// by a timeout), and, last, WithClock with the Env's clock (a WithClock in
// opts is overridden: the Env's Advance must drive the Limiter). The
// failure mode is the Limiter's default, FailLocal; the Redis client is made
// with ContextTimeoutEnabled.
//
// # What else it offers
//
// Env.Exhaust uses a key up under a policy, so that its next Allow is
// denied; Env.NewLimiter adds Limiters (with Redis clients of their own,
// like the replicas of a service) on the same Redis and clock; Env.Redis
// and Env.Client give the in-memory Redis itself (for fault injection:
// miniredis's SetError, Close) and a client of it.
//
// New takes a testing.TB and registers its cleanup with t.Cleanup, as
// zaptest and miniredis.RunT do; Run is the same for code without one (an
// example, a benchmark's TestMain, a program), and the caller then calls
// Env.Close. An Env is safe for concurrent use. The package imports the
// root package's public API, clock, and miniredis and go-redis, which the
// module requires already.
package ratetest
