package tier_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
	"github.com/ratelease/ratelease/tier"
)

// leaseGate is a go-redis hook that, once armed, holds the next permit
// lease call before it reaches Redis: entered is told, and the call goes
// on when release is closed.
type leaseGate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	// during, when not nil, runs in each lease call before it reaches
	// Redis (a slow call: it moves the clocks).
	during func()
}

func newLeaseGate() *leaseGate {
	return &leaseGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *leaseGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *leaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.Contains(cmd.Args(), any("lease")) && g.armed.CompareAndSwap(true, false) {
			g.entered <- struct{}{}
			<-g.release
		}
		if g.during != nil && slices.Contains(cmd.Args(), any("lease")) {
			g.during()
		}
		return next(ctx, cmd)
	}
}
func (g *leaseGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// permitEngine is a lease-mode engine on a miniredis whose clock moves
// with the engine's, its client gated by g.
type permitEngine struct {
	e   *tier.Engine
	mr  *redistest.Mini
	clk *clock.Manual
	g   *leaseGate
}

func newPermitEngine(t *testing.T) *permitEngine {
	t.Helper()
	mr := redistest.StartMini(t)
	client := mr.Client(t)
	g := newLeaseGate()
	client.AddHook(g)
	clk := clock.NewManual(mr.Now())
	lc := &leasesync.Config{Min: 1, Max: 10, Refresh: time.Second, TTL: time.Hour, LowWater: 0.01, MaxKeys: 10}
	e, err := tier.New(tier.Config{Store: remote.NewStore(client, "t"), Clock: clk, Timeout: 5 * time.Second, Lease: lc, FailureMode: tier.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return &permitEngine{e: e, mr: mr, clk: clk, g: g}
}

func (pe *permitEngine) advance(d time.Duration) {
	pe.mr.Advance(d)
	pe.clk.Set(pe.mr.Now())
}

func (pe *permitEngine) acquire(t *testing.T, id string, limit int64, ttl time.Duration) tier.PermitDecision {
	t.Helper()
	d, err := pe.e.AcquirePermit(context.Background(), "jobs", "k", id, limit, ttl)
	if err != nil {
		t.Fatalf("acquire %s: %v", id, err)
	}
	return d
}

// acquireGated starts an acquire whose lease call the gate holds, and
// returns once the call is held: the decision comes on the channel.
func (pe *permitEngine) acquireGated(t *testing.T, id string, limit int64, ttl time.Duration) <-chan tier.PermitDecision {
	t.Helper()
	pe.g.armed.Store(true)
	out := make(chan tier.PermitDecision, 1)
	go func() {
		d, _ := pe.e.AcquirePermit(context.Background(), "jobs", "k", id, limit, ttl)
		out <- d
	}()
	<-pe.g.entered
	return out
}

// An Extend that waits for a lease call in flight looks at its permit
// after the call, not before: the call may have found the slots lost (the
// key was deleted, and another acquire has the one slot), a Release may
// have ended the permit meanwhile, or its TTL may have ended. In each
// case Extend reports the permit lost and brings nothing back.
func TestExtendAfterALeaseCallInFlight(t *testing.T) {
	ctx := context.Background()
	t.Run("slots lost", func(t *testing.T) {
		pe := newPermitEngine(t)
		p := pe.acquire(t, "p", 1, time.Minute)
		pe.mr.Del("t:{jobs:k}:permits") // the key lost: p's slot is gone
		q := pe.acquireGated(t, "q", 1, time.Minute)
		tier.OnPermitWait(pe.e, func() { close(pe.g.release) })
		held, err := pe.e.ExtendPermit(ctx, "jobs", "k", "p", time.Second, p.Hold)
		if dq := <-q; !dq.Granted {
			t.Fatalf("q, once the call found the slots lost: %+v", dq)
		}
		if held || err != nil {
			t.Fatalf("Extend of the lost permit: %v, %v; want not held (q holds the one slot)", held, err)
		}
	})
	t.Run("released meanwhile", func(t *testing.T) {
		pe := newPermitEngine(t)
		p := pe.acquire(t, "p", 2, time.Minute) // leases both slots
		if d := pe.acquire(t, "p2", 2, time.Minute); d.Source != tier.SourceLocal {
			t.Fatalf("p2: %+v, want a local permit", d)
		}
		q := pe.acquireGated(t, "q", 2, time.Minute) // no slot free: a call
		var released bool
		var once sync.Once // Extend's wait; a later acquire may wait too
		tier.OnPermitWait(pe.e, func() {
			once.Do(func() {
				released, _ = pe.e.ReleasePermit(ctx, "jobs", "k", "p", p.Hold) // the worker ends while its heartbeat extends
				close(pe.g.release)
			})
		})
		held, err := pe.e.ExtendPermit(ctx, "jobs", "k", "p", time.Hour, p.Hold)
		if !released || held || err != nil {
			t.Fatalf("Release during Extend's wait: %v; Extend: %v, %v; want the Release to hold, Extend to find it lost", released, held, err)
		}
		if dq := <-q; !dq.Granted {
			t.Fatalf("q, after p's release: %+v; want p's slot", dq)
		}
	})
	t.Run("TTL ended meanwhile", func(t *testing.T) {
		pe := newPermitEngine(t)
		p := pe.acquire(t, "p", 1, time.Second)
		q := pe.acquireGated(t, "q", 1, time.Second)
		var once sync.Once // Extend's wait; r's acquire may wait too
		tier.OnPermitWait(pe.e, func() {
			once.Do(func() {
				pe.advance(1100 * time.Millisecond) // past p's TTL
				close(pe.g.release)
			})
		})
		held, err := pe.e.ExtendPermit(ctx, "jobs", "k", "p", time.Minute, p.Hold)
		<-q
		if held || err != nil {
			t.Fatalf("Extend past the TTL: %v, %v; want not held", held, err)
		}
		pe.advance(200 * time.Millisecond)
		if d := pe.acquire(t, "r", 1, time.Second); !d.Granted {
			t.Fatalf("the slot of the permit past its TTL is not free: %+v", d)
		}
	})
}

// A lease call that takes longer than permitRecheck (100ms), or than half
// the permits' TTL, still grants from its reply: a slow Redis delays a
// grant, never prevents it. Each permit's TTL counts from the start of the
// call that granted it.
func TestSlowLeaseCallsGrant(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 150 * time.Millisecond} {
		pe := newPermitEngine(t)
		pe.g.during = func() { pe.advance(120 * time.Millisecond) }
		for i, id := range []string{"a", "b", "c"} {
			d := pe.acquire(t, id, 3, ttl)
			if !d.Granted {
				t.Fatalf("TTL %v, acquire %d with lease calls of 120ms and %d held: %+v; want granted", ttl, i, i, d)
			}
		}
	}
}

// An acquire that races Close makes no pool, starts no sweeper and leases
// nothing once Close began; one whose lease call is in flight when Close
// begins has its spare slots given back: Close waits for the call. What
// Redis holds after Close is the slots of permits in use.
func TestPermitsAcquireRacingClose(t *testing.T) {
	ctx := context.Background()
	t.Run("past the check", func(t *testing.T) {
		pe := newPermitEngine(t)
		_ = pe.e.Close()
		d, err := tier.AcquireLeasedPastCheck(ctx, pe.e, "jobs", "k", "p", 3, time.Hour)
		if !errors.Is(err, door.ErrClosed) {
			t.Fatalf("an acquire past Close's start: %+v, %v; want door.ErrClosed", d, err)
		}
		if z, _ := pe.mr.ZMembers("t:{jobs:k}:permits"); len(z) != 0 {
			t.Fatalf("held after Close: %v", z)
		}
	})
	t.Run("call in flight", func(t *testing.T) {
		pe := newPermitEngine(t)
		acq := pe.acquireGated(t, "p", 3, time.Hour) // asks for spare slots
		waited := make(chan struct{})
		tier.OnPermitWait(pe.e, func() { close(waited) })
		closed := make(chan struct{})
		go func() { _ = pe.e.Close(); close(closed) }()
		select {
		case <-waited: // Close waits for the call
		case <-closed: // Close did not wait
		}
		close(pe.g.release)
		d := <-acq
		<-closed
		want := 0
		if d.Granted {
			want = 1
		}
		if z, _ := pe.mr.ZMembers("t:{jobs:k}:permits"); len(z) != want {
			t.Fatalf("held after Close: %v; want the slot of the permit granted (%v) alone", z, d.Granted)
		}
	})
}
