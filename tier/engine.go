package tier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/guard"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// ErrUnavailable is wrapped, together with the cause, by every error that
// comes from Redis failing to answer (a network error, a timeout, a script
// error). Errors of the caller's context are returned unwrapped instead.
var ErrUnavailable = errors.New("ratelease: redis unavailable")

// ErrClosed is returned by every call after Close.
var ErrClosed = errors.New("ratelease: limiter closed")

// Source says where a decision came from.
type Source uint8

// The sources of a decision. The zero value means no decision was made.
const (
	// Local: from a local allowance leased earlier; no Redis call.
	Local Source = iota + 1
	// Remote: from one call to Redis.
	Remote
	// Fallback: from the outage fallback, Redis being unavailable.
	Fallback
	// Cached: a denial repeated locally: Redis denied this key moments ago,
	// and its RetryAfter has not passed.
	Cached
)

// String returns "local", "remote", "fallback", "cached", or "none" for the
// zero value.
func (s Source) String() string {
	switch s {
	case Local:
		return "local"
	case Remote:
		return "remote"
	case Fallback:
		return "fallback"
	case Cached:
		return "cached"
	}
	return "none"
}

// Decision is the engine's answer to one request.
type Decision struct {
	Allowed bool
	Source  Source
	// Limit is the index in the policy of the limit that decided.
	Limit      int
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Config configures an Engine. Every field is required.
type Config struct {
	Store *remote.Store
	Clock clock.Clock
	// Timeout bounds every Redis call, on top of the caller's context.
	Timeout time.Duration
	// Guard runs each Redis call on its own goroutine and stops waiting for
	// it at the deadline: for clients that do not honour context deadlines
	// themselves (see remote.HonoursDeadlines).
	Guard bool
	// Leaser, when not nil, enables leasing: policies that can lease are
	// answered from local allowances first. Nil: every decision is exact.
	// The Engine closes it.
	Leaser *leasesync.Leaser
	// FailureMode decides requests while Redis is unavailable.
	FailureMode FailureMode
	// Instances, when positive, is the number of instances FailLocal divides
	// each limit by; 0 takes the live-instance count last seen in Redis
	// (leasing) or 1.
	Instances int64
	// MaxKeys bounds the keys FailLocal keeps limits for (default 100,000).
	MaxKeys int
	// Observer, when not nil, is called with each new state of the circuit
	// breaker, on the goroutine that changed it: it must not block.
	Observer func(BreakerState)
}

// Engine decides requests. Create it with New; it is safe for concurrent use.
type Engine struct {
	store *remote.Store
	clock clock.Clock
	base  time.Time // the breakers' time is ns since base
	// breaker stands in front of Redis; with a Redis Cluster (sharded), of
	// the keys whose server cannot be named, and breakers (server address
	// -> *breaker) in front of each master, so that a master that fails
	// takes down only its own keys.
	breaker  *breaker
	breakers sync.Map
	sharded  bool
	observer func(BreakerState)
	fallback *fallback
	timeout  time.Duration
	guard    bool
	leaser   *leasesync.Leaser
	tables   sync.Map // *remote.Policy -> *local.Table
	closed   atomic.Bool
	// guards tracks the goroutines of guarded calls and of the recovery
	// charge; Close waits for them for one Redis timeout at most.
	guards guard.Group
	stats  counters
}

// counters are the engine's statistics, updated atomically.
type counters struct {
	allowed, denied    atomic.Uint64 // of Remote, Cached and Fallback decisions
	remote, cached     atomic.Uint64
	fallback           atomic.Uint64
	roundTrips, errors atomic.Uint64
	charged            atomic.Uint64
}

// Stats is a snapshot of an Engine's counters since New.
type Stats struct {
	// Allowed and Denied count decisions, each attempt of a Wait included.
	Allowed, Denied uint64
	// Local, Remote, Cached and Fallback count decisions by Source.
	Local, Remote, Cached, Fallback uint64
	// RoundTrips counts Redis round trips (one pipeline of leases and
	// refunds counts one); Errors the calls that failed.
	RoundTrips, Errors uint64
	// Leases counts leases Redis answered; UnitsLeased the units they
	// granted; UnitsRefunded the units given back (on expiry, eviction and
	// Close); UnitsExpired those of the refunded that lapsed unused.
	Leases, UnitsLeased, UnitsRefunded, UnitsExpired uint64
	// Instances is the most instances that shared a key this instance
	// leased in the last minute, as Redis counted them (1 in exact mode).
	Instances int64
	// Breaker is the circuit breaker's state now; BreakerOpens counts the
	// times it opened. With a Redis Cluster there is a breaker per master,
	// and Breaker is the worst of them (open, half-open, closed). UnitsCharged counts the units admitted during outages
	// (FailLocal, FailOpen) and charged to Redis once it was back.
	Breaker      BreakerState
	BreakerOpens uint64
	UnitsCharged uint64
}

// New returns an Engine for cfg.
func New(cfg Config) *Engine {
	e := &Engine{store: cfg.Store, clock: cfg.Clock, base: cfg.Clock.Now(), timeout: cfg.Timeout, guard: cfg.Guard, leaser: cfg.Leaser}
	instances := func(*remote.Policy, string) int64 { return 1 }
	switch {
	case cfg.Instances > 0:
		instances = func(*remote.Policy, string) int64 { return cfg.Instances }
	case cfg.Leaser != nil:
		instances = e.members
	}
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 100_000
	}
	e.fallback = newFallback(cfg.FailureMode, maxKeys, instances)
	e.observer, e.sharded = cfg.Observer, cfg.Store.Sharded()
	e.breaker = e.newBreaker("")
	return e
}

// members returns how many instances share key under p, for FailLocal: the
// members Redis counted at the key's last lease, or, for a key not leased
// yet, the most any key had lately.
func (e *Engine) members(p *remote.Policy, key string) int64 {
	if Leasable(p) {
		if ent, ok := e.table(p).Get(key); ok {
			if m := ent.Members.Load(); m > 0 {
				return m
			}
		}
	}
	return e.leaser.Instances()
}

// newBreaker returns a breaker for the server named node; when it closes
// after an outage, what the fallback admitted for that server's keys is
// charged to it.
func (e *Engine) newBreaker(node string) *breaker {
	return newBreaker(e.observer, func() { e.chargeOutage(node) })
}

// breakerFor returns the breaker in front of the server that holds key's
// state under p. With a cluster, naming the server may load the cluster's
// layout (once, before the first call): that is bounded by the timeout.
func (e *Engine) breakerFor(p *remote.Policy, key string) *breaker {
	if !e.sharded {
		return e.breaker
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	return e.breakerOf(ctx, p, key)
}

// breakerOf is breakerFor within ctx, which bounds only a load of the
// cluster's layout.
func (e *Engine) breakerOf(ctx context.Context, p *remote.Policy, key string) *breaker {
	if !e.sharded {
		return e.breaker
	}
	node := e.store.Node(ctx, p, key)
	if node == "" {
		return e.breaker
	}
	if b, ok := e.breakers.Load(node); ok {
		return b.(*breaker)
	}
	b, _ := e.breakers.LoadOrStore(node, e.newBreaker(node))
	return b.(*breaker)
}

// nanos is the breaker's time: ns on the engine's clock since New.
func (e *Engine) nanos() int64 { return int64(e.clock.Now().Sub(e.base)) }

// unavailable decides a request while Redis cannot (cause says why), by the
// failure mode.
func (e *Engine) unavailable(p *remote.Policy, key string, n int64, cause error) (Decision, error) {
	d, err := e.fallback.decide(p, key, n, e.clock.Now(), cause)
	if err != nil {
		return Decision{}, err
	}
	e.stats.fallback.Add(1)
	if d.Allowed {
		e.stats.allowed.Add(1)
	} else {
		e.stats.denied.Add(1)
	}
	return d, nil
}

// chargeOutage charges to Redis what the fallback admitted while it was
// unavailable, once the breaker of node has closed: for that server's keys
// (all keys, but with a cluster), one pipeline, bounded by the timeout, on a
// goroutine Close waits for (for one timeout at most).
func (e *Engine) chargeOutage(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var back func(*remote.Policy, string) bool
	if e.sharded {
		back = func(p *remote.Policy, key string) bool { return e.store.Node(ctx, p, key) == node }
	}
	n, err := guard.Do(&e.guards, ctx, func(ctx context.Context) (int64, error) {
		return e.fallback.charge(ctx, e.store, back)
	}, nil)
	if errors.Is(err, guard.ErrClosed) {
		return
	}
	e.stats.roundTrips.Add(1)
	if err != nil {
		e.stats.errors.Add(1)
	}
	e.stats.charged.Add(uint64(n))
}

// Allow decides whether n units of key may be used now, charging them if so.
// A denial is a Decision, never an error. It is Hit, then Miss.
func (e *Engine) Allow(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if limit, remaining, resetAfter, ok := e.Hit(p, key, n); ok {
		return hitDecision(limit, remaining, resetAfter), nil
	}
	return e.Miss(ctx, p, key, n)
}

// Hit is the hit path: it takes n units of key from the local allowance if
// it holds them, with a lookup, a clock reading and a compare-and-swap (no
// lock, no allocation, no Redis call), and starts a background lease when
// the allowance runs low. On a hit it returns what a Decision of Source
// Local holds (it is Allowed, with no RetryAfter): the deciding limit's
// index, the remaining estimate, the time until full replenishment. The
// results are scalars, passed in registers: a Decision would be built and
// copied through memory, which costs a hit a third of its time. ok is false
// on a miss (or a closed engine, or a policy that does not lease): the
// caller goes on with Miss.
func (e *Engine) Hit(p *remote.Policy, key string, n int64) (limit int, remaining int64, resetAfter time.Duration, ok bool) {
	if e.closed.Load() || e.leaser == nil || !Leasable(p) {
		return 0, 0, 0, false
	}
	t := e.table(p)
	now := e.leaser.Now()
	ent, found := t.Get(key)
	if !found || !ent.Take(n, now) {
		return 0, 0, 0, false
	}
	e.afterTake(p, ent)
	limit, remaining, resetAfter = hitState(p, ent, now)
	return limit, remaining, resetAfter, true
}

// afterTake starts a background lease for ent if its allowance ran low
// with the take.
func (e *Engine) afterTake(p *remote.Policy, ent *local.Entry) {
	if ent.Units() < ent.LowWater.Load() {
		// The breaker is asked only when a lease would start: with a
		// cluster, naming the key's master costs a lookup and allocations,
		// too much for every hit below low water. Units were leased, so the
		// cluster's layout is loaded, and the lookup needs no timer.
		e.leaser.Prefetch(p, ent, func() bool {
			return e.breakerOf(context.Background(), p, ent.Key).State() == BreakerClosed
		})
	}
}

// Miss decides a request that Hit did not answer: from a cached denial,
// a lease, one exact Redis call, or the failure mode.
func (e *Engine) Miss(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	if e.closed.Load() {
		return Decision{}, ErrClosed
	}
	if e.leaser != nil && Leasable(p) {
		return e.allowLeased(ctx, p, e.table(p), key, n, e.leaser.Now())
	}
	return e.allowExact(ctx, p, key, n)
}

// allowExact decides with one Redis call, or by the failure mode.
func (e *Engine) allowExact(ctx context.Context, p *remote.Policy, key string, n int64) (Decision, error) {
	d, cause, err := e.acquireGuarded(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n})
	if err != nil {
		return Decision{}, err
	}
	if cause != nil {
		return e.unavailable(p, key, n, cause)
	}
	return e.decided(d), nil
}

// acquireGuarded makes one acquire call through the breaker. cause is not
// nil when Redis could not decide (the breaker is open, or the call failed);
// err is the caller's context error.
func (e *Engine) acquireGuarded(ctx context.Context, r remote.Request) (d remote.Decision, cause, err error) {
	b := e.breakerFor(r.Policy, r.Key)
	ok, probe, cause := b.allow(e.nanos())
	if !ok {
		return remote.Decision{}, cause, nil
	}
	d, err = e.acquire(ctx, r)
	return d, e.outcome(b, probe, err), e.callerErr(err)
}

// outcome reports a call's result to the breaker and returns the cause of a
// Redis failure, or nil (success, or the caller's own context ended).
func (e *Engine) outcome(b *breaker, probe bool, err error) error {
	switch {
	case err == nil:
		b.success()
		return nil
	case errors.Is(err, ErrUnavailable):
		b.failure(e.nanos(), probe, err)
		return err
	default: // the caller's context, or closed
		if probe {
			b.abort(e.nanos())
		}
		return nil
	}
}

// callerErr is err unless it is a Redis failure (which the failure mode
// handles).
func (e *Engine) callerErr(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return nil
	}
	return err
}

// Wait blocks until n units of key are granted, or ctx ends. It sleeps on
// the engine's clock for each denial's RetryAfter, and returns at once with
// context.DeadlineExceeded when ctx's deadline comes before the units could.
// A leaky bucket in the policy queues the request (reserving its slot)
// instead of polling; a wait cancelled before its slot gives the slot back.
func (e *Engine) Wait(ctx context.Context, p *remote.Policy, key string, n int64) error {
	if e.leaser != nil && Leasable(p) {
		for {
			if e.closed.Load() {
				return ErrClosed
			}
			d, err := e.Allow(ctx, p, key, n)
			if err != nil || d.Allowed {
				return err
			}
			if err := e.sleep(ctx, d.RetryAfter); err != nil {
				return err
			}
		}
	}
	reserve := p.Uses(remote.LeakyBucket) // a leaky bucket's Wait reserves a slot
	for {
		if e.closed.Load() {
			return ErrClosed
		}
		d, cause, err := e.acquireGuarded(ctx, remote.Request{Policy: p, Key: key, Min: n, Max: n, Reserve: reserve})
		if err != nil {
			return err
		}
		if cause != nil { // Redis unavailable: the failure mode decides
			fd, err := e.unavailable(p, key, n, cause)
			if err != nil || fd.Allowed {
				return err
			}
			if err := e.sleep(ctx, fd.RetryAfter); err != nil {
				return err
			}
			continue
		}
		e.decided(d)
		if d.Granted > 0 {
			if d.Wait <= 0 {
				return nil
			}
			if err := e.sleep(ctx, d.Wait); err != nil {
				e.giveBack(p, key, d)
				return err
			}
			return nil
		}
		if err := e.sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// Leasable reports whether p's decisions may come from leases: not when it
// has a SlidingWindowLog (exact by choice: its entries are its accuracy) or
// a LeakyBucket (its point is spacing, which a batch of units would break).
func Leasable(p *remote.Policy) bool {
	return !p.Uses(remote.SlidingWindowLog) && !p.Uses(remote.LeakyBucket)
}

// table returns the local table of p, making it on first use. The first
// engine to use p claims it and finds its table there without hashing.
func (e *Engine) table(p *remote.Policy) *local.Table {
	if t, ok := p.Claimed(e); ok {
		return t.(*local.Table)
	}
	return e.newTable(p)
}

// newTable returns p's table from the map, making it if needed, and claims p.
func (e *Engine) newTable(p *remote.Policy) *local.Table {
	v, loaded := e.tables.Load(p)
	if !loaded {
		v, _ = e.tables.LoadOrStore(p, e.leaser.NewTable(p))
	}
	t := v.(*local.Table)
	if !e.closed.Load() {
		p.Claim(e, t)
	}
	return t
}

// allowLeased decides a request that missed the allowance at now: from a
// cached denial, or units that came in meanwhile, or else by leasing (one
// Redis call, coalesced with concurrent misses on the key), keeping n units
// of the grant.
func (e *Engine) allowLeased(ctx context.Context, p *remote.Policy, t *local.Table, key string, n, now int64) (Decision, error) {
	ent := t.GetOrCreate(key)
	if d, done := e.fromLocal(p, ent, n, now); done {
		return d, nil
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	b := e.breakerFor(p, key)
	ok, probe, cause := b.allow(e.nanos())
	if !ok {
		return e.unavailable(p, key, n, cause)
	}
	lctx, cancel := e.bounded(ctx)
	defer cancel()
	d, taken, err := e.leaser.Lease(lctx, p, ent, n)
	if err != nil {
		switch {
		case errors.Is(err, leasesync.ErrClosed):
			err = ErrClosed
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if cause := e.outcome(b, probe, err); cause != nil {
			return e.unavailable(p, key, n, cause)
		}
		return Decision{}, err
	}
	b.success()
	if taken { // a concurrent lease filled the allowance
		return e.localDecision(p, ent, now), nil
	}
	if d.Granted == 0 && d.RetryAfter == 0 { // a concurrent lease was denied
		if dd, done := e.fromLocal(p, ent, n, e.leaser.Now()); done {
			return dd, nil
		}
	}
	dec := e.decided(d)
	// What Redis has left, and what this instance holds (charged in Redis,
	// not used: see hitState).
	held := ent.Units()
	dec.Remaining += held
	dec.ResetAfter = max(0, dec.ResetAfter-time.Duration(held*p.UnitRefill(dec.Limit)))
	return dec, nil
}

// fromLocal answers from ent if it can: units taken from the allowance
// (then perhaps a prefetch), or a cached denial. Units held are used first,
// even while Redis denies the key: a prefetch may have been denied while
// some were left. done is false on a miss.
func (e *Engine) fromLocal(p *remote.Policy, ent *local.Entry, n, now int64) (Decision, bool) {
	if ent.Take(n, now) {
		e.afterTake(p, ent)
		return e.localDecision(p, ent, now), true
	}
	if denied, left := ent.Denied(now, n); denied {
		ent.Asked.Add(n) // wanted all the same: the demand counts it
		e.stats.cached.Add(1)
		e.stats.denied.Add(1)
		// Remaining: what Redis last said it had left, and what this
		// instance holds (too few for n).
		return Decision{Source: Cached, Limit: int(ent.Decider.Load()), RetryAfter: time.Duration(left),
			Remaining:  ent.Remaining.Load() + ent.Units(),
			ResetAfter: time.Duration(max(0, ent.ResetAt.Load()-now))}, true
	}
	return Decision{}, false
}

// localDecision is the Decision of a hit on ent at now.
func (e *Engine) localDecision(p *remote.Policy, ent *local.Entry, now int64) Decision {
	return hitDecision(hitState(p, ent, now))
}

// hitState is what a hit on ent at now reports: the deciding limit; the
// remaining estimate, what Redis had left at the last lease plus what this
// instance holds; and the time until full replenishment, Redis's at the last
// lease less what the units held would take to refill a token bucket (they
// are charged in Redis, but not used).
func hitState(p *remote.Policy, ent *local.Entry, now int64) (limit int, remaining int64, resetAfter time.Duration) {
	limit = int(ent.Decider.Load())
	held := ent.Units()
	return limit, ent.Remaining.Load() + held, time.Duration(max(0, ent.ResetAt.Load()-now-held*p.UnitRefill(limit)))
}

// hitDecision is the Decision of a hit, from hitState's results.
func hitDecision(limit int, remaining int64, resetAfter time.Duration) Decision {
	return Decision{Allowed: true, Source: Local, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}

// sleep waits d on the engine's clock, or returns ctx's error; at once when
// ctx's deadline is sooner than d.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// giveBack refunds a grant the caller will not use. The caller's context
// is over, so the refund gets its own, bounded by the timeout; if Redis
// cannot take it, the units come back by themselves when their state expires.
func (e *Engine) giveBack(p *remote.Policy, key string, d remote.Decision) {
	if !e.guard {
		e.refund(p, key, d)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	_, _ = guard.Do(&e.guards, ctx, func(context.Context) (struct{}, error) {
		e.refund(p, key, d)
		return struct{}{}, nil
	}, nil)
}

// refund makes one refund call on the calling goroutine, bounded by the
// timeout.
func (e *Engine) refund(p *remote.Policy, key string, d remote.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	e.stats.roundTrips.Add(1)
	if err := e.store.Refund(ctx, p, key, d.Granted, d.At); err != nil {
		e.stats.errors.Add(1)
	}
}

// bounded returns ctx limited to the Redis timeout, unless ctx's own
// deadline is sooner (then ctx itself, and no timer is made).
func (e *Engine) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= e.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, e.timeout)
}

// acquire makes one acquire call, bounded by the timeout and ctx. Errors
// are ctx's, unwrapped, ErrClosed, or wrap ErrUnavailable. With Guard, the
// call runs on its own goroutine (package guard), and a grant that arrives
// after the deadline is refunded there.
func (e *Engine) acquire(ctx context.Context, r remote.Request) (remote.Decision, error) {
	if err := ctx.Err(); err != nil {
		return remote.Decision{}, err
	}
	rctx, cancel := e.bounded(ctx)
	defer cancel()
	var d remote.Decision
	var err error
	if e.guard {
		d, err = guard.Do(&e.guards, rctx,
			func(ctx context.Context) (remote.Decision, error) { return e.store.Acquire(ctx, r) },
			func(late remote.Decision, err error) {
				if err == nil && late.Granted > 0 {
					e.refund(r.Policy, r.Key, late) // already on a tracked goroutine
				}
			})
		if errors.Is(err, guard.ErrClosed) {
			return remote.Decision{}, ErrClosed
		}
	} else {
		d, err = e.store.Acquire(rctx, r)
	}
	e.stats.roundTrips.Add(1)
	if err != nil {
		e.stats.errors.Add(1)
		if cerr := ctx.Err(); cerr != nil {
			return remote.Decision{}, cerr
		}
		return remote.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return d, nil
}

// decided counts a Redis decision and converts it.
func (e *Engine) decided(d remote.Decision) Decision {
	e.stats.remote.Add(1)
	if d.Granted > 0 {
		e.stats.allowed.Add(1)
	} else {
		e.stats.denied.Add(1)
	}
	return Decision{
		Allowed:    d.Granted > 0,
		Source:     Remote,
		Limit:      d.Decider,
		Remaining:  d.Remaining,
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
	}
}

// eachBreaker calls f with every breaker.
func (e *Engine) eachBreaker(f func(*breaker)) {
	f(e.breaker)
	e.breakers.Range(func(_, b any) bool {
		f(b.(*breaker))
		return true
	})
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	st := Stats{
		Allowed: s.allowed.Load(), Denied: s.denied.Load(),
		Remote: s.remote.Load(), Cached: s.cached.Load(), Fallback: s.fallback.Load(),
		RoundTrips: s.roundTrips.Load(), Errors: s.errors.Load(), Instances: 1,
		UnitsCharged: s.charged.Load(),
	}
	e.eachBreaker(func(b *breaker) {
		// The worst: open, then half-open, then closed.
		if bs := b.State(); bs == BreakerOpen || bs == BreakerHalfOpen && st.Breaker == BreakerClosed {
			st.Breaker = bs
		}
		st.BreakerOpens += b.opens.Load()
	})
	if e.leaser != nil {
		ls := e.leaser.Stats()
		st.Local = e.leaser.LocalHits()
		st.Allowed += st.Local
		st.RoundTrips += ls.RoundTrips
		st.Errors += ls.Errors
		st.Leases, st.UnitsLeased, st.UnitsRefunded, st.UnitsExpired = ls.Leases, ls.UnitsLeased, ls.UnitsRefunded, ls.UnitsExpired
		st.Instances = ls.Instances
	}
	return st
}

// Close makes every later call fail with ErrClosed and closes the Leaser,
// which refunds every unit held. It returns within about one Redis timeout,
// even on a hung Redis with a client that does not honour deadlines: guarded
// calls still running then are left to end at the client's own timeouts,
// and refund what they are granted late themselves. It is idempotent and
// returns nil.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	// One timeout for all of Close: the leaser's refunds, then what is left
	// of it for guarded calls still running.
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if e.leaser != nil {
		e.leaser.Close() // refunds every unit held, within its own timeout
		e.tables.Range(func(p, _ any) bool {
			p.(*remote.Policy).Unclaim(e)
			return true
		})
	}
	e.guards.Close(ctx)
	return nil
}
