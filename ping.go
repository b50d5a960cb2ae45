package ratelease

import "context"

// Ping reports whether Redis answers (with a Redis Cluster, every master;
// with a Ring, every shard) and lets the client run scripts, within the
// Redis timeout and ctx: nil, or an error wrapping ErrUnavailable and the
// cause, naming the server's address: a dial's error (connect: connection
// refused, a lookup that failed, a TLS handshake's), or Redis's reply
// (WRONGPASS, NOAUTH, NOPERM for a user who may not run scripts...).
// ErrClosed after Close; ctx's own error is returned unwrapped.
//
// It is a readiness check, for a health probe: New succeeds while Redis is
// down (a service must be able to start then), and decisions go to the
// failure mode without an error (but with FailClosed), so a wrong address
// or a Redis that is gone shows here. Ping charges nothing, and goes past
// the circuit breaker: it asks Redis even while the breaker is open.
func (l *Limiter) Ping(ctx context.Context) error {
	if err := l.engine.Ping(ctx); err != nil {
		return rootErr(err)
	}
	return nil
}
