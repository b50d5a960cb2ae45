package tier

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// PermitDecision is what an acquire of a permit came to: Granted, the
// permits of the key Held after it (by every instance; by this one, from
// the fallback), and when denied, RetryAfter: until the first permit held
// expires (a release frees one sooner). Source is Remote, or Fallback
// (Redis unavailable): a fallback permit is this instance's alone, and
// its release and extension never reach Redis.
type PermitDecision struct {
	Granted    bool
	Held       int64
	RetryAfter time.Duration
	Source     Source
}

// localPermits counts the permits the fallback granted while Redis was
// unavailable, per (name, key): FailLocal holds them to this instance's
// share of the limit. Entries go when their count falls to 0.
type localPermits struct {
	mu   sync.Mutex
	held map[[2]string]int64
}

// AcquirePermit acquires a permit of name's key, of at most limit held at
// once across every instance, for ttl unless extended (remote.Store.Permit,
// one call, in lease mode too). While Redis is unavailable the failure
// mode decides: FailClosed an error wrapping ErrUnavailable, FailOpen a
// permit, FailLocal a permit while this instance holds fewer than its
// share of the limit (limit over Config.Instances, at least 1) from the
// fallback.
func (e *Engine) AcquirePermit(ctx context.Context, name, key, id string, limit int64, ttl time.Duration) (PermitDecision, error) {
	if e.closed.Load() {
		return PermitDecision{}, ErrClosed
	}
	r, err := e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitAcquire, Limit: limit, TTL: ttl})
	if err == nil {
		return PermitDecision{Granted: r.Done, Held: r.Held, RetryAfter: r.RetryAfter, Source: Remote}, nil
	}
	if !errors.Is(err, ErrUnavailable) || e.fallback.mode == FailClosed {
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
		return PermitDecision{Held: held, RetryAfter: ttl, Source: Fallback}, nil
	}
	e.permits.held[k] = held + 1
	return PermitDecision{Granted: true, Held: held + 1, Source: Fallback}, nil
}

// ReleasePermit releases permit id of name's key: in Redis, or, for a
// fallback permit (local), here. It reports whether the permit was still
// held (a Redis permit past its TTL is not). Errors wrap ErrUnavailable
// when Redis cannot take it, whatever the failure mode: the permit then
// comes back when its TTL ends.
func (e *Engine) ReleasePermit(ctx context.Context, name, key, id string, local bool) (bool, error) {
	if local {
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
	if e.closed.Load() {
		return false, ErrClosed
	}
	r, err := e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitRelease})
	return r.Done, err
}

// ExtendPermit makes permit id of name's key last ttl from now, and
// reports whether it was still held. A fallback permit (local) has no TTL:
// true. Errors are ReleasePermit's.
func (e *Engine) ExtendPermit(ctx context.Context, name, key, id string, ttl time.Duration, local bool) (bool, error) {
	if local {
		return true, nil
	}
	if e.closed.Load() {
		return false, ErrClosed
	}
	r, err := e.door.Permit(ctx, remote.PermitCall{Name: name, Key: key, ID: id, Op: remote.PermitExtend, TTL: ttl})
	return r.Done, err
}
