// Package remote is the Redis tier of ratelease: the global state of every
// limit and the atomic scripts that read and change it.
//
// It owns:
//
//   - one embedded, commented Lua file per algorithm (lua/), assembled with a
//     shared prelude into the entry points: acquire (grant at least min and
//     at most max units to every limit of a key, or none; acquire.lua
//     admits, within the fair share among the key's members that
//     fairshare.lua computes from the membership members.lua keeps), exact
//     (acquire for a call that names no member: exact mode, a cold lease;
//     bucket.lua, the same written out for one token or leaky bucket
//     without reserve) and refund (give unused units back, never above
//     capacity); and, for the operators of a
//     Limiter, peek (what one unit would meet, charging nothing),
//     giveback (units given back as granted now, never above capacity) and
//     charge (units charged whatever the limits have left, which then owe
//     the rest); and permit.lua, the permits of a concurrency limit (a
//     sorted set of permit ids by expiry, key <prefix>:{<name>:<key>}:permits,
//     and in lease mode the instances' slots in it, their demands in
//     <prefix>:{<name>:<key>}:permits:m);
//     Store.Reset deletes a key's state with one DEL; Store.Block and
//     Unblock set and delete a key's block, which acquire and peek read
//     before anything else (a blocked key is denied, charging nothing);
//   - the key layout <prefix>:{<policy>:<key>}:<algorithm>:<period µs> (a
//     calendar window's :cal:<unit>:<zone>, and :m for the key's members,
//     :b for its block), whose hash tag puts every limit of one key in one
//     Redis Cluster slot;
//   - the placing of calendar windows (calendar.go): Lua knows no time
//     zones, so each call names the ends of two windows as this host's
//     clock (Store.SetClock) places them, and Redis's TIME picks;
//   - [Store], which runs the scripts on any redis.UniversalClient: as
//     Redis functions (FCALL, loading the library where it is missing), or
//     on a server without them as scripts through redis.NewScript (EVALSHA,
//     falling back to EVAL after NOSCRIPT); and
//     reads what else of the servers a Limiter needs to know: whether they
//     answer and let it run scripts (Ping) and whether they may evict its
//     keys (MaxmemoryPolicies); its errors name the server (Addr);
//   - a hook on the client (dial.go) that tells the Store's DialWatchers of
//     each dial that fails, so that a caller can end the call that waits
//     for that connection.
//
// Redis TIME, read inside the scripts, is the only clock that decides; all
// arithmetic in Lua is on whole microseconds and whole units, below 2^53.
//
// It does not own local state, leasing, timeouts, retries or failure
// handling: callers bound each call with a context and decide what a failure
// means. It imports only clock from this module. A Store is safe for
// concurrent use.
//
// It is part of ratelease's implementation: its API may change in any
// release, with no compatibility promise of its own. Programs use package
// ratelease.
package remote
