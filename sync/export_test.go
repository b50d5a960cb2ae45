package sync

import (
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// SetBeforeSend sets a hook called with each lease's entry before it is
// handed to the batcher (nil: none). Set it before the Leaser is used.
func SetBeforeSend(l *Leaser, f func(*Entry)) { l.beforeSend = f }

// Refusing reports whether l's batcher refuses lease calls (Close began).
func Refusing(l *Leaser) bool {
	l.batcher.mu.Lock()
	defer l.batcher.mu.Unlock()
	return l.batcher.closed
}
func ID(l *Leaser) string { return l.id }

// PlanOf is the request plan makes for e's lease st at now, for n units.
func PlanOf(l *Leaser, e *Entry, st local.Lease, n, now int64) remote.Request {
	return l.plan(e, st, n, now).req
}

// ErrInvalidOption is wrapped by the errors of Validate (and New).
var ErrInvalidOption = errInvalidOption

// Validate is New's check of c.
func Validate(c Config) error { return c.validate() }
