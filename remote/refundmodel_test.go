package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/remote"
)

// A refund never leaves a token bucket more room than the same history in
// which the refunded units were never granted: the bound's step "a refund
// does not add to that" (docs/leasing.md, "The bound, and why it holds").
// On random grants, refunds of random parts of them at random ages
// (fresh, late, past a whole refill), partial and repeated, and random
// gaps, the bucket's debt read from Redis after every step is never below
// the debt of that history replayed from scratch (grants net of what went
// back, at their times, with the bucket's clamp at full). It is checked
// for rates that do and do not divide the period and buckets of a few
// units to a few hundred. It also reports what the refunds were worth
// against units that never left (the gap is what aging costs a contended
// bucket: docs/leasing.md).
func TestRefundNeverBeatsUnitsThatNeverLeft(t *testing.T) {
	for _, l := range []remote.Limit{tb(2000, 200, time.Second), tb(7, 4, time.Second), tb(5, 60, time.Minute), tb(3, 3, time.Second)} {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%d per %v burst %d seed %d", l.Rate, l.Period, l.Burst, seed), func(t *testing.T) {
				refundModel(t, l, seed, 400)
			})
		}
	}
}

// debtNow reads the debt of the token bucket key at now (µs): in units of
// 1/rate µs, as remote/lua/gcra.lua keeps it ("<us>:<remainder>:<rate>").
func debtNow(t *testing.T, c *redis.Client, key string, now int64) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err != nil {
		return 0 // absent: full
	}
	parts := strings.Split(v, ":")
	us, _ := strconv.ParseInt(parts[0], 10, 64)
	rem, _ := strconv.ParseInt(parts[1], 10, 64)
	rate, _ := strconv.ParseInt(parts[2], 10, 64)
	if us < now {
		return 0
	}
	return (us-now)*rate + rem
}

func refundModel(t *testing.T, l remote.Limit, seed uint64, steps int) {
	f := newFake(t)
	p := mustPolicy(t, "p", l)
	key, c := p.Keys("test", "k")[0], f.Client(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	unit := l.Period.Microseconds() // what one unit costs, in the debt's units
	interval := l.Period / time.Duration(l.Rate)
	type grant struct {
		at, n int64 // µs, Redis's time; units net of what went back
	}
	var grants []grant
	// replay is the debt at now of the history with grants net of refunds.
	replay := func(now int64) int64 {
		var D, last int64
		for i, g := range grants {
			if i > 0 {
				D = max(0, D-l.Rate*(g.at-last))
			}
			D += g.n * unit
			last = g.at
		}
		if len(grants) > 0 {
			D = max(0, D-l.Rate*(now-last))
		}
		return D
	}
	var refunded, worth int64 // units refunded, and what they gave back
	for step := 0; step < steps; step++ {
		f.Advance(time.Duration(rng.Int64N(int64(3 * interval))))
		now := f.Now().UnixMicro()
		if rng.IntN(3) < 2 || len(grants) == 0 {
			lo := 1 + rng.Int64N(max(1, l.Burst/2))
			hi := lo + rng.Int64N(l.Burst)
			if d := acquire(t, f.s, p, "k", lo, hi, false); d.Granted > 0 {
				if d.At != now {
					t.Fatalf("grant at %d, Redis's time %d", d.At, now)
				}
				grants = append(grants, grant{d.At, d.Granted})
			}
		} else if i := rng.IntN(len(grants)); grants[i].n > 0 {
			k := 1 + rng.Int64N(grants[i].n)
			before := debtNow(t, c, key, now)
			if err := f.s.Refund(context.Background(), p, "k", k, grants[i].at); err != nil {
				t.Fatal(err)
			}
			grants[i].n -= k
			refunded += k
			worth += before - debtNow(t, c, key, now)
		}
		if got, want := debtNow(t, c, key, now), replay(now); got < want {
			t.Fatalf("step %d: the bucket owes %d (1/%d µs), the history without the refunded units %d: a refund gave back more than its units were worth",
				step, got, l.Rate, want)
		}
	}
	if refunded > 0 {
		t.Logf("%d units refunded, worth %.1f units back", refunded, float64(worth)/float64(unit))
	}
}
