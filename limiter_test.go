package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = redistest.Epoch

// env is a Limiter on a miniredis whose time, and the Limiter's clock, move
// only when the test says so.
type env struct {
	mr    *redistest.Mini
	clock *clock.Manual
	l     *ratelease.Limiter
}

func newEnv(t *testing.T, opts ...ratelease.Option) *env {
	t.Helper()
	return newEnvClient(t, false, opts...)
}

// newEnvClient is newEnv with a choice of client: one that honours context
// deadlines (the Limiter calls Redis directly) or not (each call guarded).
func newEnvClient(t *testing.T, honours bool, opts ...ratelease.Option) *env {
	t.Helper()
	mr := redistest.StartMini(t)
	clk := clock.NewManual(t0)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: honours})
	t.Cleanup(func() { _ = client.Close() })
	l, err := ratelease.New(client, append([]ratelease.Option{ratelease.WithExact(), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &env{mr: mr, clock: clk, l: l}
}

// advance moves Redis's TIME, its key expiry and the local clock together.
func (e *env) advance(d time.Duration) {
	e.mr.Advance(d)
	e.clock.Set(e.mr.Now())
}

func policy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerSecond(5), ratelease.Limit{Rate: 3, Period: time.Minute, Algorithm: ratelease.FixedWindow})
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)
	for _, c := range []struct {
		name string
		p    *ratelease.Policy
		key  string
		n    int
		want error
	}{
		{"nil policy", nil, "k", 1, ratelease.ErrInvalidPolicy},
		{"zero policy", &ratelease.Policy{}, "k", 1, ratelease.ErrInvalidPolicy},
		{"empty key", p, "", 1, ratelease.ErrInvalidKey},
		{"key too long", p, long, 1, ratelease.ErrInvalidKey},
		{"zero n", p, "k", 0, ratelease.ErrInvalidN},
		{"negative n", p, "k", -3, ratelease.ErrInvalidN},
		{"n above the smallest capacity", p, "k", 4, ratelease.ErrExceedsCapacity},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := e.l.AllowN(ctx, c.p, c.key, c.n); !errors.Is(err, c.want) {
				t.Errorf("AllowN: %v, want %v", err, c.want)
			}
			if err := e.l.WaitN(ctx, c.p, c.key, c.n); !errors.Is(err, c.want) {
				t.Errorf("WaitN: %v, want %v", err, c.want)
			}
		})
	}
	// A zero Policy's own methods answer, and its worldwide form is
	// refused as it is.
	zero := &ratelease.Policy{}
	if zero.Capacity() != 0 {
		t.Errorf("a zero Policy's Capacity: %d, want 0", zero.Capacity())
	}
	if _, err := e.l.Allow(ctx, zero.Worldwide(), "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Errorf("a zero Policy's Worldwide, allowed: %v, want ErrInvalidPolicy", err)
	}
	// The longest key works, and bad input charged nothing.
	if res, err := e.l.AllowN(ctx, p, strings.Repeat("k", ratelease.MaxKeyLen), 3); err != nil || !res.Allowed {
		t.Fatalf("a key of MaxKeyLen bytes: %+v, %v", res, err)
	}
	if res, err := e.l.AllowN(ctx, p, "k", 3); err != nil || !res.Allowed {
		t.Fatalf("after rejected calls, key k: %+v, %v", res, err)
	}
}

// A nil context is an error (ErrNilContext) at every call that takes
// one, in both modes, more than a Limiter's calls in flight at once
// (it once panicked inside the calls' combiner, and the slots it took
// never came back: every later decision waited for good). The Limiter
// then decides as before.
func TestNilContextIsAnError(t *testing.T) {
	for _, mode := range []string{"exact", "lease"} {
		t.Run(mode, func(t *testing.T) {
			var opts []ratelease.Option
			if mode == "lease" {
				opts = append(opts, ratelease.WithLease(ratelease.LeaseConfig{Min: 4, Max: 4}))
			}
			e := newEnv(t, opts...)
			p := policy(t, "p", ratelease.PerSecond(100))
			c, err := ratelease.NewConcurrency("c", 2, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			permit, _, err := e.l.AcquirePermit(ctx, c, "k")
			if err != nil || permit == nil {
				t.Fatalf("AcquirePermit: %v, %v", permit, err)
			}
			var nilctx context.Context
			calls := map[string]func() error{
				"Allow":         func() error { _, err := e.l.Allow(nilctx, p, "k"); return err },
				"AllowN":        func() error { _, err := e.l.AllowN(nilctx, p, "k", 2); return err },
				"Wait":          func() error { return e.l.Wait(nilctx, p, "k") },
				"WaitN":         func() error { return e.l.WaitN(nilctx, p, "k", 2) },
				"AllowAtMost":   func() error { _, err := e.l.AllowAtMost(nilctx, p, "k", 2); return err },
				"Refund":        func() error { return e.l.Refund(nilctx, p, "k", 1) },
				"Charge":        func() error { _, err := e.l.Charge(nilctx, p, "k", 1); return err },
				"Settle":        func() error { _, err := e.l.Settle(nilctx, p, "k", ratelease.Result{}, 1); return err },
				"Peek":          func() error { _, err := e.l.Peek(nilctx, p, "k"); return err },
				"Reset":         func() error { return e.l.Reset(nilctx, p, "k") },
				"Block":         func() error { return e.l.Block(nilctx, p, "k", time.Second) },
				"Unblock":       func() error { return e.l.Unblock(nilctx, p, "k") },
				"Ping":          func() error { return e.l.Ping(nilctx) },
				"AcquirePermit": func() error { _, _, err := e.l.AcquirePermit(nilctx, c, "k"); return err },
				"WaitPermit":    func() error { _, err := e.l.WaitPermit(nilctx, c, "k"); return err },
				"Extend":        func() error { return permit.Extend(nilctx, time.Minute) },
				"Release":       func() error { return permit.Release(nilctx) },
			}
			for round := 0; round < 8; round++ {
				for name, call := range calls {
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Fatalf("%s with a nil context panicked: %v", name, r)
							}
						}()
						if err := call(); !errors.Is(err, ratelease.ErrNilContext) {
							t.Fatalf("%s with a nil context: %v, want ErrNilContext", name, err)
						}
					}()
				}
			}
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			for i := 0; i < 10; i++ {
				if res, err := e.l.AllowN(tctx, p, "k"+strconv.Itoa(i), 2); err != nil || !res.Allowed {
					t.Fatalf("after the nil contexts, AllowN: %+v, %v", res, err)
				}
			}
			if err := permit.Release(ctx); err != nil {
				t.Fatalf("the permit, released after its nil-context calls: %v", err)
			}
		})
	}
}

// maxLogUnits is the most units a request takes of a SlidingWindowLog
// (Algorithm's doc).
const maxLogUnits = 1000

// A request takes at most maxLogUnits of a SlidingWindowLog, whatever its
// rate: the log writes an entry per unit, and a large n would stall Redis.
func TestLogUnitsPerRequest(t *testing.T) {
	e := newEnv(t)
	p := policy(t, "log", ratelease.Limit{Rate: 300_000, Period: time.Second, Algorithm: ratelease.SlidingWindowLog})
	if p.Capacity() != maxLogUnits {
		t.Fatalf("capacity %d, want MaxLogUnits %d", p.Capacity(), maxLogUnits)
	}
	if _, err := e.l.AllowN(context.Background(), p, "k", maxLogUnits+1); !errors.Is(err, ratelease.ErrExceedsCapacity) {
		t.Fatalf("AllowN(MaxLogUnits+1): %v, want ErrExceedsCapacity", err)
	}
	if res, err := e.l.AllowN(context.Background(), p, "k", maxLogUnits); err != nil || !res.Allowed {
		t.Fatalf("AllowN(MaxLogUnits): %+v, %v", res, err)
	}
}

func TestNewPolicyErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy string
		limits []ratelease.Limit
		want   error
	}{
		{"no limits", "p", nil, ratelease.ErrInvalidLimit},
		{"zero limit", "p", []ratelease.Limit{{}}, ratelease.ErrInvalidLimit},
		{"zero rate", "p", []ratelease.Limit{{Period: time.Second}}, ratelease.ErrInvalidLimit},
		{"negative rate", "p", []ratelease.Limit{ratelease.PerSecond(-1)}, ratelease.ErrInvalidLimit},
		{"zero period", "p", []ratelease.Limit{{Rate: 1}}, ratelease.ErrInvalidLimit},
		{"negative period", "p", []ratelease.Limit{{Rate: 1, Period: -time.Second}}, ratelease.ErrInvalidLimit},
		{"negative burst", "p", []ratelease.Limit{{Rate: 1, Period: time.Second, Burst: -1}}, ratelease.ErrInvalidLimit},
		{"window with its own burst", "p", []ratelease.Limit{{Rate: 5, Period: time.Second, Burst: 9, Algorithm: ratelease.FixedWindow}}, ratelease.ErrInvalidLimit},
		{"unknown algorithm", "p", []ratelease.Limit{{Rate: 1, Period: time.Second, Algorithm: 42}}, ratelease.ErrInvalidLimit},
		{"negative algorithm", "p", []ratelease.Limit{{Rate: 1, Period: time.Second, Algorithm: -1}}, ratelease.ErrInvalidLimit},
		{"a log faster than 1/µs", "p", []ratelease.Limit{{Rate: 2_000_000, Period: time.Second, Algorithm: ratelease.SlidingWindowLog}}, ratelease.ErrInvalidLimit},
		{"rate times period reaches 2^53", "p", []ratelease.Limit{{Rate: 3_000_000_000, Period: time.Hour}}, ratelease.ErrInvalidLimit},
		{"duplicate", "p", []ratelease.Limit{ratelease.PerSecond(1), ratelease.PerSecond(2)}, ratelease.ErrInvalidLimit},
		{"empty name", "", []ratelease.Limit{ratelease.PerSecond(1)}, ratelease.ErrInvalidPolicy},
		{"name with colon", "a:b", []ratelease.Limit{ratelease.PerSecond(1)}, ratelease.ErrInvalidPolicy},
		{"name with brace", "{a}", []ratelease.Limit{ratelease.PerSecond(1)}, ratelease.ErrInvalidPolicy},
	} {
		t.Run(c.name, func(t *testing.T) {
			if p, err := ratelease.NewPolicy(c.policy, c.limits...); !errors.Is(err, c.want) || p != nil {
				t.Fatalf("NewPolicy: %v, %v; want %v", p, err, c.want)
			}
		})
	}
}

// Errors say what is wrong once, in the user's words.
func TestNewPolicyErrorMessages(t *testing.T) {
	for _, c := range []struct {
		limit ratelease.Limit
		want  string
	}{
		{ratelease.Limit{Rate: 1, Period: time.Second, Algorithm: 42}, `ratelease: invalid limit: policy "p": limit 0: unknown algorithm 42 (TokenBucket to CalendarWindow: 0 to 5)`},
		{ratelease.Limit{Rate: 0, Period: time.Second}, `ratelease: invalid limit: policy "p": limit 0: rate 0 is not positive`},
	} {
		if _, err := ratelease.NewPolicy("p", c.limit); err == nil || err.Error() != c.want {
			t.Errorf("NewPolicy(%+v): %v, want %q", c.limit, err, c.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []ratelease.Option
	}{
		{"nil client", nil, nil},
		{"nil *redis.Client", (*redis.Client)(nil), nil},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil), nil},
		{"nil option", c, []ratelease.Option{nil}},
		{"nil clock", c, []ratelease.Option{ratelease.WithClock(nil)}},
		{"zero timeout", c, []ratelease.Option{ratelease.WithRedisTimeout(0)}},
		{"empty prefix", c, []ratelease.Option{ratelease.WithKeyPrefix("")}},
		{"brace in prefix", c, []ratelease.Option{ratelease.WithKeyPrefix("a{b")}},
		{"nil events", c, []ratelease.Option{ratelease.WithEvents(nil)}},
		{"nil global", c, []ratelease.Option{ratelease.WithGlobal(nil, "eu")}},
		{"empty region", c, []ratelease.Option{ratelease.WithGlobal(c, "")}},
		// (The region is a member of the global key: '#' is the field of
		// its members' aggregates, and no member id starts with '#'.)
		{"region '#'", c, []ratelease.Option{ratelease.WithGlobal(c, "#")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := ratelease.New(tc.client, tc.opts...); !errors.Is(err, ratelease.ErrInvalidOption) || l != nil {
				t.Fatalf("New: %v, %v; want ErrInvalidOption", l, err)
			}
		})
	}
}

func TestAllowResult(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	second := ratelease.Limit{Rate: 10, Period: time.Second, Burst: 5}
	hour := ratelease.Limit{Rate: 8, Period: time.Hour, Burst: 8, Algorithm: ratelease.SlidingWindowLog}
	p := policy(t, "api", second, hour)

	res, err := e.l.AllowN(ctx, p, "u", 4)
	if err != nil {
		t.Fatal(err)
	}
	// The admission's Receipt names it by Redis's time of the grant; a
	// denial's names none.
	if !ratelease.ReceiptAt(res.Receipt).Equal(e.mr.Now()) {
		t.Fatalf("AllowN(4): Receipt at %v, want Redis's time %v", ratelease.ReceiptAt(res.Receipt), e.mr.Now())
	}
	want := ratelease.Result{Allowed: true, Limit: second, Remaining: 1, ResetAfter: 400 * time.Millisecond, Source: ratelease.SourceRemote, Granted: 4,
		Receipt: res.Receipt}
	if res != want {
		t.Fatalf("AllowN(4):\n got %+v\nwant %+v", res, want)
	}
	res, _ = e.l.AllowN(ctx, p, "u", 2)
	want = ratelease.Result{Limit: second, Remaining: 1, RetryAfter: 100 * time.Millisecond, ResetAfter: 400 * time.Millisecond, Source: ratelease.SourceRemote}
	if res != want {
		t.Fatalf("denied by the second limit:\n got %+v\nwant %+v", res, want)
	}
	e.advance(time.Second)
	if res, _ = e.l.AllowN(ctx, p, "u", 4); !res.Allowed || res.Limit != hour || res.Remaining != 0 {
		t.Fatalf("the hour limit is now the tightest: %+v", res)
	}
	e.advance(time.Second)
	res, _ = e.l.Allow(ctx, p, "u")
	want = ratelease.Result{Limit: hour, RetryAfter: time.Hour - 2*time.Second, ResetAfter: time.Hour - time.Second, Source: ratelease.SourceRemote}
	if res != want {
		t.Fatalf("denied by the hour limit:\n got %+v\nwant %+v", res, want)
	}
	if s := e.l.Stats(); s.Allowed != 2 || s.Denied != 2 || s.RoundTrips != 4 || s.Errors != 0 {
		t.Fatalf("Stats() = %+v", s)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerMinute(1))
	q := policy(t, "q", ratelease.PerMinute(1))
	for _, k := range []string{"a", "a}", "{a}", "}a", "a:b", "\x00", "ü"} {
		for _, pol := range []*ratelease.Policy{p, q} {
			if res, err := e.l.Allow(ctx, pol, k); err != nil || !res.Allowed {
				t.Fatalf("first request of %s/%q: %+v, %v", pol.Name(), k, res, err)
			}
			if res, _ := e.l.Allow(ctx, pol, k); res.Allowed {
				t.Fatalf("second request of %s/%q allowed", pol.Name(), k)
			}
		}
	}
}

// waitStarted returns once n timers are pending on the manual clock: the
// waiting goroutine is asleep.
func (e *env) waitStarted(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.clock.Timers() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine started waiting (timers: %d)", e.clock.Timers())
		}
	}
}

func TestWaitSleepsForRetryAfter(t *testing.T) {
	e := newEnv(t)
	p := policy(t, "p", ratelease.PerSecond(2))
	ctx := context.Background()
	if err := e.l.WaitN(ctx, p, "k", 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.l.Wait(ctx, p, "k") }()
	e.waitStarted(t, 1)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the clock moved", err)
	default:
	}
	e.advance(500 * time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed {
		t.Fatal("Wait did not charge the unit it waited for")
	}
}

func TestWaitContext(t *testing.T) {
	e := newEnv(t)
	p := policy(t, "p", ratelease.PerMinute(1))
	if err := e.l.Wait(context.Background(), p, "k"); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.l.Wait(ctx, p, "k") }()
	e.waitStarted(t, 1)
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("cancelled Wait returned %v, want context.Canceled unwrapped", err)
	}

	short, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	// The retry-after is a minute; an hour's deadline is enough.
	go func() { done <- e.l.Wait(short, p, "k") }()
	e.waitStarted(t, 1)
	e.advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	tiny, cancel3 := context.WithTimeout(context.Background(), time.Second)
	defer cancel3()
	if err := e.l.Wait(tiny, p, "k"); err != context.DeadlineExceeded {
		t.Fatalf("Wait with a deadline before the retry-after: %v, want context.DeadlineExceeded at once", err)
	}
	if e.clock.Timers() != 0 {
		t.Fatal("a timer is left behind")
	}
}

// A leaky bucket's Wait queues: each waiter reserves the next slot. A waiter
// cancelled before its slot gives the slot back.
func TestWaitLeakyBucketQueuesAndGivesBack(t *testing.T) {
	for _, honours := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", honours), func(t *testing.T) {
			testWaitLeakyBucketQueuesAndGivesBack(t, newEnvClient(t, honours))
		})
	}
}

func testWaitLeakyBucketQueuesAndGivesBack(t *testing.T, e *env) {
	p := policy(t, "p", ratelease.Limit{Rate: 10, Period: time.Second, Burst: 3, Algorithm: ratelease.LeakyBucket})
	ctx := context.Background()
	if err := e.l.Wait(ctx, p, "k"); err != nil { // slot at 0
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- e.l.Wait(ctx, p, "k") }() // slot at 100ms
	e.waitStarted(t, 1)

	cctx, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() { second <- e.l.Wait(cctx, p, "k") }() // slot at 200ms
	e.waitStarted(t, 2)
	cancel()
	if err := <-second; err != context.Canceled {
		t.Fatalf("cancelled: %v", err)
	}
	// The 200ms slot is free again: a new waiter gets it, not 300ms.
	third := make(chan error, 1)
	go func() { third <- e.l.Wait(ctx, p, "k") }()
	e.waitStarted(t, 2)
	e.advance(100 * time.Millisecond)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-third:
		t.Fatalf("third waiter returned %v before its slot", err)
	default:
	}
	e.advance(100 * time.Millisecond)
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	// Allow admits only into an empty queue: the queue ends at 300ms.
	if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed || res.RetryAfter != 100*time.Millisecond {
		t.Fatalf("Allow with a busy queue: %+v, want denied with retry-after 100ms", res)
	}
}

// Limiters with different key prefixes keep separate state on one Redis;
// the policy's accessors report what it was built from.
func TestKeyPrefixSeparatesLimiters(t *testing.T) {
	e := newEnv(t)
	other, err := ratelease.New(e.mr.Client(t), ratelease.WithKeyPrefix("other-app"), ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	p := policy(t, "p", ratelease.Limit{Rate: 2, Period: time.Minute, Algorithm: ratelease.FixedWindow})
	if p.Name() != "p" || len(p.Limits()) != 1 || p.Limits()[0].Burst != 2 || p.Capacity() != 2 {
		t.Fatalf("policy accessors: %q %+v %d", p.Name(), p.Limits(), p.Capacity())
	}
	ctx := context.Background()
	for _, l := range []*ratelease.Limiter{e.l, other} {
		if res, err := l.AllowN(ctx, p, "k", 2); err != nil || !res.Allowed {
			t.Fatalf("first limiter's full window must not count for the other: %+v, %v", res, err)
		}
	}
	if !e.mr.Exists("ratelease:{p:k}:fw:60000000") || !e.mr.Exists("other-app:{p:k}:fw:60000000") {
		t.Fatalf("keys: %v", e.mr.Keys())
	}
}

func TestClose(t *testing.T) {
	e := newEnv(t)
	p := policy(t, "p", ratelease.PerSecond(1))
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.l.Allow(context.Background(), p, "k"); !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("Allow after Close: %v", err)
	}
	if err := e.l.Wait(context.Background(), p, "k"); !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
}

func TestRedisDown(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer c.Close()
	l, err := ratelease.New(c, ratelease.WithExact(), ratelease.WithFailureMode(ratelease.FailClosed), ratelease.WithRedisTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "p", ratelease.PerSecond(1))
	mr.Close()
	if _, err := l.Allow(context.Background(), p, "k"); !errors.Is(err, ratelease.ErrUnavailable) {
		t.Fatalf("Allow with Redis gone: %v, want ErrUnavailable", err)
	} else if msg := err.Error(); strings.Count(msg, "redis unavailable") != 1 || strings.Contains(msg, "\n") {
		t.Fatalf("Allow with Redis gone: %q, want \"redis unavailable\" once, on one line", msg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Allow(ctx, p, "k"); err != context.Canceled {
		t.Fatalf("Allow with a cancelled context: %v, want context.Canceled unwrapped", err)
	}
	l.Close() // waits for the call in flight, if any
	if s := l.Stats(); s.RoundTrips != 1 || s.Errors != 1 || s.Allowed+s.Denied != 0 {
		t.Fatalf("Stats() = %+v, want one failed round trip and no decision", s)
	}
}

// hungServer accepts connections and never answers, like a SIGSTOPped
// Redis. Its connections are closed when the test ends.
func hungServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// The Redis timeout bounds a call on a hung server, and Close, whether or
// not the client honours context deadlines itself (go-redis's ReadTimeout
// is 3s), in exact and in lease mode.
func TestRedisTimeoutOnHungServer(t *testing.T) {
	for _, exact := range []bool{true, false} {
		for _, honours := range []bool{false, true} {
			t.Run(fmt.Sprintf("exact=%v/ContextTimeoutEnabled=%v", exact, honours), func(t *testing.T) {
				c := redis.NewClient(&redis.Options{Addr: hungServer(t), MaxRetries: -1, ContextTimeoutEnabled: honours})
				defer c.Close()
				opts := []ratelease.Option{ratelease.WithFailureMode(ratelease.FailClosed), ratelease.WithRedisTimeout(50 * time.Millisecond)}
				if exact {
					opts = append(opts, ratelease.WithExact())
				}
				l, err := ratelease.New(c, opts...)
				if err != nil {
					t.Fatal(err)
				}
				p := policy(t, "p", ratelease.PerSecond(1))
				start := time.Now()
				_, err = l.Allow(context.Background(), p, "k")
				took := time.Since(start)
				if !errors.Is(err, ratelease.ErrUnavailable) {
					t.Fatalf("Allow on a hung server: %v, want ErrUnavailable", err)
				}
				// Bounds, not speed targets: 50ms is asked for; the client's
				// 3s read timeout would mean the bound was not applied.
				if took > time.Second {
					t.Fatalf("Allow took %v on a hung server with a 50ms timeout", took)
				}
				start = time.Now()
				_ = l.Close()
				if took := time.Since(start); took > time.Second {
					t.Fatalf("Close took %v on a hung server with a 50ms timeout", took)
				}
				// Guarded calls still out end when hungServer's cleanup
				// closes their connections, before goleak looks.
			})
		}
	}
}

func TestLimitString(t *testing.T) {
	for _, c := range []struct {
		l    ratelease.Limit
		want string
	}{
		{ratelease.PerSecond(10), "10 req/s (burst 10)"},
		{ratelease.PerMinute(100), "100 req/min (burst 100)"},
		{ratelease.PerHour(1000), "1000 req/h (burst 1000)"},
		{ratelease.Limit{Rate: 5, Period: time.Second}, "5 req/s (burst 5)"},
		{ratelease.Limit{Rate: 5, Period: 10 * time.Second, Burst: 20}, "5 req/10s (burst 20)"},
		{ratelease.Limit{Rate: 100, Period: time.Minute, Algorithm: ratelease.FixedWindow}, "100 req/min (fixed window)"},
		{ratelease.Limit{Rate: 5, Period: time.Second, Burst: 10, Algorithm: ratelease.LeakyBucket}, "5 req/s (leaky bucket, queue 10)"},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
	if got := ratelease.Algorithm(9).String(); got != "Algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", got)
	}
}

// A grant that Redis makes after the Limiter stopped waiting for it is
// given back: a timeout loses no units.
func TestLateGrantIsRefunded(t *testing.T) {
	mr := miniredis.RunT(t)
	proxy := redistest.NewProxy(t, mr.Addr())
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	defer slow.Close()
	direct := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer direct.Close()
	p := policy(t, "p", ratelease.PerHour(2))

	l, err := ratelease.New(slow, ratelease.WithExact(), ratelease.WithFailureMode(ratelease.FailClosed), ratelease.WithRedisTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), p, "warm"); err != nil { // connect before the delay
		t.Fatal(err)
	}
	proxy.SetDelay(300 * time.Millisecond)
	// (Redis answered a moment ago: a timeout is Redis being busy, a
	// denial, not yet an outage.)
	if res, err := l.Allow(context.Background(), p, "k"); err != nil || res.Allowed || res.Source != ratelease.SourceBusy {
		t.Fatalf("Allow through a 300ms delay with a 50ms timeout: %+v, %v, want a denial because Redis is busy", res, err)
	}
	proxy.SetDelay(0)
	_ = l.Close() // waits one timeout at most: the late reply is refunded when it comes

	check, err := ratelease.New(direct, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	// A denied AllowN takes nothing: ask until both units are back.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := check.AllowN(context.Background(), p, "k", 2)
		if err == nil && res.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the late grant: %+v, %v; want both units back", res, err)
		}
	}
}

// A busy Redis is not an outage: while it answers, slowly, a call that
// times out is denied for the timeout (SourceBusy), whatever the failure
// mode, and its breaker stays closed, so that a fleet on an overloaded
// Redis does not admit by its failure mode beside what Redis admits. A
// Redis that stops answering at all (a second with no answer) is an
// outage again: the failure mode decides. One that was quick before it
// timed out (a hang, a cut) is an outage at once.
func TestBusyRedisIsNotAnOutage(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			mr := miniredis.RunT(t)
			proxy := redistest.NewProxy(t, mr.Addr())
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
			defer c.Close()
			opts := []ratelease.Option{ratelease.WithFailureMode(ratelease.FailOpen), ratelease.WithRedisTimeout(100 * time.Millisecond)}
			if exact {
				opts = append(opts, ratelease.WithExact())
			}
			l, err := ratelease.New(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p := policy(t, "p", ratelease.PerHour(1000))
			ctx := context.Background()
			if _, err := l.Allow(ctx, p, "warm"); err != nil { // connect, load the functions
				t.Fatal(err)
			}
			// Slow answers: each call 40ms (a key each, so that every
			// decision asks Redis).
			proxy.SetDelay(40 * time.Millisecond)
			for i := range 16 {
				if res, err := l.Allow(ctx, p, fmt.Sprintf("slow%d", i)); err != nil || res.Source != ratelease.SourceRemote {
					t.Fatalf("slow call %d: %+v, %v", i, res, err)
				}
			}
			// Slower than the timeout, within a second of the last answer:
			// busy, denied, no breaker opens.
			proxy.SetDelay(300 * time.Millisecond)
			start := time.Now()
			for i := 0; time.Since(start) < 600*time.Millisecond; i++ {
				res, err := l.Allow(ctx, p, fmt.Sprintf("busy%d", i))
				if err != nil || res.Allowed || res.Source != ratelease.SourceBusy || res.RetryAfter != 100*time.Millisecond {
					t.Fatalf("busy call %d: %+v, %v; want denied, SourceBusy, RetryAfter the timeout", i, res, err)
				}
			}
			if st := l.Stats(); st.Busy < 5 || st.Fallback != 0 || st.Breaker != ratelease.BreakerClosed || st.Allowed+st.Denied != st.Local+st.Remote+st.Cached+st.Fallback+st.Busy {
				t.Fatalf("after the busy calls: %+v", st)
			}
			// No answer for a second: an outage, decided by the failure mode.
			for i := 0; ; i++ {
				res, err := l.Allow(ctx, p, fmt.Sprintf("gone%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if res.Source == ratelease.SourceFallback && res.Allowed {
					break
				}
				if time.Since(start) > 5*time.Second {
					t.Fatalf("5s with no answer: still %+v, want the failure mode", res)
				}
			}
		})
	}
}

// A Redis whose answers were quick and that then times out (it hangs, or
// the network cuts it off) is busy for as many timeouts as open a breaker
// (a stall of a moment is no outage), then an outage: the failure mode
// decides.
func TestQuickRedisThatHangsIsAnOutage(t *testing.T) {
	mr := miniredis.RunT(t)
	proxy := redistest.NewProxy(t, mr.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	l, err := ratelease.New(c, ratelease.WithExact(), ratelease.WithFailureMode(ratelease.FailOpen), ratelease.WithRedisTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := policy(t, "p", ratelease.PerHour(1000))
	for i := range 16 {
		if _, err := l.Allow(context.Background(), p, fmt.Sprintf("quick%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	proxy.SetDelay(300 * time.Millisecond)
	for i := range 5 {
		if res, err := l.Allow(context.Background(), p, fmt.Sprintf("stalled%d", i)); err != nil || res.Allowed || res.Source != ratelease.SourceBusy {
			t.Fatalf("timeout %d after quick answers: %+v, %v; want a denial because Redis is busy", i+1, res, err)
		}
	}
	if res, err := l.Allow(context.Background(), p, "hung"); err != nil || !res.Allowed || res.Source != ratelease.SourceFallback {
		t.Fatalf("the sixth timeout after quick answers: %+v, %v; want the failure mode's (FailOpen) admission", res, err)
	}
}
