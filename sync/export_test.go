package sync

import (
	"time"

	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
)

// SetBeforeSend sets a hook called with each lease's entry before it is
// sent (nil: none): a request's lease's, on its goroutine before it is
// handed to the batcher; a prefetch's, on the batcher's goroutine as it
// sends it (a hook that blocks holds every send). Set it before the
// Leaser is used.
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

// Hot reports whether a reply d to the lease plan makes for e's lease st
// at now (a prefetch) would start a due lease (Leaser.due), at d's Next.
func Hot(l *Leaser, e *Entry, st local.Lease, d remote.Decision) bool {
	now := l.Now()
	c := l.plan(e, st, 0, now)
	l.due(e, c.req, c.rate, d, now, now+int64(time.Hour))
	return PendingDues(l) > 0
}

// ErrInvalidOption is wrapped by the errors of Validate (and New).
var ErrInvalidOption = errInvalidOption

// Validate is New's check of c.
func Validate(c Config) error { return c.validate() }

// PendingDues is the number of entries with a due lease pending.
func PendingDues(l *Leaser) int {
	l.duesMu.Lock()
	defer l.duesMu.Unlock()
	return len(l.dueOf)
}

// DueAt has l lease e's next batch when due at until (ns, l's time), as
// an answer to a hot token-bucket key's lease would (due).
func DueAt(l *Leaser, e *Entry, until int64) {
	p := e.Policy()
	l.due(e, remote.Request{Policy: p, Key: e.Key(), Member: l.id, Demand: int64(p.Rate()) + 1}, p.Rate()+1, remote.Decision{}, l.Now(), until)
}

// LateNow reports whether l's batcher shows now, by the pipelines it
// follows alone, that this process does not keep up (lateAt for a
// goroutine on time).
func LateNow(l *Leaser) bool {
	now := l.batcher.since(time.Now())
	return l.batcher.lateAt(now, now)
}
