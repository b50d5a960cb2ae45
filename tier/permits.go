package tier

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// PermitDecision is what an acquire of a permit came to: Granted, the
// permits of the key Held after it (by every instance, as last seen; by
// this one, from the fallback), and when denied, RetryAfter: until the
// first permit held expires (a release frees one sooner). Source is
// Remote, Local (lease mode: from this instance's slots), or Fallback
// (Redis unavailable): a fallback permit is this instance's alone, and
// its release and extension never reach Redis. Hold goes to
// ReleasePermit and ExtendPermit.
type PermitDecision struct {
	Granted    bool
	Held       int64
	RetryAfter time.Duration
	Source     Source
	Hold       PermitHold
}

// localPermits counts the permits the fallback granted while Redis was
// unavailable, per (name, key): FailLocal holds them to this instance's
// share of the limit. Entries go when their count falls to 0.
type localPermits struct {
	mu   sync.Mutex
	held map[[2]string]int64
}

// AcquirePermit acquires a permit of name's key, of at most limit held at
// once across every instance, for ttl unless extended: in exact mode one
// call (remote.Store.Permit), in lease mode from this instance's leased
// slots (see permitPools). While Redis is unavailable the failure mode
// decides: FailClosed an error wrapping door.ErrUnavailable, FailOpen a
// permit, FailLocal a permit while this instance holds fewer than its
// share of the limit (limit over Config.Instances, at least 1) from the
// fallback.
func (e *Engine) AcquirePermit(ctx context.Context, name, key, id string, limit int64, ttl time.Duration) (PermitDecision, error) {
	if e.closed.Load() {
		return PermitDecision{}, door.ErrClosed
	}
	var err error
	if e.leaser != nil {
		var d PermitDecision
		if d, err = e.acquireLeased(ctx, poolKey{name, key, limit, ttl}, id); err == nil {
			return d, nil
		}
	} else {
		var r remote.PermitReply
		r, err = e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitAcquire, Limit: limit, TTL: ttl})
		if err == nil {
			return PermitDecision{Granted: r.Done, Held: r.Held, RetryAfter: r.RetryAfter, Source: SourceRemote, Hold: PermitHold{source: SourceRemote}}, nil
		}
		if !errors.Is(err, door.ErrClosed) {
			// Redis may have granted it (the caller's context ended, or
			// the reply came too late): released, so that it is not held
			// until its TTL with no holder. Best effort, on a context of
			// its own.
			rctx, cancel := e.door.Bound(context.Background())
			_, _ = e.door.Permit(rctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitRelease})
			cancel()
		}
	}
	if errors.Is(err, door.ErrBusy) {
		// Redis answers, slowly: a permit of the failure mode's would be
		// held beside those Redis grants the others. Denied, back after a
		// timeout's time.
		return PermitDecision{RetryAfter: e.door.Timeout(), Source: SourceBusy}, nil
	}
	if !errors.Is(err, door.ErrUnavailable) || e.fallback.mode == FailClosed {
		return PermitDecision{}, err
	}
	share := int64(-1) // FailOpen: no bound
	if e.fallback.mode == FailLocal {
		share = max(1, limit/e.permitShare)
	}
	k := [2]string{name, key}
	e.permits.mu.Lock()
	defer e.permits.mu.Unlock()
	if e.permits.held == nil {
		e.permits.held = map[[2]string]int64{}
	}
	held := e.permits.held[k]
	if share >= 0 && held >= share {
		return PermitDecision{Held: held, RetryAfter: ttl, Source: SourceFallback}, nil
	}
	e.permits.held[k] = held + 1
	return PermitDecision{Granted: true, Held: held + 1, Source: SourceFallback, Hold: PermitHold{source: SourceFallback}}, nil
}

// ReleasePermit releases permit id of name's key: in Redis, in this
// instance's leased slots, or, for a fallback permit, here, as h says. It
// reports whether the permit was still held (not past its TTL). After Close
// it still gives the permit (or its leased slot) back to Redis, bounded by
// the Redis timeout (door.ErrClosed only with Config.Guard, whose calls end
// at Close). Errors wrap door.ErrUnavailable when Redis cannot take it,
// whatever the failure mode: the permit then comes back when its TTL ends.
func (e *Engine) ReleasePermit(ctx context.Context, name, key, id string, h PermitHold) (bool, error) {
	switch h.source {
	case SourceLocal:
		return e.releaseLeased(ctx, h, id)
	case SourceFallback:
		k := [2]string{name, key}
		e.permits.mu.Lock()
		defer e.permits.mu.Unlock()
		if e.permits.held[k] <= 1 {
			delete(e.permits.held, k)
		} else {
			e.permits.held[k]--
		}
		return true, nil
	}
	// After Close too (a graceful shutdown releasing its permits): the
	// permit is not held until its TTL; the door bounds the call.
	r, err := e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitRelease})
	return r.Done, err
}

// ExtendPermit makes permit id of name's key last ttl from now, and
// reports whether it was still held. A fallback permit has no TTL: true.
// Errors are ReleasePermit's.
func (e *Engine) ExtendPermit(ctx context.Context, name, key, id string, ttl time.Duration, h PermitHold) (bool, error) {
	switch h.source {
	case SourceLocal:
		return e.extendLeased(ctx, h, id, ttl)
	case SourceFallback:
		return true, nil
	}
	if e.closed.Load() {
		return false, door.ErrClosed
	}
	r, err := e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitExtend, TTL: ttl})
	return r.Done, err
}
