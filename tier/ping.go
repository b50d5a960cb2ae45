package tier

import "context"

// Ping reports whether Redis answers, for a readiness probe: nil, or an
// error wrapping ErrUnavailable and the cause; ErrClosed after Close; ctx's
// own error unwrapped.
func (e *Engine) Ping(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	return e.door.Ping(ctx)
}
