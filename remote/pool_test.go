package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/remote"
)

// claim is Store.Claim with the regional tier's usual lead, gap, hold and
// eta, failing t on an error.
func claim(t testing.TB, f *fake, p *remote.Policy, low int64) remote.Claim {
	t.Helper()
	c, err := f.s.Claim(context.Background(), p, "k", low, 100*time.Millisecond, 600*time.Millisecond, 2*time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return c
}

func deposit(t testing.TB, f *fake, p *remote.Policy, d remote.Deposit) int64 {
	t.Helper()
	n, err := f.s.Deposit(context.Background(), p, "k", d)
	if err != nil {
		t.Fatalf("Deposit: %v", err)
	}
	return n
}

// A refill's steps, as one region's instances see them: one refill at a
// time, none while the global key holds the region back, none while the
// pool holds enough or was refilled less than the gap ago (unless empty),
// and the units of a generation that lapsed go back with the next refill,
// once.
func TestPoolRefill(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "w", tb(100, 100, time.Second)).Pooled()

	c := claim(t, f, p, 10)
	if !c.Refill || c.Units != 0 {
		t.Fatalf("first claim of an empty pool: %+v, want Refill", c)
	}
	if again := claim(t, f, p, 10); !again.Busy || again.Refill || again.Wait <= 0 {
		t.Fatalf("claim while a refill is in flight: %+v, want Busy", again)
	}
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Granted != 0 || d.ResetAfter != 0 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("a cold pool, refill on its way: %+v, want denied, ask again when it lands (100ms), ResetAfter 0 (the engine waits for it)", d)
	}
	if n := deposit(t, f, p, remote.Deposit{Granted: 30, Valid: -1, At: 7, Since: c.Now, TTL: 2 * time.Second}); n != 30 {
		t.Fatalf("deposit of 30: the pool holds %d", n)
	}
	if d := acquire(t, f.s, p, "k", 1, 25, false); d.Granted != 25 || d.Remaining != 5 || d.ValidFor != 2*time.Second {
		t.Fatalf("take 25 of 30: %+v, want 25 granted, 5 left, valid for the generation's 2s", d)
	}
	// Low, but refilled less than the gap ago: not yet.
	if c := claim(t, f, p, 10); c.Refill || c.Busy || c.Denied || c.Wait <= 0 {
		t.Fatalf("claim within the gap: %+v, want no refill before Wait", c)
	}
	f.Advance(700 * time.Millisecond)
	if c := claim(t, f, p, 5); c.Refill || c.Busy || c.Denied {
		t.Fatalf("claim of a pool that holds low units: %+v, want none", c)
	}
	c = claim(t, f, p, 10)
	if !c.Refill || c.Lapsed != 0 {
		t.Fatalf("claim after the gap, low: %+v, want Refill", c)
	}
	if d := acquire(t, f.s, p, "k", 6, 6, false); d.Granted != 0 || d.ResetAfter != 100*time.Millisecond {
		t.Fatalf("6 of a pool of 5 once filled, refill on its way: %+v, want denied until it lands (ResetAfter 100ms)", d)
	}
	// The global key holds the region back for a second.
	deposit(t, f, p, remote.Deposit{Granted: 0, Since: c.Now, TTL: 2 * time.Second, Wait: time.Second})
	if c := claim(t, f, p, 10); !c.Denied || c.Wait != time.Second {
		t.Fatalf("claim while the global key holds the region back: %+v, want Denied for 1s", c)
	}
	if d := acquire(t, f.s, p, "k", 6, 6, false); d.Granted != 0 || d.ResetAfter != time.Second || d.RetryAfter != time.Second {
		t.Fatalf("6 of a pool of 5, held back 1s: %+v, want denied for 1s", d)
	}
	// The first generation lapses with 5 units: the next refill gives
	// them back, once.
	f.Advance(1400 * time.Millisecond)
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Granted != 0 {
		t.Fatalf("after the generation's end: %+v, want nothing left", d)
	}
	c = claim(t, f, p, 10)
	if !c.Refill || c.Lapsed != 5 || c.LapsedAt != 7 {
		t.Fatalf("claim after a generation lapsed with 5: %+v, want them back, granted at 7", c)
	}
	deposit(t, f, p, remote.Deposit{Granted: 10, Valid: -1, At: 9, Since: c.Now, TTL: 2 * time.Second})
	f.Advance(700 * time.Millisecond)
	if c := claim(t, f, p, 20); !c.Refill || c.Lapsed != 0 {
		t.Fatalf("the next claim: %+v, want the lapsed units given back once only", c)
	}
}

// A generation lives no longer than its deposit said, from the refill's
// start: a window's units end with the window (the global key's Valid),
// and units that arrive after it ended lapse at once.
func TestPoolGenerationEndsWithTheGlobalGrant(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "w", tb(100, 100, time.Second)).Pooled()
	c := claim(t, f, p, 10)
	f.Advance(100 * time.Millisecond) // the global call's round trip
	deposit(t, f, p, remote.Deposit{Granted: 20, Valid: 300 * time.Millisecond, At: 3, Since: c.Now, TTL: 5 * time.Second})
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Granted != 1 || d.ValidFor != 200*time.Millisecond {
		t.Fatalf("%+v, want valid for the 300ms from the refill's start, less the round trip", d)
	}
	f.Advance(200 * time.Millisecond)
	if d := acquire(t, f.s, p, "k", 1, 1, false); d.Granted != 0 {
		t.Fatalf("past the generation's end: %+v, want denied", d)
	}
	f.Advance(time.Second)
	if c = claim(t, f, p, 10); c.Lapsed != 19 || c.LapsedAt != 3 {
		t.Fatalf("%+v, want the first generation's 19 units to give back", c)
	}
	f.Advance(time.Second)
	if n := deposit(t, f, p, remote.Deposit{Granted: 20, Valid: 500 * time.Millisecond, At: 4, Since: c.Now, TTL: 5 * time.Second}); n != 0 {
		t.Fatalf("a deposit whose window ended on its way: the pool holds %d, want 0", n)
	}
	if c := claim(t, f, p, 10); c.Lapsed != 20 || c.LapsedAt != 4 {
		t.Fatalf("%+v, want the 20 units that lapsed on their way to give back", c)
	}
}

// The regional bound's core, on random interleavings of deposits, takes,
// refunds (fresh and late) and time: the pool never holds more than the
// deposits whose generations are still live gave it, nor more than was
// deposited and not taken (refunds included), and nothing is granted past
// every generation's end: a unit never outlives the generation it came
// from, however it is given back.
func TestPoolNeverOutlivesItsGenerations(t *testing.T) {
	t.Parallel() // simulated time on a miniredis of its own: CPU only, beside the others
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		f := newFake(t)
		p := mustPolicy(t, "w", tb(1000, 1000, time.Second)).Pooled()
		type gen struct{ units, ends int64 }
		var gens []gen
		type grant struct{ units, at int64 }
		var grants []grant
		var deposited, taken, back int64
		now := func() int64 { return f.Now().UnixMicro() }
		for range 120 {
			switch op := rng.IntN(10); {
			case op < 2: // a refill
				c := claim(t, f, p, 1_000_000)
				if !c.Refill {
					deposit(t, f, p, remote.Deposit{Since: c.Now, TTL: time.Second}) // ends another's, if any
					c = claim(t, f, p, 1_000_000)
				}
				if !c.Refill {
					continue
				}
				g := 1 + rng.Int64N(50)
				life := time.Duration(1+rng.IntN(2000)) * time.Millisecond
				valid := time.Duration(-1)
				if rng.IntN(2) == 0 {
					valid = time.Duration(rng.IntN(1500)) * time.Millisecond
				}
				f.Advance(time.Duration(rng.IntN(50)) * time.Millisecond)
				deposit(t, f, p, remote.Deposit{Granted: g, Valid: valid, At: 1, Since: c.Now, TTL: life})
				ends := c.Now + life.Microseconds()
				if valid >= 0 {
					ends = min(ends, c.Now+valid.Microseconds())
				}
				if ends > now() {
					gens = append(gens, gen{g, ends})
					deposited += g
				}
			case op < 6: // a take, as a lease or an exact decision
				d := acquire(t, f.s, p, "k", 1, 1+rng.Int64N(30), false)
				if d.Granted > 0 {
					taken += d.Granted
					grants = append(grants, grant{d.Granted, d.At})
					if d.ValidFor <= 0 {
						t.Fatalf("seed %d: a grant with no end: %+v", seed, d)
					}
				}
			case op < 8 && len(grants) > 0: // some of a grant back, now or late
				i := rng.IntN(len(grants))
				g := grants[i]
				n := 1 + rng.Int64N(g.units)
				refund(t, f.s, p, "k", n, g.at)
				back += n
				grants[i].units -= n
				if grants[i].units == 0 {
					grants = append(grants[:i], grants[i+1:]...)
				}
			default:
				f.Advance(time.Duration(rng.IntN(400)) * time.Millisecond)
			}
			var live int64
			for _, g := range gens {
				if g.ends > now() {
					live += g.units
				}
			}
			d, err := f.s.Peek(context.Background(), p, "k")
			if err != nil {
				t.Fatal(err)
			}
			held := d.Remaining
			if held > live {
				t.Fatalf("seed %d: the pool holds %d, more than its live generations were given (%d)", seed, held, live)
			}
			if held > deposited-taken+back {
				t.Fatalf("seed %d: the pool holds %d, more than deposited %d - taken %d + given back %d", seed, held, deposited, taken, back)
			}
		}
	}
}

// The pool of a worldwide calendar quota is a valid policy: its rate per
// nominal window need not fit the 2^53 bound of a rate times a period,
// which pool.lua never computes (a monthly 10000 is 10000 × 2.68e12µs).
func TestPooledCalendar(t *testing.T) {
	for _, u := range []remote.CalendarUnit{remote.CalendarDay, remote.CalendarWeek, remote.CalendarMonth} {
		cal := remote.Calendar{Unit: u, Location: time.UTC}
		p := mustPolicy(t, "w", remote.Limit{Algorithm: remote.CalendarWindow, Rate: 1_000_000, Burst: 1_000_000, Period: cal.Nominal(), Calendar: cal})
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Pooled of 1e6 a %v: %v", u, r)
				}
			}()
			pp := p.Pooled()
			f := newFake(t)
			c := claim(t, f, pp, 10)
			deposit(t, f, pp, remote.Deposit{Granted: 5, Valid: -1, At: 1, Since: c.Now, TTL: time.Second})
			if d := acquire(t, f.s, pp, "k", 1, 10, false); d.Granted != 5 {
				t.Fatalf("a %v quota's pool: %+v", u, d)
			}
		}()
	}
}

// A refund of a grant whose generation lapsed is dropped even when the
// pool's key expired meanwhile and a later deposit made it again: lx, the
// record of what lapsed, went with the key, and the units must not move
// into a generation that began after their own ended (an instance gives
// back what lapsed in its hands with its next lease, however late).
func TestPoolRefundAfterTheKeyExpired(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "w", tb(100, 100, time.Second)).Pooled()
	c := claim(t, f, p, 10)
	deposit(t, f, p, remote.Deposit{Granted: 20, Valid: -1, At: 1, Since: c.Now, TTL: time.Second})
	d := acquire(t, f.s, p, "k", 10, 10, false)
	if d.Granted != 10 {
		t.Fatalf("take 10 of 20: %+v", d)
	}
	// The generation ends at 1s; the key goes 5s after.
	f.Advance(7 * time.Second)
	c = claim(t, f, p, 10)
	if !c.Refill {
		t.Fatalf("claim of an empty pool: %+v", c)
	}
	deposit(t, f, p, remote.Deposit{Granted: 5, Valid: -1, At: 2, Since: c.Now, TTL: time.Second})
	refund(t, f.s, p, "k", 10, d.At)
	if got := acquire(t, f.s, p, "k", 1, 100, false); got.Granted != 5 {
		t.Fatalf("the pool gave %d, want the 5 deposited: the 10 of a generation that ended 6s ago came back into a new one", got.Granted)
	}
}

// A refill that outlived its hold deposits its units, but does not end
// the refill that claimed the pool after it: one refill in flight per
// region and key, still.
func TestPoolLateDepositKeepsTheNewerClaim(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "w", tb(100, 100, time.Second)).Pooled()
	a := claim(t, f, p, 10) // hold: 2s
	f.Advance(2100 * time.Millisecond)
	b := claim(t, f, p, 10)
	if !a.Refill || !b.Refill {
		t.Fatalf("claims %+v then, past the first's hold, %+v: want both to refill", a, b)
	}
	f.Advance(10 * time.Millisecond)
	if n := deposit(t, f, p, remote.Deposit{Granted: 0, Valid: -1, At: 1, Since: a.Now, TTL: time.Second}); n != 0 {
		t.Fatalf("the late deposit: the pool holds %d", n)
	}
	if c := claim(t, f, p, 10); c.Refill || !c.Busy {
		t.Fatalf("a claim while the second refill is in flight: %+v, want Busy (the first's late deposit ended the second's claim)", c)
	}
	deposit(t, f, p, remote.Deposit{Granted: 0, Valid: -1, At: 2, Since: b.Now, TTL: time.Second})
	if c := claim(t, f, p, 10); !c.Refill {
		t.Fatalf("a claim once the second refill deposited: %+v, want Refill", c)
	}
}

// A refund never raises a generation above what it was given, as no
// refund raises a limit above its capacity: units given back twice, or
// never taken (Limiter.Refund names no grant), do not add to the pool.
func TestPoolRefundNeverAboveTheDeposit(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "w", tb(100, 100, time.Second)).Pooled()
	c := claim(t, f, p, 10)
	deposit(t, f, p, remote.Deposit{Granted: 10, Valid: -1, At: 1, Since: c.Now, TTL: time.Second})
	d := acquire(t, f.s, p, "k", 4, 4, false)
	refund(t, f.s, p, "k", 4, d.At)
	refund(t, f.s, p, "k", 4, d.At) // again
	for range 3 {
		if err := f.s.GiveBack(context.Background(), p, "k", 100); err != nil {
			t.Fatal(err)
		}
	}
	if got := acquire(t, f.s, p, "k", 1, 1000, false); got.Granted != 10 {
		t.Fatalf("the pool gave %d, want the 10 deposited", got.Granted)
	}
}

// A worldwide calendar quota's pool, in every zone of the tz database, on
// random days and months: a refill made a moment before the window's end
// (as the global server's clock places it, whatever the skew between the
// two servers and the round trip) gives units that the pool grants only
// until that end, in real time, and no longer: no unit of a day is used in
// the next, in any zone, across DST changes and zones whose midnight is
// skipped.
func TestPooledQuotaEndsWithItsWindowInEveryZone(t *testing.T) {
	t.Parallel() // simulated time on miniredis servers of its own: CPU only, beside the others
	names := zoneNames(t)
	regional, global := newFake(t), newFake(t)
	// The global store places calendar windows by the global server's
	// clock, as the Limiter's clock would (this host's, near Redis's).
	gclock := &stoppedClock{at: global.Now()}
	global.s.SetClock(gclock)
	ctx := context.Background()
	from := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2037, 1, 1, 0, 0, 0, 0, time.UTC)
	var checked int
	for zi, name := range names {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatalf("zone %s: %v", name, err)
		}
		rng := rand.New(rand.NewPCG(uint64(zi), 41))
		for i, u := range []remote.CalendarUnit{remote.CalendarDay, remote.CalendarMonth} {
			cal := remote.Calendar{Unit: u, Location: loc}
			g := mustPolicy(t, "q", remote.Limit{Algorithm: remote.CalendarWindow, Rate: 1_000_000, Burst: 1_000_000, Period: cal.Nominal(), Calendar: cal})
			p := g.Pooled()
			key := fmt.Sprintf("z%d-%d", zi, i)
			// The global server's time: just before the end of a window of
			// a random instant's, as Go places it in loc.
			at := from.Add(time.Duration(rng.Int64N(int64(to.Sub(from))))).In(loc)
			y, m, d := at.Date()
			end := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
			if u == remote.CalendarMonth {
				end = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
			}
			gnow := end.Add(-time.Duration(1 + rng.Int64N(int64(4*time.Second)))).Truncate(time.Microsecond)
			skew := time.Duration(rng.Int64N(int64(4*time.Second))) - 2*time.Second // global - regional
			rtt := time.Duration(1 + rng.Int64N(int64(300*time.Millisecond))).Truncate(time.Microsecond)
			// Claim at the regional server's time, the global call half a
			// round trip later, the deposit a round trip after the claim.
			start := gnow.Add(-skew - rtt/2)
			regional.SetTime(start)
			c, err := regional.s.Claim(ctx, p, key, 10, 100*time.Millisecond, 600*time.Millisecond, 2*time.Second, rtt)
			if err != nil || !c.Refill {
				t.Fatalf("%s %v: claim %+v, %v", name, u, c, err)
			}
			global.SetTime(gnow)
			gclock.at = gnow
			dec, err := global.s.Acquire(ctx, remote.Request{Policy: g, Key: key, Min: 1, Max: 500, Member: "r1", Demand: 1000,
				Horizon: time.Second, Refill: true})
			if err != nil || dec.Granted == 0 || dec.ValidFor <= 0 {
				t.Fatalf("%s %v at %v: the global grant %+v, %v", name, u, gnow, dec, err)
			}
			// The window's end in real time, as the regional server's
			// clock reads it.
			wend := gnow.Add(dec.ValidFor).Add(-skew)
			if !gnow.Add(dec.ValidFor).Equal(end) && end.In(loc).Hour() == 0 {
				t.Errorf("%s %v at %v: the global key's window ends in %v, at %v; Go places its end at %v", name, u, gnow, dec.ValidFor, gnow.Add(dec.ValidFor), end)
			}
			regional.SetTime(start.Add(rtt))
			if _, err := regional.s.Deposit(ctx, p, key, remote.Deposit{Granted: dec.Granted, Valid: dec.ValidFor, At: dec.At, Since: c.Now, TTL: 5 * time.Second}); err != nil {
				t.Fatal(err)
			}
			if now := start.Add(rtt); now.Before(wend) {
				d, err := regional.s.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: 1, Max: 1})
				if err != nil {
					t.Fatal(err)
				}
				if d.Granted == 1 && now.Add(d.ValidFor).After(wend) {
					t.Errorf("%s %v: an instance's lease at %v is valid for %v, past the window's end at %v", name, u, now, d.ValidFor, wend)
				}
			}
			regional.SetTime(wend)
			if d, err := regional.s.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: 1, Max: 1}); err != nil || d.Granted != 0 {
				t.Errorf("%s %v: at the window's end (%v) the pool granted %+v, %v; want nothing", name, u, wend, d, err)
			}
			checked++
		}
	}
	t.Logf("%d zones, %d windows' ends", len(names), checked)
}

// stoppedClock reads at, which a test moves either way.
type stoppedClock struct {
	clock.System
	at time.Time
}

func (c *stoppedClock) Now() time.Time { return c.at }
