// Package tier is the decision engine of ratelease: given a compiled policy,
// a key and a number of units, it decides, and it makes Wait wait.
//
// It owns the order in which a decision is sought and the accounting of
// where each came from (Stats). In exact mode, the only mode so far, every
// decision is one atomic call to the Redis tier (package remote), bounded by
// the Redis timeout and the caller's context; the local allowance (package
// local) and lease synchronisation (package sync) will be consulted before
// Redis, and a fallback after it.
//
// It does not validate input (the root package does, once), build Redis keys
// or scripts (remote does), or read the time except through the injected
// clock.Clock. An Engine is safe for concurrent use.
package tier
