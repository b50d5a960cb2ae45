package tier

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// Source says where a decision came from.
type Source uint8

// The sources of a decision. The zero value means no decision was made.
const (
	// SourceLocal: from a local allowance leased earlier; no Redis call.
	SourceLocal Source = iota + 1
	// SourceRemote: from one call to Redis.
	SourceRemote
	// SourceFallback: from the outage fallback, Redis being unavailable.
	SourceFallback
	// SourceCached: a denial repeated locally: Redis denied this key moments ago
	// (less than a lease TTL), and its RetryAfter has not passed.
	SourceCached
	// SourceBusy: a denial because Redis is busy: the call timed out while Redis
	// answers other calls (door.ErrBusy), and the request is denied for
	// the Redis timeout rather than decided by the failure mode.
	SourceBusy
)

// String returns "local", "remote", "fallback", "cached", "busy", or
// "none" for the zero value.
func (s Source) String() string {
	switch s {
	case SourceLocal:
		return "local"
	case SourceRemote:
		return "remote"
	case SourceFallback:
		return "fallback"
	case SourceCached:
		return "cached"
	case SourceBusy:
		return "busy"
	}
	return "none"
}

// MarshalText makes the source a word in JSON and logs, as String says it.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Decision is the engine's answer to one request.
type Decision struct {
	Allowed bool
	Source  Source
	// Limit is the index in the policy of the limit that decided.
	Limit      int
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	// Granted is the units admitted: set by AllowAtMost (and Peek, 1 or
	// 0); the root sets it for Allow, whose grant is n or nothing.
	Granted int64
	// Blocked: denied because the key is blocked (Block); RetryAfter is
	// the block's time left, as far as this instance knows it.
	Blocked bool
	// FairShare: denied by this instance's fair share of the key while
	// the limits had room (lease mode); RetryAfter is the share's wait.
	FairShare bool
	// Debt: set by Charge, the units Limit owes beyond its room.
	Debt int64
	// At: Redis's time (µs) of a decision Redis made (remote.Decision.At),
	// for settling it (RefundAt); 0 for the others: the caller reads
	// RedisTime for a decision from units held.
	At int64
}

// Config configures an Engine. Every field but Lease, Events and
// RedisHook is required.
type Config struct {
	Store *remote.Store
	Clock clock.Clock
	// Timeout bounds every Redis call, on top of the caller's context.
	Timeout time.Duration
	// Guard runs each Redis call on its own goroutine and stops waiting for
	// it at the deadline: for clients that do not honour context deadlines
	// themselves (see remote.HonoursDeadlines).
	Guard bool
	// Lease, when not nil, enables leasing: New starts a Leaser with it,
	// and policies that can lease are answered from local allowances
	// first. Nil: every decision is exact.
	Lease *leasesync.Config
	// FailureMode decides requests while Redis is unavailable.
	FailureMode FailureMode
	// Instances, when positive, is the number of instances FailLocal divides
	// each limit by; 0 takes the live-instance count last seen in Redis
	// (leasing) or 1.
	Instances int64
	// MaxKeys bounds the keys FailLocal keeps limits for (default 100,000).
	MaxKeys int
	// Events, when not nil, is called with every Event (and then each
	// server's eviction policy is read once), as door.Config says.
	Events func(door.Event)
	// RedisHook, when not nil, is told of each Redis round trip as it
	// starts and ends (see door.Hook).
	RedisHook door.Hook
	// Global, when not nil, is the global Redis of worldwide policies
	// (remote.Policy.Pooled), and Store this region's, named Region
	// (regions): their pools in Store are filled from Global.
	Global      *remote.Store
	GlobalGuard bool
	Region      string
}

// Engine decides requests. Create it with New; it is safe for concurrent use.
type Engine struct {
	clock clock.Clock
	// door makes every Redis call, the Leaser's included, and holds the
	// breakers, the timeout, the guard and the round-trip counters.
	door     *door.Door
	fallback *fallback
	// permits are the fallback's permits (AcquirePermit); permitShare, the
	// instances FailLocal divides a concurrency limit by.
	permits     localPermits
	permitShare int64
	// pools are the leased slots of concurrency limits (lease mode).
	pools  *permitPools
	leaser *leasesync.Leaser
	tables tables
	// firsts remembers the keys decided lately, so that a key's first two
	// decisions in lease mode are made as exact mode makes them (firstUses).
	firsts *firstUses
	closed atomic.Bool
	// done is closed by Close: it wakes every Wait asleep (see sleep).
	done chan struct{}
	// waiting queues the waiters of exact-mode Waits by key.
	waiting waitQueues
	stats   counters
	// regions fills the regional pools of worldwide policies; nil
	// without a global Redis.
	regions *regions
}

// counters are the engine's statistics of its decisions, updated
// atomically. Redis round trips and errors are counted by the door.
type counters struct {
	allowed, denied atomic.Uint64 // of Remote, Cached and Fallback decisions
	remote, cached  atomic.Uint64
	fallback, busy  atomic.Uint64
	charged         atomic.Uint64
	invalid         atomic.Uint64 // calls refused for invalid input
}

// Stats is a snapshot of an Engine's counters since New.
type Stats struct {
	// Allowed and Denied count decisions, each attempt of a Wait included.
	Allowed, Denied uint64
	// Local, Remote, Cached, Fallback and Busy count decisions by Source.
	Local, Remote, Cached, Fallback, Busy uint64
	// Invalid counts the calls refused for invalid input: those the root
	// refused (CountInvalid) and those of a policy a redefinition replaced
	// (remote.ErrInvalidPolicy). None is a decision.
	Invalid uint64
	// RoundTrips counts Redis round trips (one pipeline of leases and
	// refunds counts one); Errors the calls that failed.
	RoundTrips, Errors uint64
	// Leases counts leases Redis answered; UnitsLeased the units they
	// granted; UnitsRefunded the units given back (on expiry, eviction and
	// Close); UnitsExpired those that lapsed unused (refunded or dropped);
	// UnitsUsed, UnitsDropped, UnitsHeld: see sync.Stats.
	Leases, UnitsLeased, UnitsRefunded, UnitsExpired uint64
	UnitsUsed, UnitsDropped, UnitsHeld               uint64
	// Instances is the most instances that shared a key this instance
	// leased in the last minute, as Redis counted them (1 in exact mode).
	Instances int64
	// Keys is the number of keys held in the local key store now (the
	// Leaser's, bounded by MaxKeys; 0 in exact mode).
	Keys uint64
	// Breaker is the circuit breaker's state now; BreakerOpens counts the
	// times it opened. With a Redis Cluster there is a breaker per master,
	// and Breaker is the worst of them (open, half-open, closed).
	// UnitsCharged counts the units admitted during outages (FailLocal,
	// FailOpen) and charged to Redis once it was back.
	Breaker      door.BreakerState
	BreakerOpens uint64
	UnitsCharged uint64
	// GlobalRoundTrips and GlobalErrors count the round trips to the
	// global Redis (Config.Global) and the calls that failed; UnitsPooled
	// the units this instance's refills put in its region's pools, a
	// partition's failure-mode share included (charged to the global key
	// once it answers: UnitsCharged).
	GlobalRoundTrips, GlobalErrors, UnitsPooled uint64
	// Policies counts decisions by policy name, for the policies the
	// engine holds (policies of one name summed). DroppedPolicies totals
	// the decisions of the policies it no longer holds, so that policies
	// made at run time do not accumulate: a policy that leases is dropped
	// when its last key leaves the key store (MaxKeys bounds them; the
	// first 1024 policies the engine leases under are kept), a policy decided
	// exactly when the program no longer refers to it (it is collected),
	// and every policy at Close. A policy used again after it was dropped
	// counts from zero. The policies' counts and DroppedPolicies add up to
	// Allowed, Denied, Local, Remote, Cached, Fallback and Busy (but for
	// decisions counted while Stats reads).
	Policies        map[string]PolicyStats
	DroppedPolicies PolicyStats
	// DeniedBy counts the denials of the policies the engine holds by the
	// limit that decided them: policy name -> limit name (LimitName) ->
	// denials, one entry for each limit of the policies of that name, 0
	// included. It counts the denials Redis made (Remote) and those
	// repeated locally (Cached), not a blocked key's (no limit decided) nor
	// the failure mode's (Fallback, which decides by local shares of the
	// limits): a name's sum is at most its Denied. Keyed by limit, the
	// counts of policies of one name with other limits (a redefinition)
	// stay apart. The dropped policies' have none: a limit means nothing
	// across them.
	DeniedBy map[string]map[string]uint64
}

// New returns an Engine for cfg, with its door to Redis and, when
// cfg.Lease is set, its Leaser. The only error is an invalid cfg.Lease.
func New(cfg Config) (*Engine, error) {
	e := &Engine{clock: cfg.Clock, done: make(chan struct{})}
	e.tables.others = &others{}
	e.tables.owner = new(remote.Owner)
	dc := door.Config{Store: cfg.Store, Clock: cfg.Clock, Timeout: cfg.Timeout, Guard: cfg.Guard,
		Events: cfg.Events, Recovered: e.chargeOutage, Hook: cfg.RedisHook}
	if cfg.Global != nil {
		// Cross-region calls take longer: their timeout is ten regional ones.
		// Events name the server; the hook's calls do not: it is told of
		// the regional Redis's round trips only (Stats counts the others).
		gc := dc
		gc.Store, gc.Timeout, gc.Guard, gc.Recovered, gc.Hook = cfg.Global, 10*cfg.Timeout, cfg.GlobalGuard, nil, nil
		e.regions = newRegions(cfg.Region, door.New(gc), cfg.Clock, cfg.FailureMode == FailClosed)
		dc.Pools = e.regions
	}
	e.door = door.New(dc)
	if e.regions != nil {
		e.regions.local = e.door
	}
	if cfg.Lease != nil {
		l, err := leasesync.New(e.door, cfg.Clock, *cfg.Lease)
		if err != nil {
			return nil, err
		}
		e.leaser = l
		e.pools = newPermitPools(e.clock)
		if cfg.Lease.Min <= 1 { // a lease size set by hand holds from the first use
			e.firsts = newFirstUses()
		}
	}
	instances := func(*remote.Policy, string) int64 { return 1 }
	switch {
	case cfg.Instances > 0:
		instances = func(*remote.Policy, string) int64 { return cfg.Instances }
	case e.leaser != nil:
		instances = e.members
	}
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 100_000
	}
	e.fallback = newFallback(cfg.FailureMode, maxKeys, instances)
	e.permitShare = max(1, cfg.Instances)
	return e, nil
}

// Stats returns a snapshot of the counters. It walks every entry and every
// policy's state: for a scrape, not for the hot path.
func (e *Engine) Stats() Stats {
	s := &e.stats
	calls := e.door.Total()
	st := Stats{
		Allowed: s.allowed.Load(), Denied: s.denied.Load(),
		Remote: s.remote.Load(), Cached: s.cached.Load(), Fallback: s.fallback.Load(), Busy: s.busy.Load(),
		RoundTrips: calls.RoundTrips, Errors: calls.Errors,
		Instances: 1, UnitsCharged: s.charged.Load(), Invalid: s.invalid.Load(),
	}
	st.Breaker, st.BreakerOpens = e.door.Breakers()
	st.Policies, st.DroppedPolicies, st.DeniedBy = e.policyStats()
	if r := e.regions; r != nil {
		global := r.global.Total()
		st.GlobalRoundTrips, st.GlobalErrors = global.RoundTrips, global.Errors
		st.UnitsPooled = r.units.Load() + r.owed.Load()
		st.UnitsCharged += r.charged.Load()
	}
	if e.leaser != nil {
		ls := e.leaser.Stats()
		st.Local = e.leaser.LocalHits()
		st.Allowed += st.Local
		st.Leases, st.UnitsLeased, st.UnitsRefunded, st.UnitsExpired = ls.Leases, ls.UnitsLeased, ls.UnitsRefunded, ls.UnitsExpired
		st.UnitsUsed, st.UnitsDropped, st.UnitsHeld = ls.UnitsUsed, ls.UnitsDropped, ls.UnitsHeld
		st.Instances, st.Keys = ls.Instances, ls.Keys
	}
	return st
}

// Close makes every later call fail with door.ErrClosed, wakes every Wait
// in progress, which returns door.ErrClosed at once, and closes the Leaser,
// which refunds every unit held. It returns within about one Redis timeout,
// even on a hung Redis with a client that does not honour deadlines:
// guarded calls still running then are left to end at the client's own
// timeouts, and refund what they are granted late themselves. It is
// idempotent and returns nil.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	close(e.done) // wakes the waits asleep
	// One timeout for all of Close: the leaser's refunds, then what is left
	// of it for guarded calls still running.
	ctx, cancel := e.door.Bound(context.Background())
	defer cancel()
	if e.leaser != nil {
		e.closePermits() // gives back the idle slots of concurrency limits
		e.leaser.Close() // refunds every unit held, within its own timeout
	}
	e.tables.clear()
	if e.regions != nil {
		e.regions.close(ctx)
	}
	e.door.Close(ctx)
	return nil
}

// Worldwide reports whether the engine has a global Redis, for worldwide
// policies (Config.Global).
func (e *Engine) Worldwide() bool { return e.regions != nil }

// Clock returns the engine's local clock.
func (e *Engine) Clock() clock.Clock { return e.clock }

// Done is closed when Close begins: what a caller asleep waits on too.
func (e *Engine) Done() <-chan struct{} { return e.done }
