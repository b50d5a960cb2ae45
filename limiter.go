package ratelease

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
	"github.com/ratelease/ratelease/tier"
)

// Limiter enforces policies for any number of keys against one Redis
// deployment. Make it with New; it is safe for concurrent use. Limiters, in
// one process or many, that share a Redis and a key prefix share every
// limit. While Redis is unavailable, a circuit breaker stops calling it
// and the failure mode decides (WithFailureMode).
type Limiter struct {
	engine *tier.Engine
}

// Result is the decision on one request.
type Result struct {
	// Allowed reports whether the request was admitted (and charged,
	// unless Shadowed).
	Allowed bool
	// Source says where the decision came from.
	Source Source
	// Shadowed reports a would-be denial admitted because the policy is in
	// shadow mode (Policy.Shadow): nothing was charged, and the other
	// fields are the denial's.
	Shadowed bool
	// Blocked reports a denial because the key is blocked (Limiter.Block):
	// RetryAfter and ResetAfter are the block's time left.
	Blocked bool
	// FairShare reports a denial in lease mode by this instance's fair
	// share of the key while the limits had room: other instances hold or
	// are owed it, and RetryAfter is this instance's wait for its share.
	FairShare bool
	// Limit is the limit that decided: when denied, the denying limit that
	// frees up last; when allowed, the one with the fewest units left.
	Limit Limit
	// Remaining is the best estimate of the units the deciding limit could
	// still admit now, across all instances.
	Remaining int
	// RetryAfter is 0 when allowed; when denied, how long until the same n
	// could next be admitted, if nobody else takes the units first (a lower
	// bound for a SourceCached denial of more units than Redis denied).
	RetryAfter time.Duration
	// ResetAfter is how long until the deciding limit is fully
	// replenished, as if nothing more were admitted.
	ResetAfter time.Duration
	// Granted is the number of units admitted: n for AllowN, 1 to n for
	// AllowAtMost, 0 when denied. Peek says what Allow would admit.
	Granted int
	// Debt is, for Charge, the units Limit owes beyond its room: the key
	// is denied until they are paid off (RetryAfter).
	Debt int
	// Receipt names the admission for Settle; zero when nothing was
	// charged in Redis (a denial, Shadowed, SourceFallback, Peek).
	Receipt Receipt
}

// Receipt names an admission, for Settle: when Redis granted its units,
// which tells the window they came from. It is a small comparable value.
type Receipt struct {
	at int64 // Redis's time of the grant, µs since the epoch; 0 for none
}

// Source says where a decision came from. The zero value means no decision
// was made (the Result of an error).
type Source uint8

// The sources of a decision.
const (
	// SourceLocal: answered from a local allowance, without a Redis call.
	SourceLocal Source = iota + 1
	// SourceRemote: answered by one atomic Redis call.
	SourceRemote
	// SourceFallback: answered by the outage fallback while Redis is
	// unavailable.
	SourceFallback
	// SourceCached: a denial answered locally: Redis denied this key less
	// than a lease TTL ago, and its RetryAfter has not passed.
	SourceCached
	// SourceBusy: a denial because Redis is busy (the call timed out while
	// Redis answers others): the failure mode would admit beside what
	// Redis admits to other instances.
	SourceBusy
)

// String returns "local", "remote", "fallback", "cached", "busy", or
// "none" for the zero value.
func (s Source) String() string { return tier.Source(s).String() }

// MarshalText makes the source a word in JSON, as String says it.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// New returns a Limiter that keeps its limits in client, any
// redis.UniversalClient; Close does not close it. New never waits for
// Redis. To a *redis.Client or *redis.ClusterClient it adds a hook that
// ends a call waiting for a connection as soon as the dial fails. A nil
// client or an invalid option is an error wrapping ErrInvalidOption.
func New(client redis.UniversalClient, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		// A typed nil in the interface: every method would panic.
		return nil, fmt.Errorf("%w: nil redis client (%T)", ErrInvalidOption, client)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	var lease *leasesync.Config
	if !cfg.exact {
		lc := cfg.lease
		lease = &leasesync.Config{
			Min: int64(lc.Min), Max: int64(lc.Max), Refresh: lc.Refresh, TTL: lc.TTL, LowWater: lc.LowWater,
			MaxKeys: cfg.maxKeys,
		}
	}
	store := remote.NewStore(client, cfg.prefix)
	store.SetClock(cfg.clock) // calendar windows move with the Limiter's clock
	var global *remote.Store
	if cfg.global != nil {
		global = remote.NewStore(cfg.global, cfg.prefix+":world")
		global.SetClock(cfg.clock)
	}
	engine, err := tier.New(tier.Config{
		Store:   store,
		Clock:   cfg.clock,
		Timeout: cfg.redisTimeout,
		Guard:   !remote.HonoursDeadlines(client),
		Lease:   lease,

		FailureMode: tier.FailureMode(cfg.failure),
		Instances:   int64(cfg.instances),
		MaxKeys:     cfg.maxKeys,
		Events:      events(cfg.events),
		RedisHook:   doorHook(cfg.redisHook),
		Global:      global,
		GlobalGuard: cfg.global != nil && !remote.HonoursDeadlines(cfg.global),
		Region:      cfg.region,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, rootErr(err))
	}
	l := &Limiter{engine: engine}
	// The engine's goroutines hold the engine, not l: a Limiter dropped
	// without Close becomes unreachable, and its engine is closed then.
	runtime.AddCleanup(l, func(e *tier.Engine) { _ = e.Close() }, engine)
	return l, nil
}

// Allow is AllowN(ctx, p, key, 1).
func (l *Limiter) Allow(ctx context.Context, p *Policy, key string) (Result, error) {
	return l.AllowN(ctx, p, key, 1)
}

// AllowN decides whether n units of key may happen now under every limit
// of p, and charges them if so. A denial is a Result, never an error.
// Errors: ErrInvalidPolicy, ErrInvalidKey, ErrInvalidN, ErrExceedsCapacity,
// ErrUnavailable (only with FailClosed), ErrClosed, or ctx's error.
func (l *Limiter) AllowN(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.check(ctx, p, key, n); err != nil {
		return Result{}, err
	}
	if limit, remaining, resetAfter, ok := l.engine.Hit(p.compiled, key, int64(n)); ok {
		return Result{Allowed: true, Limit: p.limit(limit), Remaining: int(remaining), ResetAfter: resetAfter, Source: SourceLocal, Granted: n,
			Receipt: Receipt{l.engine.RedisTime()}}, nil
	}
	d, err := l.engine.Miss(ctx, p.compiled, key, int64(n))
	if err != nil {
		return Result{}, rootErr(err)
	}
	if d.Allowed {
		d.Granted = int64(n)
	}
	return l.shadowed(p, l.admission(p, d), n), nil
}

// admission is p.result(d) with its Receipt, for a decision that admits
// units; the failure mode's name none (Redis did not charge them).
func (l *Limiter) admission(p *Policy, d tier.Decision) Result {
	r := p.result(d)
	switch {
	case !d.Allowed || d.Source == tier.SourceFallback:
	case d.At != 0:
		r.Receipt.at = d.At
	default:
		r.Receipt.at = l.engine.RedisTime()
	}
	return r
}

// shadowed returns r, a decision on p, admitted for n units when it is a
// denial and p is in shadow mode, charging nothing, and counts it so.
func (l *Limiter) shadowed(p *Policy, r Result, n int) Result {
	if r.Allowed || !p.shadow {
		return r
	}
	l.engine.CountShadowDenied(p.compiled)
	r.Allowed, r.Granted, r.Shadowed, r.Receipt = true, n, true, Receipt{}
	return r
}

// Wait is WaitN(ctx, p, key, 1).
func (l *Limiter) Wait(ctx context.Context, p *Policy, key string) error {
	return l.WaitN(ctx, p, key, 1)
}

// WaitN blocks until n units of key are admitted under every limit of p.
// A LeakyBucket, and in exact mode a policy of buckets only, reserves its
// slot as x/time/rate's WaitN does; waiters of a key queue first come,
// first served (docs/exact-mode.md). It returns ctx's error when ctx ends
// first, context.DeadlineExceeded at once when the deadline would pass
// before the units could be admitted, and ErrClosed when Close wakes it; a
// reserved slot is then given back. Other errors are AllowN's. Under a
// shadow policy it is AllowN and never waits.
func (l *Limiter) WaitN(ctx context.Context, p *Policy, key string, n int) error {
	if err := l.check(ctx, p, key, n); err != nil {
		return err
	}
	if p.shadow {
		_, err := l.AllowN(ctx, p, key, n)
		return err
	}
	if err := l.engine.Wait(ctx, p.compiled, key, int64(n)); err != nil {
		return rootErr(err)
	}
	return nil
}

// check validates a request's arguments, counting a refusal.
func (l *Limiter) check(ctx context.Context, p *Policy, key string, n int) error {
	var err error
	switch {
	case ctx == nil:
		err = ErrNilContext
	case p == nil:
		err = fmt.Errorf("%w: nil policy", ErrInvalidPolicy)
	case p.compiled == nil:
		err = fmt.Errorf("%w: a zero Policy: make one with NewPolicy", ErrInvalidPolicy)
	case key == "" || len(key) > MaxKeyLen:
		err = checkKey(key)
	case n <= 0:
		err = fmt.Errorf("%w: %d", ErrInvalidN, n)
	case n > p.Capacity():
		err = fmt.Errorf("%w: %d > %d of policy %q", ErrExceedsCapacity, n, p.Capacity(), p.name)
	case p.compiled.Global() != nil:
		if err = l.checkWorldwide(p); err == nil {
			return nil
		}
	default:
		return nil
	}
	l.engine.CountInvalid()
	return err
}

// checkWorldwide reports why l cannot decide the worldwide policy p,
// wrapping ErrInvalidPolicy, or nil.
func (l *Limiter) checkWorldwide(p *Policy) error {
	if !l.engine.Worldwide() {
		return fmt.Errorf("%w: policy %q is worldwide, and the Limiter has no global Redis (WithGlobal)", ErrInvalidPolicy, p.name)
	}
	for _, lim := range p.limits {
		if lim.Algorithm == SlidingWindowLog || lim.Algorithm == LeakyBucket {
			return fmt.Errorf("%w: policy %q: a %v cannot be worldwide (a regional pool would change its semantics)", ErrInvalidPolicy, p.name, lim.Algorithm)
		}
	}
	return nil
}

// checkKey reports why key cannot be a key, wrapping ErrInvalidKey, or nil.
func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// Close gives every leased unit back to Redis and stops the Limiter: Waits
// in progress and every later call return ErrClosed. It is idempotent and
// does not close the Redis client. A Limiter dropped without Close is
// closed when the garbage collector finds it.
func (l *Limiter) Close() error {
	if err := l.engine.Close(); err != nil {
		return rootErr(err)
	}
	return nil
}
