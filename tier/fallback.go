package tier

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
)

// FailureMode says how requests are decided while Redis is unavailable
// (the breaker is open, or a call failed). Units already leased are used
// first in every mode.
type FailureMode uint8

// The failure modes.
const (
	// FailLocal decides by per-key local limits at this instance's share of
	// each limit: Rate/instances per Period, Burst/instances (at least 1).
	// Source Fallback.
	FailLocal FailureMode = iota
	// FailOpen admits every request. Source Fallback.
	FailOpen
	// FailClosed denies with an error wrapping door.ErrUnavailable and the
	// cause.
	FailClosed
)

// String returns "fail-local", "fail-open", "fail-closed", or "unknown".
func (m FailureMode) String() string {
	switch m {
	case FailLocal:
		return "fail-local"
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	}
	return "unknown"
}

// MarshalText makes the mode a word in JSON and logs, as String says it.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// fallback decides while Redis is unavailable, and remembers what it
// admitted per key, to be charged to Redis once it is back.
type fallback struct {
	mode FailureMode
	// instances is the share of key under p that this instance gets: how
	// many instances divide its limits.
	instances func(p *remote.Policy, key string) int64
	mu        sync.Mutex
	keys      *simplelru.LRU[fallbackKey, *fallbackEntry] // requires mu held
	// latest is the latest time a limit was given (requires mu held). A
	// caller's now, read before it took mu, may be older: x/time/rate takes
	// an older time for its last and then counts the time since again, so
	// concurrent callers would mint the same interval's tokens twice.
	latest time.Time
}

type fallbackKey struct {
	p   *remote.Policy
	key string
}

// fallbackEntry is one key's local limits (FailLocal) and what was admitted
// for it during the outage.
type fallbackEntry struct {
	limits   []*rate.Limiter // one per limit of the policy; guarded by fallback.mu
	admitted atomic.Int64
}

func newFallback(mode FailureMode, maxKeys int, instances func(*remote.Policy, string) int64) *fallback {
	keys, _ := simplelru.NewLRU[fallbackKey, *fallbackEntry](maxKeys, nil)
	return &fallback{mode: mode, instances: instances, keys: keys}
}

// decide decides n units of key at now, Redis being unavailable for cause.
func (f *fallback) decide(p *remote.Policy, key string, n int64, now time.Time, cause error) (Decision, error) {
	switch f.mode {
	case FailClosed:
		if errors.Is(cause, door.ErrUnavailable) {
			return Decision{}, cause // it says so already
		}
		return Decision{}, fmt.Errorf("%w: %w", door.ErrUnavailable, cause)
	case FailOpen:
		f.entry(p, key).admitted.Add(n)
		return Decision{Allowed: true, Source: SourceFallback, Remaining: -1}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now = f.monotone(now)
	e := f.entryLocked(p, key)
	// All limits or none: reserve on each, cancel all if one would wait.
	var wait time.Duration
	var refused bool
	rs := make([]*rate.Reservation, 0, len(e.limits))
	for _, l := range e.limits {
		r := l.ReserveN(now, int(n))
		rs = append(rs, r)
		if !r.OK() {
			refused = true
		} else if d := r.DelayFrom(now); d > wait {
			wait = d
		}
	}
	if refused || wait > 0 {
		for _, r := range rs {
			r.CancelAt(now)
		}
		if refused { // n is above this instance's share of the burst
			wait = p.Limits()[0].Period
		}
		return Decision{Source: SourceFallback, RetryAfter: wait}, nil
	}
	e.admitted.Add(n)
	least := int64(-1)
	for _, l := range e.limits {
		if t := int64(l.TokensAt(now)); least < 0 || t < least {
			least = t
		}
	}
	return Decision{Allowed: true, Source: SourceFallback, Remaining: max(0, least)}, nil
}

// monotone returns now, or the latest time given to a limit when now is
// before it. Requires mu held.
func (f *fallback) monotone(now time.Time) time.Time {
	if now.Before(f.latest) {
		return f.latest
	}
	f.latest = now
	return now
}

// entry returns key's entry, making it if needed.
func (f *fallback) entry(p *remote.Policy, key string) *fallbackEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.entryLocked(p, key)
}

// entryLocked returns key's entry, making its limits at this instance's
// share of each of p's. Requires mu held.
func (f *fallback) entryLocked(p *remote.Policy, key string) *fallbackEntry {
	k := fallbackKey{p, key}
	if e, ok := f.keys.Get(k); ok {
		return e
	}
	share := float64(max(1, f.instances(p, key)))
	e := &fallbackEntry{}
	for _, l := range p.Limits() {
		perSecond := float64(l.Rate) / l.Period.Seconds() / share
		burst := max(1, int(float64(l.Burst)/share))
		e.limits = append(e.limits, rate.NewLimiter(rate.Limit(perSecond), burst))
	}
	f.keys.Add(k, e)
	return e
}

// take takes what was admitted during the outage for the keys that back
// reports true of (all of them when back is nil), and returns the calls
// that charge it to Redis (remote.Request.Max units, see
// remote.Store.ChargeFit): each limit at most its own room, so at most its
// capacity, per key; not the policy's smallest capacity, which would let a
// policy's longer limit start afresh on top of what the outage admitted.
// Those keys' local limits are dropped: the next outage starts afresh.
func (f *fallback) take(back func(*remote.Policy, string) bool) []remote.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rs []remote.Request
	for _, k := range f.keys.Keys() {
		if back != nil && !back(k.p, k.key) {
			continue
		}
		e, _ := f.keys.Peek(k)
		if n := e.admitted.Swap(0); n > 0 {
			rs = append(rs, remote.Request{Policy: k.p, Key: k.key, Min: 1, Max: min(n, k.p.MaxCapacity(), remote.MaxCharge)})
		}
		f.keys.Remove(k)
	}
	return rs
}

// unavailable decides a request while Redis cannot (cause says why): by
// the failure mode, or, Redis being busy (door.ErrBusy), by a denial for
// the Redis timeout (Source Busy), whatever the failure mode.
func (e *Engine) unavailable(p *remote.Policy, key string, n int64, cause error) (Decision, error) {
	if errors.Is(cause, door.ErrBusy) {
		// Redis answers, slowly: the failure mode would admit beside what
		// it admits to the others. Denied, back after a timeout's time.
		d := Decision{Source: SourceBusy, RetryAfter: e.door.Timeout()}
		e.count(p, SourceBusy, false)
		return d, nil
	}
	d, err := e.fallback.decide(p, key, n, e.clock.Now(), cause)
	if err != nil {
		return Decision{}, err
	}
	e.count(p, SourceFallback, d.Allowed)
	return d, nil
}

// chargeOutage charges to Redis what the fallback admitted while it was
// unavailable, once the breaker of node has closed: for that server's keys
// (all keys, but with a cluster), through the door (one pipeline, bounded
// by the timeout, on a goroutine Close waits for); a worldwide key's, to
// its global key (regions).
func (e *Engine) chargeOutage(node string) {
	take := e.fallback.take
	if r := e.regions; r != nil {
		// A worldwide key's are owed to its global key, as a partition's
		// share is, and charged there by its pool's next refill: its pool
		// holds only what the global key gave it.
		take = func(on func(*remote.Policy, string) bool) []remote.Request {
			rs := e.fallback.take(on)
			kept := rs[:0]
			for _, q := range rs {
				if q.Policy.Global() == nil {
					kept = append(kept, q)
				} else {
					r.owe(pool{q.Policy, q.Key}, q.Max)
				}
			}
			return kept
		}
	}
	e.stats.charged.Add(uint64(e.door.Charge(node, take)))
}
