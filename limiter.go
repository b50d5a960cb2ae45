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
// deployment. Make it with New; it is safe for concurrent use. Several
// Limiters (in one process or many) that share a Redis and a key prefix
// share every limit. The state of a key lives in Redis under
// <prefix>:{<policy>:<key>}:<limit>; the hash tag keeps all limits of one
// key in one Redis Cluster slot.
//
// Besides the decisions (Allow, AllowN, Wait, WaitN), a Limiter serves
// operators: Peek, Reset, AllowAtMost and Refund; Block and Unblock, which
// deny a key on every instance for a while (Result.Blocked); and
// Policy.Shadow, a policy whose would-be denials are admitted, marked
// (Result.Shadowed) and counted (PolicyStats.ShadowDenied), to roll a
// limit out safely.
//
// While Redis is unavailable, a circuit breaker stops calling it and the
// failure mode decides (WithFailureMode: FailLocal, FailOpen, FailClosed).
// Stats counts what happened; WithEvents tells it as it happens, with the
// cause: the first failure, each change of the breaker, and a warning of a
// Redis whose maxmemory-policy may evict limiter keys.
type Limiter struct {
	engine *tier.Engine
}

// Result is the decision on one request.
type Result struct {
	// Allowed reports whether the request was admitted (and charged, but
	// when Shadowed).
	Allowed bool
	// Limit is the limit that decided: when denied, the denying limit that
	// frees up last; when allowed, the one with the fewest units left.
	Limit Limit
	// Remaining is the best estimate of the units the deciding limit could
	// still admit now, across all instances. For LeakyBucket it is 0 while
	// the queue is busy.
	Remaining int
	// RetryAfter is 0 when allowed; when denied, how long until the same n
	// could next be admitted (if nobody else takes the units first). When
	// Shadowed it is the would-be denial's; when Blocked, the time left of
	// the block (as far as this instance knows: within the lease TTL in
	// lease mode); when FairShare, this instance's wait for its share. In
	// lease mode, a denial from memory (SourceCached) of more units than
	// Redis denied says the time for the fewer: a lower bound.
	RetryAfter time.Duration
	// ResetAfter is how long until the deciding limit is fully
	// replenished, as if nothing more were admitted.
	ResetAfter time.Duration
	// Source says where the decision came from.
	Source Source
	// Granted is the number of units admitted (and charged): n for an
	// admitted Allow or AllowN, 0 when denied, 1 to n for AllowAtMost. For
	// Peek, which charges nothing, it is the 1 unit Allow would admit, or 0.
	// When Shadowed it is n, none of them charged.
	Granted int
	// Shadowed reports a would-be denial admitted because the policy is in
	// shadow mode (Policy.Shadow): Allowed is true, nothing was charged,
	// and the other fields are the denial's. False otherwise.
	Shadowed bool
	// Blocked reports a denial because the key is blocked under the policy
	// (Limiter.Block): RetryAfter and ResetAfter are the block's time left,
	// Remaining is 0 and Limit is the policy's first limit. False otherwise.
	Blocked bool
	// FairShare reports a denial in lease mode by this instance's fair
	// share of the key while the limits themselves had room for the
	// request: other instances hold or are owed it. RetryAfter is then
	// this instance's wait for its share. Wherever the limits deny,
	// RetryAfter and ResetAfter are exact mode's and FairShare is false.
	FairShare bool
	// Debt is, for Charge, the units Limit (the limit where one unit fits
	// last) owes beyond its room after the charge: the key is denied until
	// Limit has freed them and one more (RetryAfter, for one unit). 0
	// otherwise.
	Debt int
	// Receipt names the admission for Settle: set by an admitting AllowN,
	// AllowAtMost or Charge; the zero Receipt for a denial, a shadowed
	// admission, the failure mode's (SourceFallback), and Peek.
	Receipt Receipt
}

// Receipt names an admission, for Settle: when its units were granted, by
// Redis's clock, which tells the window (or the bucket state) they came
// from. The zero Receipt names none. A Receipt is a small comparable
// value: copy it, keep it with the work, compare it with ==.
type Receipt struct {
	// at is Redis's time (µs since the Unix epoch) of the grant the units
	// came from, or, for units held in lease mode, this instance's reading
	// of it when they were taken (see Settle); 0 for none. An int, not a
	// time.Time: == compares it.
	at int64
}

// At returns the admission's time by Redis's clock (in lease mode, for
// units held, this instance's reading of it when they were taken): the
// zero Time for the zero Receipt.
func (r Receipt) At() time.Time {
	if r.at == 0 {
		return time.Time{}
	}
	return time.UnixMicro(r.at)
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
	// SourceCached: a denial answered locally: Redis denied this key
	// moments ago (less than a lease TTL), and its RetryAfter has not
	// passed, so it is not asked again.
	SourceCached
	// SourceBusy: a denial because Redis is busy: the call timed out while
	// Redis answered other calls within the last second (an overloaded
	// Redis, not one that is gone). Whatever the failure mode, the request
	// is denied, RetryAfter the Redis timeout: the failure mode would
	// admit beside what Redis admits to the other instances.
	SourceBusy
)

// The sources' names before they took the prefix of their family.
const (
	// Local is SourceLocal.
	//
	// Deprecated: use SourceLocal.
	Local Source = SourceLocal
	// Remote is SourceRemote.
	//
	// Deprecated: use SourceRemote.
	Remote Source = SourceRemote
	// Fallback is SourceFallback.
	//
	// Deprecated: use SourceFallback.
	Fallback Source = SourceFallback
	// Cached is SourceCached.
	//
	// Deprecated: use SourceCached.
	Cached Source = SourceCached
)

// String returns "local", "remote", "fallback", "cached", "busy", or
// "none" for the zero value.
func (s Source) String() string { return tier.Source(s).String() }

// MarshalText makes the source a word in JSON and logs, as String says it.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// New returns a Limiter that keeps its limits in client: any
// redis.UniversalClient (*redis.Client, *redis.ClusterClient, *redis.Ring,
// a failover client). The client stays the caller's: Close does not close it.
// To a *redis.Client or a *redis.ClusterClient, New adds a hook (once per
// client, however many Limiters use it) through which the Limiter hears
// of the client's dials that fail: a call of the Limiter that waits for a
// connection ends then, with the dial's error (connection refused, a name
// that does not resolve, a failed TLS handshake), rather than at the Redis
// timeout. The hook changes nothing else of the client's dials or commands.
// A nil client or an invalid option is an error wrapping ErrInvalidOption.
func New(client redis.UniversalClient, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		// A nil *redis.Client (or ClusterClient...) in the interface: not
		// nil itself, and every method of it would panic.
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
	engine, err := tier.New(tier.Config{
		Store:   store,
		Clock:   cfg.clock,
		Timeout: cfg.redisTimeout,
		Guard:   !remote.HonoursDeadlines(client),
		Lease:   lease,

		FailureMode: tier.FailureMode(cfg.failure),
		Instances:   int64(cfg.instances),
		MaxKeys:     cfg.maxKeys,
		Observer:    observer(cfg.observer),
		Events:      events(cfg.events),
		RedisHook:   doorHook(cfg.redisHook),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, rootErr(err))
	}
	l := &Limiter{engine: engine}
	// A Limiter dropped without Close: its goroutines (the lease batcher,
	// the sweeper, the coarse clock) hold the engine, not l, so l becomes
	// unreachable and the engine is closed then, giving its units back
	// and leaving its keys' members.
	runtime.AddCleanup(l, func(e *tier.Engine) { _ = e.Close() }, engine)
	return l, nil
}

// Allow is AllowN(ctx, p, key, 1).
func (l *Limiter) Allow(ctx context.Context, p *Policy, key string) (Result, error) {
	return l.AllowN(ctx, p, key, 1)
}

// AllowN decides whether n units (events, or the cost of one weighted
// request) of key may happen now under every limit of p, and charges them
// if so. A denial is a Result with Allowed false, never an error. Errors:
// ErrInvalidPolicy, ErrInvalidKey, ErrInvalidN, ErrExceedsCapacity,
// ErrUnavailable (with its cause; only with FailClosed), ErrClosed, or ctx's
// error unwrapped.
func (l *Limiter) AllowN(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.check(p, key, n); err != nil {
		return Result{}, err
	}
	if limit, remaining, resetAfter, ok := l.engine.Hit(p.compiled, key, int64(n)); ok {
		return Result{Allowed: true, Limit: p.limits[limit], Remaining: int(remaining), ResetAfter: resetAfter, Source: SourceLocal, Granted: n,
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

// admission is p.result(d) for a decision that admits units (AllowN,
// AllowAtMost, Charge), naming its grant for Settle: Redis's time of it,
// or for units held this instance's reading of Redis's clock. The failure
// mode's admissions name none: Redis did not charge them.
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

// WaitN blocks until n units of key are admitted under every limit of p,
// sleeping for each denial's RetryAfter. With a LeakyBucket in p it queues:
// it reserves its slot (up to Burst units may wait) and sleeps until it.
// Decided exactly (WithExact, or a policy that does not lease), a policy of
// buckets only (TokenBucket, LeakyBucket) reserves too, as x/time/rate's
// WaitN does: the units are taken now, one Redis call, and used when they
// conform (up to Burst or a Period's Rate of units, whichever is more, may
// wait beyond the bucket); and the waiters of a key in this Limiter queue,
// first come first served, only the first asking Redis.
// It returns ctx's error, unwrapped, when ctx ends first, and
// context.DeadlineExceeded at once when the deadline would pass before the
// units could be admitted; a slot it reserved is then given back. Close
// wakes it: it returns ErrClosed at once (giving back a reserved slot).
// Other errors are AllowN's. Under a policy in shadow mode it never waits:
// it is AllowN, and a would-be denial returns nil at once (Policy.Shadow).
func (l *Limiter) WaitN(ctx context.Context, p *Policy, key string, n int) error {
	if err := l.check(p, key, n); err != nil {
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

// check validates a request's arguments. A refusal counts in
// Stats.Invalid: the one place the root counts it, on the error path.
func (l *Limiter) check(p *Policy, key string, n int) error {
	var err error
	switch {
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
	default:
		return nil
	}
	l.engine.CountInvalid()
	return err
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

// Close stops the Limiter: it gives every leased unit it holds back to
// Redis, leaves its keys' members, wakes every Wait and WaitN in progress,
// which return ErrClosed at once, and every later call returns ErrClosed.
// It is idempotent. It does not close the Redis client. A Limiter dropped
// without Close is closed when the garbage collector finds it unreachable
// (its goroutines do not keep it alive); Close says when.
func (l *Limiter) Close() error {
	if err := l.engine.Close(); err != nil {
		return rootErr(err)
	}
	return nil
}
