package remote

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
)

// Store runs the limit scripts on one Redis deployment. It is safe for
// concurrent use; the zero value is not usable: call NewStore.
type Store struct {
	client redis.UniversalClient
	prefix string
	dials  *dialHook // nil: the client's dials are not watched
	// clock places calendar windows (see Policy.calendarArgs); Redis's
	// TIME decides which one a call is in.
	clock clock.Clock
	// layout: Node has named a master, so a ClusterClient has loaded the
	// cluster's layout (which it keeps from then on).
	layout atomic.Bool
	// scriptsUntil: a server said it has no functions (before Redis 7,
	// miniredis, a proxy) or that this client may not use them (ACL): the
	// entry points run as scripts (see program) until then (Unix ns; the
	// maximum: for good), when functions are tried again (an upgrade, a
	// failover, an ACL change). 0: functions.
	scriptsUntil atomic.Int64
	// fnWorked: a function call has succeeded through this Store.
	fnWorked atomic.Bool
	// loads: the library loads in flight (library name -> *loading), which
	// concurrent calls that find it missing wait for rather than send
	// their own.
	loads sync.Map
}

// NewStore returns a Store that keeps its keys under prefix on client, which
// may be any redis.UniversalClient: a Client, ClusterClient, Ring or failover
// client. To a Client or a ClusterClient it adds a hook (once per client,
// whatever the Stores made on it) that tells the DialWatchers of the
// client's failed dials (see Watch), and leaves every dial and command as
// it is.
func NewStore(client redis.UniversalClient, prefix string) *Store {
	return &Store{client: client, prefix: prefix, dials: watchDials(client), clock: clock.System{}}
}

// SetClock sets the clock that places the windows of CalendarWindow limits
// (the system's by default): the Limiter's, so that a manual clock moves
// them with Redis's TIME. Call it before the Store is used.
func (s *Store) SetClock(c clock.Clock) { s.clock = c }

// Request asks for units from every limit of one key. Min <= Max, and
// 1 <= Min <= Policy.Capacity(); the caller checks.
type Request struct {
	Policy *Policy
	Key    string
	// Min is the least grant worth having: fewer and nothing is granted.
	Min int64
	// Max is the most units to grant.
	Max int64
	// Reserve lets a leaky or token bucket queue the request (the
	// Decision's Wait says until when) instead of admitting only what
	// conforms now: up to Burst units wait in a leaky bucket, up to Burst
	// or a Period's Rate (whichever is more) beyond a token bucket.
	// Windows ignore it.
	Reserve bool
	// Refill marks a regional pool's refill from the global key (a
	// region's lease): its batches are the member's whole part of a
	// bucket's capacity (fairshare.lua). It never reserves.
	Refill bool
	// Member, when not empty, names the instance that leases, and makes
	// the call count it among the key's members with its Demand (units per
	// second it wants of the key): while the members together want more
	// than the key's rate, each is held to its max-min fair share (see
	// fairshare.lua). Empty in exact mode, and for a key whose demand is not
	// known yet (or is zero): such a call leaves the members alone.
	Member string
	Demand int64
	// Horizon is how long a lease of Member is meant to last: it sizes the
	// batch a member held to its fair share waits for, and how long it
	// counts as a member after this call (three horizons, at least 1s).
	Horizon time.Duration
	// Back gives back, first and in the same call, Back units of an earlier
	// grant of this key made at BackAt (Decision.At) and never used.
	Back, BackAt int64
}

// Decision is the reply of one acquire call.
type Decision struct {
	// Granted is the number of units charged to every limit; 0 means
	// denied, and nothing was charged.
	Granted int64
	// At is the Redis time of the decision, in microseconds since the Unix
	// epoch. A Refund of these units names it.
	At int64
	// Decider is the index in Policy.Limits() of the limit that decided:
	// when denied, the denying limit that frees up last; when granted, the
	// one with the fewest units left.
	Decider int
	// Wait is how long the granted units must wait before use (a leaky
	// bucket's queue in Reserve mode); 0 otherwise.
	Wait time.Duration
	// Remaining is the number of units the decider could still grant now.
	Remaining int64
	// RetryAfter is, when denied, when Min units could next be granted; 0
	// when granted.
	RetryAfter time.Duration
	// Next is, for a member held to its fair share beside other members,
	// how long until its share holds its next batch: a lease asked for
	// sooner is denied. When denied, it is set only when later than
	// RetryAfter (the limits had room for Min units before the share
	// does), and never past the end of a window of the key's. 0 otherwise.
	Next time.Duration
	// ResetAfter is when the decider is fully replenished.
	ResetAfter time.Duration
	// ValidFor is how long the granted units may be used before they lapse
	// (the end of the current window of a window algorithm), or -1 when no
	// limit of the policy bounds it. 0 when denied.
	ValidFor time.Duration
	// Members is the number of live members of the key, the caller
	// included, when the request named a Member with demand; else 0.
	Members int64
	// Blocked reports a denial because the key is blocked (Store.Block):
	// RetryAfter and ResetAfter are then the block's time left (to the
	// millisecond), Decider 0, Remaining 0 and Members 0.
	Blocked bool
	// FairShare reports a denial of a member by its fair share of the key
	// while the limits had room for Min units: RetryAfter is then this
	// member's wait for its share, not the limits'.
	FairShare bool
	// Debt is, after a Charge, the units the decider owes beyond its room;
	// 0 otherwise.
	Debt int64
}

// Acquire grants between r.Min and r.Max units to every limit of r.Key, or
// nothing, in one atomic script call. Errors are Redis's or ctx's, naming
// the server (see Addr).
func (s *Store) Acquire(ctx context.Context, r Request) (Decision, error) {
	keys := s.acquireKeys(r)
	v, err := s.run(ctx, r.program(), keys, s.args(r, room(keys))).Text()
	if err != nil {
		return Decision{}, s.named(r.Policy, r.Key, err)
	}
	d, err := parseDecision(r.Policy, v)
	return d, s.named(r.Policy, r.Key, err)
}

// named returns err naming the server of key under p (see Addr), and
// wrapping ErrClock when it is a calendar window's.
func (s *Store) named(p *Policy, key string, err error) error {
	if err == nil {
		return nil
	}
	return named(s.Addr(p, key), clockErr(err))
}

// AcquireBatch makes many acquire calls in one pipeline (one round trip per
// Redis node), and returns a Decision or an error for each request, in
// order. Scripts missing from a server (NOSCRIPT) are loaded and the calls
// that needed them made again, once.
func (s *Store) AcquireBatch(ctx context.Context, rs []Request) ([]Decision, []error) {
	ds, errs, _ := s.Batch(ctx, rs, nil)
	return ds, errs
}

// Batch makes the refunds gs and the acquire calls rs in one pipeline (one
// round trip per Redis node), refunds first, as AcquireBatch does, and
// returns a Decision or an error for each request and an error for each
// refund, in order. Errors name the server (see Addr).
func (s *Store) Batch(ctx context.Context, rs []Request, gs []Grant) ([]Decision, []error, []error) {
	ds, errs, gerrs := make([]Decision, len(rs)), make([]error, len(rs)), make([]error, len(gs))
	cmds := s.pipeline(ctx, len(gs)+len(rs), func(i int) (*program, []string, []any) {
		if i < len(gs) {
			g := gs[i]
			keys := g.Policy.keys(s.prefix, g.Key, g.Member != "", false)
			return &g.Policy.scripts.refund, keys, s.refundArgs(g.Policy, g.Units, g.At, g.Member, room(keys))
		}
		r := rs[i-len(gs)]
		keys := s.acquireKeys(r)
		return r.program(), keys, s.args(r, room(keys))
	})
	for i, c := range cmds[:len(gs)] {
		gerrs[i] = s.named(gs[i].Policy, gs[i].Key, c.Err())
	}
	for i, c := range cmds[len(gs):] {
		v, err := c.Text()
		if err == nil {
			ds[i], err = parseDecision(rs[i].Policy, v)
		}
		errs[i] = s.named(rs[i].Policy, rs[i].Key, err)
	}
	return ds, errs, gerrs
}

// Grant names units granted at time At (Decision.At) for a refund. With a
// Member, the refund also takes that instance out of the key's members.
type Grant struct {
	Policy *Policy
	Key    string
	Units  int64
	At     int64
	Member string
}

// RefundBatch makes many refund calls in one pipeline, as AcquireBatch
// does, and returns an error for each, in order.
func (s *Store) RefundBatch(ctx context.Context, gs []Grant) []error {
	_, _, errs := s.Batch(ctx, nil, gs)
	return errs
}

// Refund gives back units of a grant made at time at (Decision.At) to every
// limit of key, never above capacity. Where an algorithm cannot take units
// back the refund is a no-op for that limit: a fixed or sliding window
// counter after the grant's window has passed.
func (s *Store) Refund(ctx context.Context, p *Policy, key string, units, at int64) error {
	if units <= 0 {
		return nil
	}
	keys := p.Keys(s.prefix, key)
	return s.named(p, key, s.run(ctx, &p.scripts.refund, keys, s.refundArgs(p, units, at, "", room(keys))).Err())
}
