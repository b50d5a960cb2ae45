package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

// leaseEnv is a miniredis and a manual clock that move together, and
// Limiters in lease mode (the default) on them.
type leaseEnv struct {
	mr  *redistest.Mini
	clk *clock.Manual
}

func newLeaseEnv(t *testing.T) *leaseEnv {
	mr := redistest.StartMini(t)
	return &leaseEnv{mr: mr, clk: clock.NewManual(mr.Now())}
}

func (e *leaseEnv) limiter(t *testing.T, opts ...ratelease.Option) *ratelease.Limiter {
	t.Helper()
	l, err := ratelease.New(e.mr.Client(t), append([]ratelease.Option{ratelease.WithClock(e.clk), ratelease.WithRedisTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (e *leaseEnv) advance(d time.Duration) {
	e.mr.Advance(d)
	e.clk.Set(e.mr.Now())
}

// In lease mode an instance leases slots of a key and grants permits from
// them: acquiring and releasing is local, but for a call that leases or
// renews slots (once every 100ms on a busy key); a call leases spare
// slots.
func TestPermitsLeasedAreLocal(t *testing.T) {
	e := newLeaseEnv(t)
	l := e.limiter(t)
	c := concurrency(t, "jobs", 8, time.Minute)
	ctx := context.Background()
	sources := map[ratelease.Source]int{}
	for i := 0; i < 200; i++ {
		var ps []*ratelease.Permit
		for j := 0; j < 3; j++ {
			p, res, err := l.AcquirePermit(ctx, c, "k")
			if err != nil || p == nil {
				t.Fatalf("cycle %d, permit %d: %+v, %v", i, j, res, err)
			}
			sources[res.Source]++
			ps = append(ps, p)
		}
		for _, p := range ps {
			if err := p.Release(ctx); err != nil {
				t.Fatalf("cycle %d: Release: %v", i, err)
			}
		}
		e.advance(10 * time.Millisecond) // 2 s in all
	}
	// A call every 100ms of use (renewals, the others' demands): about
	// 20 calls for 600 permits, where exact mode makes 1200.
	if rt := l.Stats().RoundTrips; rt > 25 || sources[ratelease.SourceLocal] < 575 {
		t.Fatalf("%d round trips, sources %v: want nearly every permit local", rt, sources)
	}
}

// Leased or not, never more than the limit is held across instances: two
// leasing instances and an exact one acquire, hold, release and forget
// permits at random; at every step the permits held (those granted and
// not released nor past their TTL) are at most the limit. Under
// contention the leasing instances share: each gets permits.
func TestPermitsLeasedBound(t *testing.T) {
	const limit = 5
	ttl := 2 * time.Second
	e := newLeaseEnv(t)
	ls := []*ratelease.Limiter{e.limiter(t), e.limiter(t), e.limiter(t, ratelease.WithExact())}
	c := concurrency(t, "jobs", limit, ttl)
	ctx := context.Background()
	type held struct {
		p     *ratelease.Permit
		until time.Time
	}
	var hs [3][]held
	var forgotten []time.Time // the ends of permits never released
	granted := [3]int{}
	rng := rand.New(rand.NewPCG(3, 3))
	for step := 0; step < 3000; step++ {
		i := rng.IntN(3)
		switch r := rng.IntN(10); {
		case r < 5: // acquire
			p, _, err := ls[i].AcquirePermit(ctx, c, "k")
			if err != nil {
				t.Fatal(err)
			}
			if p != nil {
				hs[i] = append(hs[i], held{p, e.clk.Now().Add(ttl)})
				granted[i]++
			}
		case r < 9 && len(hs[i]) > 0: // release
			j := rng.IntN(len(hs[i]))
			h := hs[i][j]
			hs[i] = append(hs[i][:j], hs[i][j+1:]...)
			err := h.p.Release(ctx)
			if expired := !e.clk.Now().Before(h.until); err != nil && !(expired && errors.Is(err, ratelease.ErrPermitLost)) {
				t.Fatalf("step %d: Release: %v", step, err)
			}
		case r == 9 && len(hs[i]) > 0 && rng.IntN(4) == 0: // a holder that never releases
			forgotten = append(forgotten, hs[i][0].until)
			hs[i] = hs[i][1:]
		}
		e.advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		n := 0
		for _, h := range hs {
			for _, x := range h {
				if e.clk.Now().Before(x.until) {
					n++
				}
			}
		}
		for _, until := range forgotten {
			if e.clk.Now().Before(until) {
				n++
			}
		}
		if n > limit {
			t.Fatalf("step %d: %d permits held, past the limit %d", step, n, limit)
		}
	}
	if granted[0] < 100 || granted[1] < 100 || granted[2] < 100 {
		t.Fatalf("permits granted by instance: %v; want every instance served", granted)
	}
	t.Logf("permits granted by instance (two leasing, one exact): %v", granted)
}

// A leasing instance that stops (here: closed while it holds permits,
// which keeps their slots, as a crash would) keeps its slots until they
// expire: 1.5 TTLs after its last call, never sooner than its permits'
// TTL. Then the others have them all.
func TestPermitsLeasedHolderGone(t *testing.T) {
	const ttl = 10 * time.Second
	e := newLeaseEnv(t)
	a, b := e.limiter(t), e.limiter(t)
	c := concurrency(t, "jobs", 2, ttl)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if p, res, err := a.AcquirePermit(ctx, c, "k"); p == nil {
			t.Fatalf("a's permit %d: %+v, %v", i, res, err)
		}
	}
	_ = a.Close()
	e.advance(ttl) // a's permits are past their TTL; its slots are not
	p, res, err := b.AcquirePermit(ctx, c, "k")
	if p != nil || err != nil || res.RetryAfter != ttl/2 {
		t.Fatalf("b at a's permits' TTL: %v, %+v, %v; want denied for the slots' last half TTL", p, res, err)
	}
	e.advance(ttl / 2)
	for i := 0; i < 2; i++ {
		if p, res, err := b.AcquirePermit(ctx, c, "k"); p == nil {
			t.Fatalf("b's permit %d once a's slots expired: %+v, %v", i, res, err)
		}
	}
}

// A leased permit is held until its TTL, or longer once extended (a call
// renews the slots then); past it, it is lost and its slot free.
func TestPermitsLeasedTTLAndExtend(t *testing.T) {
	const ttl = time.Minute
	e := newLeaseEnv(t)
	a, b := e.limiter(t), e.limiter(t)
	c := concurrency(t, "jobs", 1, ttl)
	ctx := context.Background()
	p, _, err := a.AcquirePermit(ctx, c, "k")
	if p == nil || err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	if err := p.Extend(ctx, 10*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	e.advance(5 * time.Minute) // past its first TTL and its slots' first expiry
	if q, res, _ := b.AcquirePermit(ctx, c, "k"); q != nil {
		t.Fatalf("b got the extended permit's slot: %+v", res)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release of the extended permit: %v", err)
	}
	// Past its TTL a permit is lost, and a holds the slot for the next.
	q, _, _ := a.AcquirePermit(ctx, c, "k")
	if q == nil {
		t.Fatal("a's second permit: denied")
	}
	e.advance(ttl)
	if err := q.Release(ctx); !errors.Is(err, ratelease.ErrPermitLost) {
		t.Fatalf("Release past the TTL: %v, want ErrPermitLost", err)
	}
	if r, res, err := a.AcquirePermit(ctx, c, "k"); r == nil {
		t.Fatalf("a's permit after one lapsed: %+v, %v", res, err)
	}
}

// Close gives back the slots no permit uses: another instance finds them
// at once.
func TestPermitsLeasedCloseGivesBack(t *testing.T) {
	e := newLeaseEnv(t)
	a := e.limiter(t)
	exact := e.limiter(t, ratelease.WithExact())
	c := concurrency(t, "jobs", 4, time.Hour)
	ctx := context.Background()
	p, _, _ := a.AcquirePermit(ctx, c, "k") // leases spare slots
	if p == nil {
		t.Fatal("denied")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if q, res, err := exact.AcquirePermit(ctx, c, "k"); q == nil {
			t.Fatalf("permit %d after Close: %+v, %v", i, res, err)
		}
	}
}

// Under contention the slots go by the fair share: an instance holding
// both slots of a key while another waits keeps one (its share) at its
// next call, and the other gets the second. Slots idle for a while go
// back by themselves.
func TestPermitsLeasedShareAndIdleSlots(t *testing.T) {
	e := newLeaseEnv(t)
	a, b := e.limiter(t), e.limiter(t)
	c := concurrency(t, "jobs", 2, time.Hour)
	ctx := context.Background()
	p, _, _ := a.AcquirePermit(ctx, c, "k") // a leases both slots
	q, _, _ := a.AcquirePermit(ctx, c, "k")
	if p == nil || q == nil {
		t.Fatal("a's permits: denied")
	}
	// b waits, asking again as WaitPermit does: its demand counts.
	for i := 0; i < 3; i++ {
		if r, _, _ := b.AcquirePermit(ctx, c, "k"); r != nil {
			t.Fatal("b got a slot a uses")
		}
		e.advance(500 * time.Millisecond)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// a's next acquire calls (a second passed): the key is contended, a's
	// share is one slot, which p uses.
	if r, res, _ := a.AcquirePermit(ctx, c, "k"); r != nil {
		t.Fatalf("a took a second slot while b waits: %+v", res)
	}
	r, res, err := b.AcquirePermit(ctx, c, "k")
	if r == nil {
		t.Fatalf("b once a kept its share: %+v, %v", res, err)
	}
	// Released on a contended key, a slot goes back at once.
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// a's slot, idle now, goes back within its linger (the sweeper).
	for i := 0; i < 20 && !leasedFree(t, b, c, 2); i++ {
		e.advance(100 * time.Millisecond)
		time.Sleep(10 * time.Millisecond) // the sweeper runs on its own goroutine
	}
	if !leasedFree(t, b, c, 2) {
		t.Fatal("the idle slots did not go back")
	}
}

// leasedFree reports whether l can acquire n permits of c's key "k" now
// (and releases them).
func leasedFree(t *testing.T, l *ratelease.Limiter, c *ratelease.Concurrency, n int) bool {
	var ps []*ratelease.Permit
	defer func() {
		for _, p := range ps {
			_ = p.Release(context.Background())
		}
	}()
	for len(ps) < n {
		p, _, err := l.AcquirePermit(context.Background(), c, "k")
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return false
		}
		ps = append(ps, p)
	}
	return true
}

// Slots leased before Redis went down still grant permits (until they
// would need a call); past them, the failure mode decides (FailLocal's
// share here).
func TestPermitsLeasedThroughAnOutage(t *testing.T) {
	e := newLeaseEnv(t)
	l := e.limiter(t, ratelease.WithFailureMode(ratelease.FailLocal), ratelease.WithInstances(2), ratelease.WithRedisTimeout(200*time.Millisecond))
	c := concurrency(t, "jobs", 8, time.Minute)
	ctx := context.Background()
	if p, _, _ := l.AcquirePermit(ctx, c, "k"); p == nil { // leases a spare slot too
		t.Fatal("denied")
	}
	e.mr.Close()
	p, res, err := l.AcquirePermit(ctx, c, "k")
	if p == nil || err != nil || res.Source != ratelease.SourceLocal {
		t.Fatalf("with Redis down, from a leased slot: %+v, %v; want a local permit", res, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(2 * time.Second) // past a call's second: the slots need a call
	var fallback int
	for i := 0; i < 6; i++ {
		p, res, err := l.AcquirePermit(ctx, c, "k")
		if err != nil || res.Source != ratelease.SourceFallback {
			t.Fatalf("try %d with Redis down: %+v, %v; want the failure mode's word", i, res, err)
		}
		if p != nil {
			fallback++
		}
	}
	if fallback != 4 { // the limit over the instances
		t.Fatalf("%d fallback permits; want FailLocal's share, 4", fallback)
	}
}

// loseReplies is a go-redis hook that, while on, runs each permit script
// call (an acquire or a lease) and then reports its reply lost (as a
// timeout would).
type loseReplies struct{ on atomic.Bool }

func (h *loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		permit := false
		for _, a := range cmd.Args() {
			permit = permit || a == "acquire" || a == "lease"
		}
		if h.on.Load() && permit && err == nil {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}
func (h *loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A permit (or slots) that Redis granted but whose reply was lost is not
// held until its TTL with no holder: an exact acquire releases it at
// once, a lease's next call removes the slots it may have added.
func TestPermitsWithLostReplies(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			e := newLeaseEnv(t)
			client := e.mr.Client(t)
			lose := &loseReplies{}
			client.AddHook(lose)
			opts := []ratelease.Option{ratelease.WithClock(e.clk), ratelease.WithRedisTimeout(5 * time.Second), ratelease.WithFailureMode(ratelease.FailClosed)}
			if exact {
				opts = append(opts, ratelease.WithExact())
			}
			l, err := ratelease.New(client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			c := concurrency(t, "jobs", 3, time.Hour)
			ctx := context.Background()
			lose.on.Store(true)
			if p, _, err := l.AcquirePermit(ctx, c, "k"); p != nil || err == nil {
				t.Fatalf("with its reply lost: %v, %v; want an error", p, err)
			}
			lose.on.Store(false)
			if !exact { // the next call clears up; Close gives back what is idle
				p, _, err := l.AcquirePermit(ctx, c, "k")
				if p == nil || err != nil {
					t.Fatalf("after a lost reply: %v", err)
				}
				if err := p.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if n, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits"); len(n) != 0 {
				t.Fatalf("held after the lost reply and Close: %v; want nothing", n)
			}
		})
	}
}

// A free slot goes to the instance that has waited longest, not to
// whoever asks first once it is free.
func TestPermitsLeasedInTurn(t *testing.T) {
	e := newLeaseEnv(t)
	a, b, c := e.limiter(t), e.limiter(t), e.limiter(t)
	con := concurrency(t, "jobs", 1, time.Hour)
	ctx := context.Background()
	p, _, _ := a.AcquirePermit(ctx, con, "k")
	if p == nil {
		t.Fatal("a: denied")
	}
	for _, l := range []*ratelease.Limiter{b, c} { // b waits first, then c
		if q, _, _ := l.AcquirePermit(ctx, con, "k"); q != nil {
			t.Fatal("a second permit of a limit of 1")
		}
		e.advance(10 * time.Millisecond)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// a's slot, idle, goes back within its linger (the sweeper).
	for i := 0; i < 50; i++ {
		if z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits"); len(z) == 0 {
			break
		}
		e.advance(20 * time.Millisecond)
		time.Sleep(5 * time.Millisecond) // the sweeper runs on its own goroutine
	}
	if q, res, _ := c.AcquirePermit(ctx, con, "k"); q != nil {
		t.Fatalf("c, which waited less, got the free slot: %+v", res)
	}
	if q, res, err := b.AcquirePermit(ctx, con, "k"); q == nil {
		t.Fatalf("b, which waited longest: %+v, %v", res, err)
	}
}

// Slots that a lease call whose reply was lost may have added, with no
// permit in use after it, go back without another acquire: at Close, or by
// the sweeper once idle; the sweeper drops no pool that may still hold
// some.
func TestPermitsLostReplyLeavesNothing(t *testing.T) {
	for _, atClose := range []bool{true, false} {
		t.Run(fmt.Sprintf("close=%v", atClose), func(t *testing.T) {
			e := newLeaseEnv(t)
			client := e.mr.Client(t)
			lose := &loseReplies{}
			client.AddHook(lose)
			l, err := ratelease.New(client, ratelease.WithClock(e.clk), ratelease.WithRedisTimeout(5*time.Second), ratelease.WithFailureMode(ratelease.FailClosed))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c := concurrency(t, "jobs", 3, time.Hour)
			lose.on.Store(true)
			if p, _, err := l.AcquirePermit(context.Background(), c, "k"); p != nil || err == nil {
				t.Fatalf("with its reply lost: %v, %v; want an error", p, err)
			}
			lose.on.Store(false)
			if z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits"); len(z) == 0 {
				t.Fatal("the lost call added no slot: nothing to show")
			}
			if atClose {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				for i := 0; i < 50; i++ { // the sweeper runs on its own goroutine, on the manual clock
					if z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits"); len(z) == 0 {
						break
					}
					e.advance(20 * time.Millisecond)
					time.Sleep(5 * time.Millisecond)
				}
			}
			if z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits"); len(z) != 0 {
				t.Fatalf("held after the lost reply: %v; want nothing", z)
			}
		})
	}
}

// Two Concurrency values of one name and limit whose TTLs differ by less
// than a millisecond keep apart pools on one instance, with slots of their
// own: never more than the limit held across them.
func TestPermitsLeasedTTLsApartByLessThanAMillisecond(t *testing.T) {
	e := newLeaseEnv(t)
	l := e.limiter(t)
	x := e.limiter(t, ratelease.WithExact())
	c1 := concurrency(t, "jobs", 2, time.Hour)
	c2 := concurrency(t, "jobs", 2, time.Hour+500*time.Microsecond)
	ctx := context.Background()
	xp, _, _ := x.AcquirePermit(ctx, c1, "k")
	a, _, _ := l.AcquirePermit(ctx, c1, "k") // leases the one slot left
	if xp == nil || a == nil {
		t.Fatal("denied")
	}
	if err := xp.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, _, _ := l.AcquirePermit(ctx, c2, "k") // leases the slot xp freed
	if b == nil {
		t.Fatal("c2: denied")
	}
	if y, _, _ := x.AcquirePermit(ctx, c1, "k"); y != nil {
		z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits")
		t.Fatalf("a third permit of a limit of 2: Redis holds %v", z)
	}
}

// A Release after Close (a graceful shutdown: Close, then the work in
// flight ends and releases) still gives the permit back, in both modes:
// another instance has it at once, not after the TTL.
func TestPermitReleaseAfterClose(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			e := newLeaseEnv(t)
			var opts []ratelease.Option
			if exact {
				opts = append(opts, ratelease.WithExact())
			}
			l, other := e.limiter(t, opts...), e.limiter(t, ratelease.WithExact())
			c := concurrency(t, "jobs", 1, time.Hour)
			ctx := context.Background()
			p, _, err := l.AcquirePermit(ctx, c, "k")
			if p == nil {
				t.Fatalf("denied: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatalf("Release after Close: %v", err)
			}
			if q, res, err := other.AcquirePermit(ctx, c, "k"); q == nil {
				z, _ := e.mr.ZMembers("ratelease:{jobs:k}:permits")
				t.Fatalf("another instance after the Release: %+v, %v; Redis holds %v", res, err, z)
			}
		})
	}
}

// A Release after Close of a leased permit past its TTL reports it lost,
// and gives its slot back all the same: nothing there would.
func TestPermitReleaseAfterCloseOfALapsedPermit(t *testing.T) {
	e := newLeaseEnv(t)
	l, other := e.limiter(t), e.limiter(t, ratelease.WithExact())
	c := concurrency(t, "jobs", 1, time.Minute)
	ctx := context.Background()
	p, _, err := l.AcquirePermit(ctx, c, "k")
	if p == nil {
		t.Fatalf("denied: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	e.advance(time.Minute) // past its TTL; its slot lasts 30s more
	if err := p.Release(ctx); !errors.Is(err, ratelease.ErrPermitLost) {
		t.Fatalf("Release after Close past the TTL: %v, want ErrPermitLost", err)
	}
	if q, res, err := other.AcquirePermit(ctx, c, "k"); q == nil {
		t.Fatalf("another instance after the Release: %+v, %v; want the slot given back", res, err)
	}
}
