package ratelease

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelease/ratelease/tier"
)

// AllowAtMost admits as many units of key as every limit of p allows now,
// from 1 up to n (at most p's Capacity), and charges them; Result.Granted
// says how many, 0 when denied. It is for work that can be cut to what is
// left: a batch, a download's chunk. In lease mode the units held are taken
// first and Redis is asked for the rest in one call. Errors are AllowN's,
// but ErrExceedsCapacity.
func (l *Limiter) AllowAtMost(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.checkN(ctx, p, key, n); err != nil {
		return Result{}, err
	}
	d, err := l.engine.AllowAtMost(ctx, p.compiled, key, int64(n))
	if err != nil {
		return Result{}, rootErr(err)
	}
	return l.shadowed(p, l.admission(p, d), min(n, p.Capacity())), nil
}

// Refund gives back n units of key admitted earlier under p whose work did
// not happen, to every limit of p, up to each limit's capacity. It names no
// admission, so the units go back to the current window (Settle names one);
// docs/operations.md says what each algorithm does with them. In lease mode
// they go back to Redis, for any instance. Errors: AllowN's but
// ErrExceedsCapacity, and ErrUnavailable whenever Redis cannot take them.
func (l *Limiter) Refund(ctx context.Context, p *Policy, key string, n int) error {
	if err := l.checkN(ctx, p, key, n); err != nil {
		return err
	}
	if err := l.engine.Refund(ctx, p.compiled, key, int64(n)); err != nil {
		return rootErr(err)
	}
	return nil
}

// Charge charges n units (at most MaxCharge) of key to every limit of p
// whatever they have left, for a cost known only once the work is done. A
// limit charged past its room owes the rest (Result.Debt), and the key is
// denied until the debt is paid off (RetryAfter); docs/operations.md says
// how each algorithm pays it. A block does not stop a charge. Charge is one
// Redis call in both modes. Errors are Refund's.
func (l *Limiter) Charge(ctx context.Context, p *Policy, key string, n int) (Result, error) {
	if err := l.checkN(ctx, p, key, n); err != nil {
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

// Settle settles an admission once its work is done: admitted is the
// Result of the AllowN, AllowAtMost or Charge that admitted it, used what
// the work cost (0 to MaxCharge). Units not used go back only to the limit
// state that granted them (nothing once that window has ended, nothing for
// SourceFallback); a cost above the admission is charged now, as Charge
// does, and that Result returned; otherwise the Result is zero. A shadowed
// admission is not settled; a Result settled twice is settled twice.
// Errors are Refund's and Charge's.
func (l *Limiter) Settle(ctx context.Context, p *Policy, key string, admitted Result, used int) (Result, error) {
	if err := l.checkTarget(ctx, p, key); err != nil {
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
	back := charged - used
	for _, lim := range p.limits {
		if lim.Algorithm == SlidingWindowLog && charged > lim.Rate {
			// A Charge took at most Rate of a log (a member a unit): of
			// those, only what the work did not use goes back, and every
			// limit gets the same units back.
			back = min(back, max(0, lim.Rate-used))
		}
	}
	if back == 0 {
		return Result{}, nil
	}
	if err := l.engine.RefundAt(ctx, p.compiled, key, int64(back), admitted.Receipt.at); err != nil {
		return Result{}, rootErr(err)
	}
	return Result{}, nil
}

// MaxCharge is the most units one Charge or Settle takes.
const MaxCharge = 1 << 40

// maxBlock is the longest a Block may last.
const maxBlock = 366 * 24 * time.Hour

// Peek reports what Allow would decide for one unit of key under p now,
// charging nothing. In lease mode, while this instance holds units of key
// or a denial of it, it answers from them as Allow would; otherwise it
// reads Redis and adds the units held to Remaining. It does not apply the
// fair share. Errors: AllowN's but ErrInvalidN and ErrExceedsCapacity, and
// ErrUnavailable whenever Redis cannot answer.
func (l *Limiter) Peek(ctx context.Context, p *Policy, key string) (Result, error) {
	if err := l.checkTarget(ctx, p, key); err != nil {
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

// Reset forgets key's state under p, every limit's, and what this
// instance holds of it. Other instances in lease mode use what they hold
// until it lapses (the lease bound). A block stays. Errors are Peek's; this
// instance's state is forgotten even when Redis cannot be reached.
func (l *Limiter) Reset(ctx context.Context, p *Policy, key string) error {
	if err := l.checkTarget(ctx, p, key); err != nil {
		return err
	}
	if err := l.engine.Reset(ctx, p.compiled, key); err != nil {
		return rootErr(err)
	}
	return nil
}

// Block denies key under p on every instance for d (1ms to a year,
// rounded up to the millisecond; else ErrInvalidDuration): every decision
// is a denial with Result.Blocked, and nothing is charged. Blocking again
// replaces the time left; Reset does not lift it, Unblock does. A policy's
// Shadow shares its blocks. In lease mode other instances are denied from
// their next lease on, within the lease TTL. Errors are Peek's; nothing is
// blocked when Redis cannot take it.
func (l *Limiter) Block(ctx context.Context, p *Policy, key string, d time.Duration) error {
	if err := l.checkTarget(ctx, p, key); err != nil {
		return err
	}
	if d < time.Millisecond || d > maxBlock {
		return fmt.Errorf("%w: block of %v (1ms to %v)", ErrInvalidDuration, d, maxBlock)
	}
	if err := l.engine.Block(ctx, p.compiled, key, d); err != nil {
		return rootErr(err)
	}
	return nil
}

// Unblock lifts a block of key under p; a key not blocked is no error.
// Other instances in lease mode may repeat the block they cached for up to
// the lease TTL. Errors are Peek's.
func (l *Limiter) Unblock(ctx context.Context, p *Policy, key string) error {
	if err := l.checkTarget(ctx, p, key); err != nil {
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
		Limit:      p.limit(d.Limit),
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
func (l *Limiter) checkTarget(ctx context.Context, p *Policy, key string) error {
	return l.check(ctx, p, key, 1)
}

// checkN validates the policy, key and n of a call that has no capacity
// to exceed (n above it is no error): as AllowN does, but for the
// capacity.
func (l *Limiter) checkN(ctx context.Context, p *Policy, key string, n int) error {
	return l.check(ctx, p, key, min(n, 1))
}
