package ratelease

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// AllowAtMost admits as many units of key as every limit of p allows now,
// from 1 up to n, and charges them; Result.Granted says how many (0 when
// denied: not even one unit fits). It is for work that can be cut to what
// is left: a batch, a download's chunk. n above p's Capacity asks for the
// capacity, the most one request can be granted.
//
// A LeakyBucket admits only while its queue is empty, and then up to its
// Burst. In lease mode the units this instance holds of key are taken
// first, and Redis is asked for the rest in one call (not a lease; with
// what a lease in flight brings meanwhile); if
// Redis denies them or cannot answer, the units held are the grant. With
// none held, a Redis failure is decided by the failure mode, as AllowN's
// (FailOpen grants n, FailLocal what this instance's share of the key
// holds, at least one unit or a denial). Errors are AllowN's but
// ErrExceedsCapacity.
func (l *Limiter) AllowAtMost(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.checkN(p, key, n); err != nil {
		return Result{}, err
	}
	d, err := l.engine.AllowAtMost(ctx, p.compiled, key, int64(n))
	if err != nil {
		return Result{}, rootErr(err)
	}
	return l.shadowed(p, l.admission(p, d), min(n, p.Capacity())), nil
}

// Refund gives back n units of key admitted earlier under p whose work did
// not happen, to every limit of p, never above a limit's capacity (n above
// it is capped, not an error). Refund names no admission, so the units
// count as admitted now:
//
//   - TokenBucket: n units go back into the bucket, up to full (Burst);
//   - FixedWindow: the current window's count drops by n, not below 0,
//     whichever window admitted them: to settle an admission whose
//     window may have turned, use Settle, which names it;
//   - SlidingWindowCounter: the current window's count drops by n, not
//     below 0 (the previous window's weight fades by itself);
//   - SlidingWindowLog: the n newest entries still in the period are
//     removed (the log cannot tell whose they were);
//   - LeakyBucket: the last n slots of the queue are freed, not below an
//     empty queue.
//
// In lease mode the units go back to Redis, where any instance may use
// them, not into this instance's allowance, and this instance's cached
// denial of key is dropped. Errors: ErrInvalidPolicy, ErrInvalidKey,
// ErrInvalidN, ErrClosed, ctx's error unwrapped, or, when Redis cannot
// take the units (whatever the failure mode), an error wrapping
// ErrUnavailable and the cause.
func (l *Limiter) Refund(ctx context.Context, p *Policy, key string, n int) error {
	if err := l.checkN(p, key, n); err != nil {
		return err
	}
	if err := l.engine.Refund(ctx, p.compiled, key, int64(n)); err != nil {
		return rootErr(err)
	}
	return nil
}

// Charge charges n units of key to every limit of p whatever they have
// left: for a cost known only once the work is done (tokens a language
// model answered with, bytes a download came to). Admit an estimate before
// the work (AllowN), then settle after it: Charge what the work cost
// beyond the estimate, or Refund what it did not use.
//
// A limit charged past its room owes the rest: the key is denied until
// the debt is paid off as the limit frees up. The Result is that of the
// limit where one unit fits last (Result.Limit): its Debt, its RetryAfter
// until one unit fits again (0: now), its Remaining and ResetAfter;
// Allowed is true and Granted is n. How each algorithm pays a debt off:
//
//   - TokenBucket: as the bucket refills, at its rate;
//   - LeakyBucket: as its queue drains (the debt is queue past its Burst);
//   - FixedWindow: when the window ends: a new window owes nothing;
//   - SlidingWindowCounter: as the charge slides out of the period (its
//     window's count weighs on the next window, then is gone);
//   - SlidingWindowLog: as the charge slides out of the period. A log
//     keeps an entry per unit, so it is charged at most its Rate a call.
//
// A bucket's debt stops growing at 2^53 / Period (in µs) units, where its
// state would stop being exact: 9·10^9 units for a second's period.
//
// A block of key does not stop a charge: the work was done. In lease mode
// the units go to Redis at once (one call), not out of this instance's
// allowance: the units it holds were charged when leased, and are used;
// the debt meets its next lease, and every instance's. Errors:
// ErrInvalidPolicy, ErrInvalidKey, ErrInvalidN (n below 1, or above
// MaxCharge), ErrClosed, ctx's error unwrapped, or, when Redis cannot take
// the charge (whatever the failure mode: nothing is kept to charge later),
// an error wrapping ErrUnavailable and the cause.
func (l *Limiter) Charge(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.checkN(p, key, n); err != nil {
		return Result{}, err
	}
	if n > MaxCharge {
		return Result{}, fmt.Errorf("%w: %d is above MaxCharge (%d)", ErrInvalidN, n, MaxCharge)
	}
	d, err := l.engine.Charge(ctx, p.compiled, key, int64(n))
	if err != nil {
		return Result{}, rootErr(err)
	}
	return l.admission(p, d), nil
}

// Settle settles an admission once its work is done and its cost is
// known: admitted is the Result of the AllowN, AllowAtMost or Charge of
// key under p that admitted it, used the units the work came to (0 to
// MaxCharge); admitted.Receipt names the admission. It is Refund and
// Charge for a known admission, as x/time/rate's Reservation is for its
// own:
//
//   - used below admitted.Granted: the rest goes back only to the limit
//     state that granted it. A FixedWindow, SlidingWindowCounter or
//     CalendarWindow gets units back only while the window that admitted
//     them (or, for a sliding window counter, the one after it) is
//     current: an estimate admitted at 23:59:59 and settled at 00:00:05
//     gives the new day nothing. A TokenBucket takes back only what could
//     not have overflowed it since the admission; a SlidingWindowLog
//     removes that admission's entries; a LeakyBucket frees the last
//     slots of its queue, as Refund does. Nothing goes back for a
//     Result of the failure mode (SourceFallback: Redis never charged it;
//     the outage's charge on recovery counts it in full) or a denial.
//   - used above admitted.Granted: the excess is charged now, as Charge
//     charges it (debt included), and Settle returns that Result: a cost
//     already incurred is owed whatever window it lands in, or an
//     estimate of 1 could cover any cost once its window has ended.
//   - used equal to it: nothing to do, no Redis call; the zero Result.
//
// A shadowed admission (Result.Shadowed) is not settled: shadow mode
// charges nothing.
//
// A refund's Result is the zero Result. In lease mode the admission of
// units held is named by this instance's reading of Redis's clock when
// they were taken, which lags Redis's own by up to a lease call's way back
// (a settlement at a window's turn may give back nothing rather than to
// the wrong window; a held unit never outlives its lease's window). It is
// later than the lease that brought them, by up to the lease TTL: a token
// bucket may take back units that would have overflowed it between the
// lease and their use, within the lease mode's bound of Rate·TTL.
// Errors: Refund's and Charge's, and ErrInvalidN for used below 0 or
// above MaxCharge.
func (l *Limiter) Settle(ctx context.Context, p *Policy, key string, admitted Result, used int) (Result, error) {
	if err := l.checkTarget(p, key); err != nil {
		return Result{}, err
	}
	if used < 0 || used > MaxCharge {
		return Result{}, fmt.Errorf("%w: used %d is not within 0 and MaxCharge (%d)", ErrInvalidN, used, MaxCharge)
	}
	if admitted.Shadowed { // charged nothing, and shadow mode charges nothing
		return Result{}, nil
	}
	charged := admitted.Granted
	if !admitted.Allowed {
		charged = 0
	}
	switch {
	case used > charged:
		return l.Charge(ctx, p, key, used-charged)
	case used == charged || admitted.Receipt.at == 0:
		return Result{}, nil
	}
	if err := l.engine.RefundAt(ctx, p.compiled, key, int64(charged-used), admitted.Receipt.at); err != nil {
		return Result{}, rootErr(err)
	}
	return Result{}, nil
}

// MaxCharge is the most units one Charge takes: far past any limit.
const MaxCharge = remote.MaxCharge

// Peek reports what Allow would decide for one unit of key under p now,
// charging nothing: Allowed and Granted (1, or 0), the deciding Limit, its
// Remaining (before any charge: an admitting Allow's would be one less),
// RetryAfter when denied, ResetAfter, and Source.
//
// In exact mode, and for a policy that does not lease, Peek reads Redis:
// one call (SourceRemote), current to that moment. In lease mode, when
// this instance holds a unit of key, or a denial of it is cached, Peek
// answers from them without a Redis call, as Allow would (SourceLocal or
// SourceCached): Allowed is then exact for this instance, and Remaining
// and ResetAfter are Redis's word at the key's last lease (at most a lease's
// life old) plus the units held. Otherwise it reads Redis (SourceRemote)
// and adds the units this instance holds to Remaining. It does not apply
// the fair share among instances: it tells whether the limits have room.
//
// Under a policy in shadow mode a would-be denial is reported as Allow
// would report it (Allowed, Shadowed), without counting it.
//
// Errors: ErrInvalidPolicy, ErrInvalidKey, ErrClosed, ctx's error
// unwrapped, or, when Redis cannot answer (whatever the failure mode), an
// error wrapping ErrUnavailable and the cause.
func (l *Limiter) Peek(ctx context.Context, p *Policy, key string) (Result, error) {
	if err := l.checkTarget(p, key); err != nil {
		return Result{}, err
	}
	d, err := l.engine.Peek(ctx, p.compiled, key)
	if err != nil {
		return Result{}, rootErr(err)
	}
	r := p.result(d)
	if !r.Allowed && p.shadow { // as Allow would, but not counted
		r.Allowed, r.Granted, r.Shadowed = true, 1, true
	}
	return r, nil
}

// Reset forgets key's state under p, every limit's, so that its next
// request meets full limits: one Redis call deletes the key's state and
// its members. In lease mode it also drops what this instance holds of
// key: its leased units, its cached denial, and what FailLocal admitted of
// it during an outage. Other instances keep the units they leased of key
// until those lapse, within the lease bound (LeaseConfig.TTL, or the end
// of the window for window algorithms), and a denial they cached until its
// RetryAfter: a Reset is global at once in exact mode, within the lease
// bound in lease mode. Errors are Peek's; this instance's own state is
// forgotten even when Redis cannot be reached.
func (l *Limiter) Reset(ctx context.Context, p *Policy, key string) error {
	if err := l.checkTarget(p, key); err != nil {
		return err
	}
	if err := l.engine.Reset(ctx, p.compiled, key); err != nil {
		return rootErr(err)
	}
	return nil
}

// MaxBlock is the longest a Block may last.
const MaxBlock = 366 * 24 * time.Hour

// Block denies key under p, on every instance that shares the Redis, for
// d (to the millisecond, rounded up; 1ms to MaxBlock): a penalty box, a
// deny list. Until the block lapses or Unblock lifts it, every decision on
// key under p is a denial with Result.Blocked set and RetryAfter the
// block's time left, and nothing is charged; Peek reports it the same way.
// Blocking again replaces the time left. The block is one Redis key,
// <prefix>:{<policy>:<key>}:b, with a TTL of d, which the scripts read
// before granting anything. It applies to the policy's name, so a policy
// of the same name and its Shadow (which admits a blocked key, Shadowed
// and Blocked) share it. Reset does not lift it: Reset forgets usage,
// Unblock lifts a block.
//
// In exact mode (and for policies that do not lease) it holds from the
// next decision on, on every instance. In lease mode this instance gives
// its units of key back and denies key at once (a cached denial,
// SourceCached); other instances use the units of key they already hold
// until those lapse, within the lease bound (LeaseConfig.TTL, or the end of
// the window for window algorithms), and are denied by Redis from their
// next lease on. Every instance caches the block, as any denial, for its
// time left or the lease TTL, whichever ends first. While Redis is
// unavailable no block is known: the failure mode decides as for any key.
//
// Errors: ErrInvalidPolicy, ErrInvalidKey, ErrClosed, ErrInvalidDuration
// for d outside 1ms to MaxBlock, ctx's error unwrapped, or, when Redis
// cannot take the block (whatever the failure mode), an error wrapping
// ErrUnavailable and the cause; then nothing is blocked.
func (l *Limiter) Block(ctx context.Context, p *Policy, key string, d time.Duration) error {
	if err := l.checkTarget(p, key); err != nil {
		return err
	}
	if d < time.Millisecond || d > MaxBlock {
		return fmt.Errorf("%w: block of %v (1ms to %v)", ErrInvalidDuration, d, MaxBlock)
	}
	if err := l.engine.Block(ctx, p.compiled, key, d); err != nil {
		return rootErr(err)
	}
	return nil
}

// Unblock lifts a block of key under p (see Block); a key not blocked is
// no error. This instance decides key by its limits again at once; other
// instances in lease mode may repeat the block they cached for up to the
// lease TTL (LeaseConfig.TTL). Errors are Peek's; this instance's cached
// block is dropped even when Redis cannot be reached.
func (l *Limiter) Unblock(ctx context.Context, p *Policy, key string) error {
	if err := l.checkTarget(p, key); err != nil {
		return err
	}
	if err := l.engine.Unblock(ctx, p.compiled, key); err != nil {
		return rootErr(err)
	}
	return nil
}

// result converts a decision of the engine on p into a Result.
func (p *Policy) result(d tier.Decision) Result {
	return Result{
		Allowed:    d.Allowed,
		Limit:      p.limits[d.Limit],
		Remaining:  int(d.Remaining),
		RetryAfter: d.RetryAfter,
		ResetAfter: d.ResetAfter,
		Source:     Source(d.Source), // one number to another: free
		Granted:    int(d.Granted),
		Blocked:    d.Blocked,
		FairShare:  d.FairShare,
		Debt:       int(d.Debt),
	}
}

// checkTarget validates the policy and key of a call, as AllowN does
// (one unit always fits a policy).
func (l *Limiter) checkTarget(p *Policy, key string) error { return l.check(p, key, 1) }

// checkN validates the policy, key and n of a call that has no capacity
// to exceed (n above it is no error): as AllowN does, but for the
// capacity.
func (l *Limiter) checkN(p *Policy, key string, n int) error { return l.check(p, key, min(n, 1)) }
