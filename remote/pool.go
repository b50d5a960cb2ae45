package remote

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pooled returns the policy of p's regional pools (pool.lua): one Pool
// limit with the rate, period and burst of p's tightest limit (the limit
// that admits the least per second), which the fair share between a
// region's instances reads. Its keys are p's name and key with the pool's
// tail, in the region's Redis; the global Redis keeps p's own keys. The
// same policy is returned on every call.
func (p *Policy) Pooled() *Policy {
	p.poolOnce.Do(func() {
		tight := p.limits[p.Tightest()]
		l := Limit{Algorithm: Pool, Rate: tight.Rate, Period: tight.Period, Burst: p.capacity}
		if tight.Algorithm == CalendarWindow {
			// (A calendar's period is its nominal length.)
			l.Period = tight.Period.Truncate(time.Microsecond)
		}
		pooled, err := NewPolicy(p.name, []Limit{l})
		if err != nil {
			panic("remote: a valid policy's pool is invalid: " + err.Error()) // a defect, not input
		}
		pooled.global = p
		p.pooled = pooled
	})
	return p.pooled
}

// Tightest returns the index of p's limit that admits the least per
// second (the first of equals): the limit its pools mirror (Pooled).
func (p *Policy) Tightest() int {
	t := 0
	for i, l := range p.limits {
		if float64(l.Rate)/l.Period.Seconds() < float64(p.limits[t].Rate)/p.limits[t].Period.Seconds() {
			t = i
		}
	}
	return t
}

// Global returns the policy whose pool p is (see Pooled), or nil.
func (p *Policy) Global() *Policy { return p.global }

// poolProgram is the library of the pools' refills: poolclaim.lua and
// pooldeposit.lua over pool.lua's definitions.
var poolProgram = sync.OnceValue(func() []program {
	return build(1<<Pool, []entry{{"poolclaim", "poolclaim.lua", []string{"members.lua"}, 0}, {"pooldeposit", "pooldeposit.lua", nil, 0}})
})

// Claim is poolclaim.lua's reply: whether the caller refills a pool.
type Claim struct {
	// Refill: the caller refills the pool, and gives Lapsed units, granted
	// by the global key at LapsedAt, back to it.
	Refill bool
	// Busy: another refill is in flight, for Wait more. Neither Refill,
	// Busy nor Denied: the pool needs none, or not before Wait.
	Busy bool
	// Denied: the global key gives the region nothing more for Wait (it
	// denied the last refill, or the region's next batch is not due).
	Denied bool
	// Units held by the pool; Demand, the region's units per second (what
	// its instances say they want); Taken, what they took lately (units
	// per second).
	Units, Demand, Taken int64
	// Lapsed units, granted by the global key at LapsedAt (its time, µs).
	Lapsed, LapsedAt int64
	// Now is the pool's server's time (µs): a deposit dates its units from
	// it.
	Now  int64
	Wait time.Duration
	// Cut is when the last partition's failure-mode share was deposited
	// in the pool, by any of the region's instances (the pool's server's
	// time, µs; 0: the global key answered the last refill).
	Cut int64
}

// Claim asks the pool of key under the pooled policy p (see Pooled)
// whether the caller refills it: while it holds fewer than low units, or
// than its region takes over lead, and is empty or was refilled gap ago
// or more (low 0, a refill ahead of need: only a pool in use, whose
// instances want units or whose region took some since its last deposit,
// twice, or once after taking some since the deposit before: not one whose
// key nobody uses any more, nor one whose one decision set the last refill
// off); one caller at a time, for up to hold (then another may), expected
// to take eta.
func (s *Store) Claim(ctx context.Context, p *Policy, key string, low int64, lead, gap, hold, eta time.Duration) (Claim, error) {
	pr := &poolProgram()[0]
	keys := p.keys(s.prefix, key, true, false)
	args := append(make([]any, room(keys), room(keys)+5), low, max(1, hold.Microseconds()), max(1, eta.Microseconds()),
		lead.Microseconds(), gap.Microseconds())
	reply, err := s.run(ctx, pr, keys, args).Text()
	if err != nil {
		return Claim{}, s.named(p, key, err)
	}
	n, err := ints(reply, 9)
	if err != nil {
		return Claim{}, fmt.Errorf("remote: poolclaim replied %q: %w", reply, err)
	}
	return Claim{Refill: n[0] == 1, Busy: n[0] == 0, Denied: n[0] == 2, Units: n[1], Demand: n[2], Taken: n[3],
		Lapsed: n[4], LapsedAt: n[5], Now: n[6], Wait: time.Duration(n[7]) * time.Microsecond, Cut: n[8]}, nil
}

// EmptyPool reports whether d, a denial of p, is a regional pool's, empty
// (or short of the request), rather than the worldwide limit's (which
// says when it has room again: ResetAfter), a fair share's or a block's:
// such a denial waits for the pool's refill and is not cached.
func (p *Policy) EmptyPool(d Decision) bool {
	return p.Global() != nil && d.Granted == 0 && !d.Blocked && !d.FairShare && d.ResetAfter == 0
}

// Deposit is a refill's outcome, for the pool (pooldeposit.lua).
type Deposit struct {
	// Granted units, usable for Valid (-1: no bound of the global key's),
	// granted at At (the global server's time, µs).
	Granted int64
	Valid   time.Duration
	At      int64
	// Since is the Claim's Now: the units' life counts from it, and it
	// names the refill the deposit ends.
	Since int64
	// FromNow: the units' life counts from the deposit instead (a
	// partition's failure-mode share: the global call took its timeout to
	// fail).
	FromNow bool
	// TTL is the longest a pool keeps units.
	TTL time.Duration
	// Wait is how long before the global key gives the region more: its
	// denial, or its fair share's next batch (Decision.Next).
	Wait time.Duration
}

// Deposit puts a refill's units in the pool of key under the pooled
// policy p and ends the refill, unless it outlived its hold and another
// has claimed the pool since. It returns the units the pool holds.
func (s *Store) Deposit(ctx context.Context, p *Policy, key string, d Deposit) (int64, error) {
	valid := int64(-1)
	if d.Valid >= 0 {
		valid = d.Valid.Microseconds()
	}
	pr := &poolProgram()[1]
	keys := p.Keys(s.prefix, key)
	fromNow := 0
	if d.FromNow {
		fromNow = 1
	}
	args := append(make([]any, room(keys), room(keys)+7), d.Granted, valid, d.At, d.Since, d.TTL.Microseconds(), d.Wait.Microseconds(), fromNow)
	units, err := s.run(ctx, pr, keys, args).Int64()
	if err != nil {
		return 0, s.named(p, key, err)
	}
	return units, nil
}

// ints reads n integers separated by spaces.
func ints(reply string, n int) ([]int64, error) {
	f := strings.Fields(reply)
	if len(f) != n {
		return nil, fmt.Errorf("%d values, want %d", len(f), n)
	}
	out := make([]int64, n)
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
