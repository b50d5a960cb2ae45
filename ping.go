package ratelease

import "context"

// Ping reports whether Redis answers (every master of a Cluster, every
// shard of a Ring) and lets the client run scripts: nil, or an error
// wrapping ErrUnavailable and the cause. It is a readiness check: New
// succeeds while Redis is down, and decisions go to the failure mode
// without an error. Ping charges nothing and asks Redis even while the
// circuit breaker is open.
func (l *Limiter) Ping(ctx context.Context) error {
	if ctx == nil {
		return ErrNilContext
	}
	if err := l.engine.Ping(ctx); err != nil {
		return rootErr(err)
	}
	return nil
}
