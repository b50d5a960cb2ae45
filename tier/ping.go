package tier

import (
	"context"

	"github.com/ratelease/ratelease/internal/door"
)

// Ping reports whether Redis answers, for a readiness probe: nil, or an
// error wrapping door.ErrUnavailable and the cause; door.ErrClosed after
// Close; ctx's own error unwrapped.
func (e *Engine) Ping(ctx context.Context) error {
	if e.closed.Load() {
		return door.ErrClosed
	}
	return e.door.Ping(ctx)
}
