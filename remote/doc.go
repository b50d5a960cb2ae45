// Package remote is the Redis tier of ratelease: the global state of every
// limit and the atomic Lua that reads and changes it. It is not a stable
// API: it may change in any release. Programs use package ratelease.
//
// Its files, by job:
//
//   - limit.go, policy.go, calendar.go: a Limit and a Policy as the scripts
//     see them, and the placing of calendar windows (Lua knows no time
//     zones: each call names the ends of two windows by this host's clock,
//     Store.SetClock, and Redis's TIME picks);
//   - scripts.go and lua/: the scripts, one file per algorithm and per
//     entry point, assembled with prelude.lua into a Redis function
//     library per set of algorithms (acquire, exact, refund, bucket) and
//     one for permits (permit.lua); docs/scripts.md tells what each does;
//   - call.go: a call as a function (FCALL, loading the library where it
//     is missing) or, on a server without them, as a script (EVALSHA, then
//     EVAL after NOSCRIPT), one by one or in pipelines;
//   - codec.go: the key layout <prefix>:{<policy>:<key>}:<algorithm>:<period
//     µs> (:m the key's members, :b its block, :permits a concurrency
//     limit's), whose hash tag puts one key's limits in one Cluster slot,
//     and the scripts' arguments and replies;
//   - store.go: [Store] and its admission calls (Acquire, Batch, Refund);
//     operator.go: Peek, GiveBack, Charge, Reset, Block; permit.go: Permit;
//     pool.go: a worldwide policy's regional pool (Policy.Pooled, the Pool
//     algorithm of lua/pool.lua) and its refill (Claim, Deposit);
//   - server.go: what a Limiter reads of the servers (Node, Ping,
//     MaxmemoryPolicies, whether a client honours deadlines);
//   - dial.go: a hook that tells a Store's DialWatchers of failed dials,
//     and errors that name the server (Addr).
//
// Redis TIME, read inside the scripts, is the only clock that decides.
// Admission state (a bucket's TAT, window counts, debts) is whole
// microseconds and whole units below 2^53; only the fair share's rates and
// member buckets are fractions, and they never grant more than that state
// allows.
//
// It does not own local state, leasing, timeouts, retries or failure
// handling: callers bound each call with a context and decide what a
// failure means. It imports only clock from this module. A Store is safe
// for concurrent use.
package remote
