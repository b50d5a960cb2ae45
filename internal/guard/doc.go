// Package guard bounds Redis calls made with clients that do not stop at a
// context's deadline.
//
// A go-redis client made without ContextTimeoutEnabled ignores the context
// once a command is on the wire: a read waits for the client's own
// ReadTimeout (3s by default). Do runs such a call on a goroutine of its own
// and returns at the context's end; the call goes on, and what it brings
// back late is handed to a callback, so that a grant that arrives after its
// requester left can be given back. A Group tracks those goroutines (and
// those of work in the background started with Go), and its Close waits
// for them for a bounded time only.
//
// It owns Do and Group. It knows nothing of Redis, leases or decisions,
// and imports nothing of this module: its caller (package internal/door)
// says what a call is and what a late result means.
//
// It is part of ratelease's implementation, with no API promise of its
// own: it may change in any release. Programs use package ratelease.
package guard
