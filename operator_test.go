package ratelease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// peekWant is what a Peek or an AllowAtMost is expected to report.
type peekWant struct {
	granted, remaining int
	retry, reset       time.Duration
}

func checkResult(t *testing.T, what string, res ratelease.Result, err error, w peekWant) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got := peekWant{granted: res.Granted, remaining: res.Remaining, retry: res.RetryAfter, reset: res.ResetAfter}
	if got != w || res.Allowed != (w.granted > 0) {
		t.Fatalf("%s:\n got %+v (allowed %v, source %v)\nwant %+v", what, got, res.Allowed, res.Source, w)
	}
}

// Peek, AllowAtMost, Refund and Reset in exact mode, each algorithm, at
// fixed times: 4 units per second (burst 4).
func TestOperatorsPerAlgorithm(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		alg ratelease.Algorithm
		// after AllowAtMost(10) at +0: ResetAfter; at +100ms: RetryAfter
		// of one unit; after Refund(2): Peek's remaining, retry and reset,
		// and what AllowAtMost(10) grants then
		fullReset, retry time.Duration
		refunded         peekWant
		regrant          int
	}{
		{ratelease.TokenBucket, 1000 * ms, 150 * ms, peekWant{1, 2, 0, 400 * ms}, 2},
		{ratelease.FixedWindow, 1000 * ms, 900 * ms, peekWant{1, 2, 0, 900 * ms}, 2},
		{ratelease.SlidingWindowCounter, 2000 * ms, 1150 * ms, peekWant{1, 2, 0, 1900 * ms}, 2},
		{ratelease.SlidingWindowLog, 1000 * ms, 900 * ms, peekWant{1, 2, 0, 900 * ms}, 2},
		// The refund frees the queue's last two slots: it still runs for
		// 400ms, and a leaky bucket admits only into an empty queue.
		{ratelease.LeakyBucket, 1000 * ms, 900 * ms, peekWant{0, 0, 400 * ms, 400 * ms}, 0},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 4, Period: time.Second, Algorithm: c.alg})
			res, err := e.l.Peek(ctx, p, "k")
			checkResult(t, "Peek of a new key", res, err, peekWant{granted: 1, remaining: 4})
			if res.Source != ratelease.SourceRemote || res.Limit != p.Limits()[0] {
				t.Fatalf("Peek: %+v", res)
			}
			res, err = e.l.AllowAtMost(ctx, p, "k", 10) // capped at the capacity, 4
			checkResult(t, "AllowAtMost(10)", res, err, peekWant{granted: 4, reset: c.fullReset})

			e.advance(100 * ms)
			want := peekWant{retry: c.retry, reset: c.fullReset - 100*ms}
			res, err = e.l.Peek(ctx, p, "k")
			checkResult(t, "Peek when empty", res, err, want)
			allow, _ := e.l.Allow(ctx, p, "k")
			if allow.Allowed || allow.RetryAfter != res.RetryAfter || allow.Granted != 0 {
				t.Fatalf("Allow disagrees with Peek: %+v", allow)
			}
			res, err = e.l.AllowAtMost(ctx, p, "k", 3)
			checkResult(t, "AllowAtMost(3) when empty", res, err, want)

			if err := e.l.Refund(ctx, p, "k", 2); err != nil {
				t.Fatal(err)
			}
			res, err = e.l.Peek(ctx, p, "k")
			checkResult(t, "Peek after Refund(2)", res, err, c.refunded)
			res, err = e.l.AllowAtMost(ctx, p, "k", 10)
			if err != nil || res.Granted != c.regrant {
				t.Fatalf("AllowAtMost(10) after Refund(2): %+v, %v; want %d granted", res, err, c.regrant)
			}

			if err := e.l.Reset(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			res, err = e.l.Peek(ctx, p, "k")
			checkResult(t, "Peek after Reset", res, err, peekWant{granted: 1, remaining: 4})
			res, err = e.l.AllowAtMost(ctx, p, "k", 10)
			again := c.fullReset // from now, or to the window's end
			if c.alg == ratelease.FixedWindow || c.alg == ratelease.SlidingWindowCounter {
				again -= 100 * ms
			}
			checkResult(t, "AllowAtMost(10) after Reset", res, err, peekWant{granted: 4, reset: again})
			if n := len(e.mr.Keys()); n != 1 {
				t.Fatalf("%d keys in Redis: %v", n, e.mr.Keys())
			}

			// A refund above the capacity is capped: never above full.
			for _, n := range []int{100, 1} {
				if err := e.l.Refund(ctx, p, "k", n); err != nil {
					t.Fatal(err)
				}
				res, err = e.l.Peek(ctx, p, "k")
				if err != nil || !res.Allowed || res.Remaining != 4 {
					t.Fatalf("Peek after Refund(%d) of a full limit: %+v, %v", n, res, err)
				}
			}
			if res, _ := e.l.AllowN(ctx, p, "k", 4); !res.Allowed {
				t.Fatalf("AllowN(4) after the refunds: %+v", res)
			}
			if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed {
				t.Fatal("a refund above the capacity gave back more than the capacity")
			}
		})
	}
}

// A refund into a window that has ended gives nothing back.
func TestRefundAfterTheWindowEnded(t *testing.T) {
	for _, alg := range []ratelease.Algorithm{ratelease.FixedWindow, ratelease.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 4, Period: time.Second, Algorithm: alg})
			if res, _ := e.l.AllowN(ctx, p, "k", 4); !res.Allowed {
				t.Fatal(res)
			}
			e.advance(time.Second)
			before, _ := e.l.Peek(ctx, p, "k")
			if err := e.l.Refund(ctx, p, "k", 4); err != nil {
				t.Fatal(err)
			}
			after, _ := e.l.Peek(ctx, p, "k")
			if after != before {
				t.Fatalf("Peek before the refund %+v, after %+v", before, after)
			}
		})
	}
}

// The sliding log's refund removes its newest entries.
func TestRefundSlidingLogNewest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.Limit{Rate: 4, Period: time.Second, Algorithm: ratelease.SlidingWindowLog})
	e.l.Allow(ctx, p, "k")
	e.advance(300 * time.Millisecond)
	e.l.AllowN(ctx, p, "k", 2)
	if err := e.l.Refund(ctx, p, "k", 2); err != nil {
		t.Fatal(err)
	}
	// Left: the entry of +0, which slides out at +1s.
	res, err := e.l.Peek(ctx, p, "k")
	checkResult(t, "Peek", res, err, peekWant{granted: 1, remaining: 3, reset: 700 * time.Millisecond})
}

// Several limits: AllowAtMost grants what the tightest has left, Refund
// caps each limit at its own capacity, and Reset clears them all.
func TestOperatorsSeveralLimits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	second := ratelease.Limit{Rate: 5, Period: time.Second}
	minute := ratelease.Limit{Rate: 8, Period: time.Minute, Algorithm: ratelease.FixedWindow}
	p := policy(t, "p", second, minute)
	res, _ := e.l.AllowAtMost(ctx, p, "k", 5)
	e.advance(time.Second)
	res2, _ := e.l.AllowAtMost(ctx, p, "k", 5)
	if res.Granted != 5 || res2.Granted != 3 || res2.Limit != p.Limits()[1] || res2.Remaining != 0 {
		t.Fatalf("AllowAtMost: %+v then %+v", res, res2)
	}
	// 8 units back: the minute takes all 8, the second (full) none.
	if err := e.l.Refund(ctx, p, "k", 8); err != nil {
		t.Fatal(err)
	}
	res, _ = e.l.Peek(ctx, p, "k")
	if res.Remaining != 5 || res.Limit != p.Limits()[0] {
		t.Fatalf("Peek after Refund(8): %+v", res)
	}
	res, _ = e.l.AllowAtMost(ctx, p, "k", 100)
	if res.Granted != 5 {
		t.Fatalf("AllowAtMost(100): %+v", res)
	}
	if err := e.l.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if keys := e.mr.Keys(); len(keys) != 0 {
		t.Fatalf("keys left after Reset: %v", keys)
	}
}

// Bad input is refused as AllowN refuses it.
func TestOperatorsBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerSecond(5))
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)
	calls := map[string]func(*ratelease.Policy, string, int) error{
		"Peek":  func(p *ratelease.Policy, k string, _ int) error { _, err := e.l.Peek(ctx, p, k); return err },
		"Reset": func(p *ratelease.Policy, k string, _ int) error { return e.l.Reset(ctx, p, k) },
		"AllowAtMost": func(p *ratelease.Policy, k string, n int) error {
			_, err := e.l.AllowAtMost(ctx, p, k, n)
			return err
		},
		"Refund": func(p *ratelease.Policy, k string, n int) error { return e.l.Refund(ctx, p, k, n) },
	}
	for name, call := range calls {
		for _, c := range []struct {
			p    *ratelease.Policy
			key  string
			n    int
			want error
		}{
			{nil, "k", 1, ratelease.ErrInvalidPolicy},
			{&ratelease.Policy{}, "k", 1, ratelease.ErrInvalidPolicy},
			{p, "", 1, ratelease.ErrInvalidKey},
			{p, long, 1, ratelease.ErrInvalidKey},
			{p, "k", 0, ratelease.ErrInvalidN},
			{p, "k", -1, ratelease.ErrInvalidN},
		} {
			err := call(c.p, c.key, c.n)
			if (name == "Peek" || name == "Reset") && c.n <= 0 {
				if err != nil {
					t.Errorf("%s takes no n: %v", name, err)
				}
				continue
			}
			if !errors.Is(err, c.want) {
				t.Errorf("%s(%v, %d bytes, %d): %v, want %v", name, c.p != nil, len(c.key), c.n, err, c.want)
			}
		}
	}
	_ = e.l.Close()
	for name, call := range calls {
		if err := call(p, "k", 1); !errors.Is(err, ratelease.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

// With Redis gone, Peek, Reset and Refund fail with ErrUnavailable in
// every failure mode; AllowAtMost follows the failure mode.
func TestOperatorsRedisDown(t *testing.T) {
	for _, mode := range []ratelease.FailureMode{ratelease.FailClosed, ratelease.FailOpen, ratelease.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			mr := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
			defer c.Close()
			l, err := ratelease.New(c, ratelease.WithExact(), ratelease.WithFailureMode(mode), ratelease.WithRedisTimeout(time.Second), ratelease.WithInstances(1))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			p := policy(t, "p", ratelease.PerMinute(3))
			mr.Close()
			ctx := context.Background()
			if _, err := l.Peek(ctx, p, "k"); !errors.Is(err, ratelease.ErrUnavailable) {
				t.Errorf("Peek: %v", err)
			}
			if err := l.Reset(ctx, p, "k"); !errors.Is(err, ratelease.ErrUnavailable) {
				t.Errorf("Reset: %v", err)
			}
			if err := l.Refund(ctx, p, "k", 1); !errors.Is(err, ratelease.ErrUnavailable) {
				t.Errorf("Refund: %v", err)
			}
			res, err := l.AllowAtMost(ctx, p, "k", 5)
			switch mode {
			case ratelease.FailClosed:
				if !errors.Is(err, ratelease.ErrUnavailable) {
					t.Errorf("AllowAtMost: %+v, %v", res, err)
				}
			case ratelease.FailOpen: // n capped at the capacity
				if err != nil || res.Granted != 3 || res.Source != ratelease.SourceFallback {
					t.Errorf("AllowAtMost: %+v, %v", res, err)
				}
			case ratelease.FailLocal: // this instance's share: all 3
				res2, _ := l.AllowAtMost(ctx, p, "k", 5)
				if err != nil || res.Granted != 3 || res.Source != ratelease.SourceFallback || res2.Allowed || res2.Granted != 0 {
					t.Errorf("AllowAtMost: %+v, %v; then %+v", res, err, res2)
				}
			}
		})
	}
}

// Lease mode on one instance: AllowAtMost takes what is held first and
// Redis the rest; Peek charges nothing; Refund drops the cached denial;
// Reset drops the allowance.
func TestOperatorsLeaseMode(t *testing.T) {
	for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) { testOperatorsLeaseMode(t, alg) })
	}
}

func testOperatorsLeaseMode(t *testing.T, alg ratelease.Algorithm) {
	e := newEnv(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8}))
	exact := newExactOn(t, e.mr)
	ctx := context.Background()
	p := policy(t, "p", ratelease.Limit{Rate: 20, Period: time.Hour, Algorithm: alg})
	if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed || res.Granted != 1 {
		t.Fatalf("Allow: %+v", res)
	}
	if leased := e.l.Stats().UnitsLeased; leased < 2 {
		t.Fatalf("leased %d units, want a lease to hold some", leased)
	}
	res, err := e.l.Peek(ctx, p, "k")
	if err != nil || !res.Allowed || res.Granted != 1 || res.Source != ratelease.SourceLocal || res.Remaining != 20-1 {
		t.Fatalf("Peek with units held: %+v, %v", res, err)
	}
	// Redis has what was not leased. A prefetch (the demand's low water
	// counts the round trip, long under -race) may be between Redis and
	// the allowance: its units are in neither count yet, so look again.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		leased := int(e.l.Stats().UnitsLeased)
		res, _ = exact.Peek(ctx, p, "k")
		if res.Remaining == 20-leased {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis has %d, want %d: Peek charged", res.Remaining, 20-leased)
		}
	}
	res, _ = e.l.AllowAtMost(ctx, p, "k", 1)
	if res.Granted != 1 || res.Source != ratelease.SourceLocal {
		t.Fatalf("AllowAtMost(1) with units held: %+v", res)
	}
	res, _ = e.l.AllowAtMost(ctx, p, "k", 100)
	if res.Granted != 18 || res.Remaining != 0 {
		t.Fatalf("AllowAtMost(100): %+v, want the 18 left (held first, then Redis's)", res)
	}
	res, _ = e.l.AllowAtMost(ctx, p, "k", 2)
	if res.Allowed || res.Granted != 0 {
		t.Fatalf("AllowAtMost(2) when empty: %+v", res)
	}
	e.l.Allow(ctx, p, "k") // a denial, cached
	if res, _ := e.l.Peek(ctx, p, "k"); res.Allowed || res.Source != ratelease.SourceCached {
		t.Fatalf("Peek with a cached denial: %+v", res)
	}
	if err := e.l.Refund(ctx, p, "k", 3); err != nil {
		t.Fatal(err)
	}
	if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 3 {
		t.Fatalf("Redis after Refund(3): %+v", res)
	}
	if res, _ := e.l.AllowN(ctx, p, "k", 2); !res.Allowed || res.Source != ratelease.SourceRemote {
		t.Fatalf("AllowN(2) after Refund(3): %+v, want the cached denial dropped", res)
	}
	if err := e.l.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if keys := e.mr.Keys(); len(keys) != 0 {
		t.Fatalf("keys left after Reset: %v", keys)
	}
	res, _ = e.l.Peek(ctx, p, "k")
	if !res.Allowed || res.Source != ratelease.SourceRemote || res.Remaining != 20 {
		t.Fatalf("Peek after Reset: %+v, want Redis's full limit and nothing held", res)
	}
	res, _ = e.l.AllowAtMost(ctx, p, "k", 20)
	if res.Granted != 20 {
		t.Fatalf("AllowAtMost(20) after Reset: %+v", res)
	}
}

// An AllowAtMost made while a prefetch's answer is on its way to the
// allowance gets the prefetch's units too: Redis granted the prefetch what
// the AllowAtMost then lacks, and AllowAtMost waits for it to land.
func TestAllowAtMostWithAPrefetchInFlight(t *testing.T) {
	// A limit of 20: 1 held, 8 on their way, 4 in Redis: all 13 are this
	// call's.
	e, p := prefetchInFlight(t, 20, 6)
	res, err := e.l.AllowAtMost(context.Background(), p, "k", 100)
	if err != nil || res.Granted != 13 || res.Remaining != 0 {
		t.Fatalf("AllowAtMost(100): %+v, %v; want the 13 left (1 held, 8 prefetched, 4 in Redis)", res, err)
	}
}

// Likewise when Redis has nothing left for the AllowAtMost's own call and
// nothing is held: the prefetch's units are the grant, a hit (it once said
// denied, with 8 units granted and lost), and settled unused they go back.
func TestAllowAtMostDeniedByRedisTakesThePrefetch(t *testing.T) {
	e, p := prefetchInFlight(t, 16, 7)
	ctx := context.Background()
	denied := e.l.Stats().Denied
	res, err := e.l.AllowAtMost(ctx, p, "k", 100)
	if err != nil || !res.Allowed || res.Granted != 8 || res.RetryAfter != 0 || res.Source != ratelease.SourceLocal {
		t.Fatalf("AllowAtMost(100): %+v, %v; want the prefetch's 8, admitted from units held", res, err)
	}
	if d := e.l.Stats().Denied - denied; d != 0 {
		t.Errorf("the admitted AllowAtMost counted %d denials", d)
	}
	if _, err := e.l.Settle(ctx, p, "k", res, 0); err != nil {
		t.Fatal(err)
	}
	if res, err := e.l.Peek(ctx, p, "k"); err != nil || !res.Allowed {
		t.Fatalf("after settling the 8 unused: %+v, %v; want them back", res, err)
	}
}

// prefetchInFlight is a lease-mode env (leases of 8) on a limit of rate an
// hour, where an Allow leased 8 (7 held) and an AllowAtMost took taken of
// them, below low water (a quarter of 8): the prefetch that started is
// answered and held until the next AllowAtMost's own call is.
func prefetchInFlight(t *testing.T, rate, taken int) (*env, *ratelease.Policy) {
	t.Helper()
	var armed atomic.Bool
	arrived, release := make(chan struct{}), make(chan struct{})
	hook := func(ctx context.Context, c ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		if !armed.Load() {
			return ctx, nil
		}
		return ctx, func(ratelease.RedisOutcome) {
			switch c.Op {
			case "lease": // the prefetch: answered, not yet applied
				close(arrived)
				<-release
			case "decide": // the AllowAtMost's own call
				close(release)
			}
		}
	}
	e := newEnv(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8}), ratelease.WithRedisHook(hook))
	ctx := context.Background()
	p := policy(t, "p", ratelease.Limit{Rate: rate, Period: time.Hour})
	if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("Allow: %+v", res)
	}
	armed.Store(true)
	if res, _ := e.l.AllowAtMost(ctx, p, "k", taken); res.Granted != taken || res.Source != ratelease.SourceLocal {
		t.Fatalf("AllowAtMost(%d): %+v", taken, res)
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no prefetch below low water")
	}
	return e, p
}

// newExactAt is an exact Limiter on the redis-server at addr, to read its
// state with Peek.
func newExactAt(t *testing.T, addr string) *ratelease.Limiter {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	l, err := ratelease.New(c, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// newExactOn is an exact Limiter on mr, to read Redis's state with Peek.
func newExactOn(t *testing.T, mr *redistest.Mini) *ratelease.Limiter {
	t.Helper()
	l, err := ratelease.New(mr.Client(t), ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A lease that Redis denied before Reset, Refund or Unblock, whose answer
// is put in only after (its goroutine held between the reply and putting
// it in, as a busy process holds it), records no denial or block: Redis's
// state changed since. The next Allow asks Redis, which admits. Each
// operation, with a policy whose denial would be cached for minutes.
func TestOperatorsDropTheDenialOfALeaseInFlight(t *testing.T) {
	for _, op := range []string{"Reset", "Refund", "Unblock"} {
		t.Run(op, func(t *testing.T) {
			h := newHeldLease(t)
			l, exact := h.l, h.exact
			p := policy(t, "p", ratelease.PerHour(5))
			ctx := context.Background()
			if op == "Unblock" {
				if err := exact.Block(ctx, p, "k", time.Hour); err != nil {
					t.Fatal(err)
				}
			} else if res, _ := exact.AllowN(ctx, p, "k", 5); !res.Allowed { // another instance empties the key
				t.Fatal("could not empty the key")
			}
			done := h.allowHeld(ctx, p)
			var err error
			switch op {
			case "Reset":
				err = l.Reset(ctx, p, "k")
			case "Refund":
				err = l.Refund(ctx, p, "k", 5)
			case "Unblock":
				err = l.Unblock(ctx, p, "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			close(h.release)
			if res := <-done; res.Allowed {
				t.Fatalf("the racing Allow was admitted: %+v", res)
			}
			res, err := l.Allow(ctx, p, "k")
			if err != nil || !res.Allowed {
				t.Fatalf("Allow after %s: %+v, %v", op, res, err)
			}
		})
	}
}

// A lease granted before this instance's Block, whose answer lands after
// it, neither lifts the block nor puts its units in: they go back to
// Redis, and the key is denied here at once. So too with a Refund of the
// key between the Block and the answer (a refund lifts no block).
func TestBlockRefusesTheGrantOfALeaseInFlight(t *testing.T) {
	for _, refund := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "refund"}[refund], func(t *testing.T) { blockRefusesAGrantInFlight(t, refund) })
	}
}

func blockRefusesAGrantInFlight(t *testing.T, refund bool) {
	h := newHeldLease(t)
	l, exact := h.l, h.exact
	p := policy(t, "p", ratelease.PerHour(5))
	ctx := context.Background()
	done := h.allowHeld(ctx, p) // leases 5: 1 for it, 4 held
	if err := l.Block(ctx, p, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	if refund {
		if err := l.Refund(ctx, p, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	close(h.release)
	if res := <-done; !res.Allowed { // (its unit was granted before the block)
		t.Fatalf("the racing Allow: %+v", res)
	}
	for i := 0; i < 3; i++ {
		if res, err := l.Allow(ctx, p, "k"); err != nil || res.Allowed || !res.Blocked {
			t.Fatalf("Allow %d after Block: %+v, %v; want denied, blocked", i, res, err)
		}
	}
	if err := exact.Unblock(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	// The 4 held went back: the key has all but the racing Allow's unit
	// (given back too by the Refund).
	want := 4
	if refund {
		want = 5
	}
	var left int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := exact.Peek(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if left = res.Remaining; left == want || time.Now().After(deadline) {
			break
		}
	}
	if left != want {
		t.Fatalf("the key has %d left after the unblock; want %d (the lease's 4 held given back)", left, want)
	}
}

// heldLease is a lease-mode Limiter (leases of 5, TTL an hour) whose next
// lease's answer, once armed by allowHeld, is held between Redis's reply
// and its putting in (as a busy process holds it) until release is
// closed; and an exact Limiter on the same Redis.
type heldLease struct {
	l, exact *ratelease.Limiter
	arm      atomic.Bool
	entered  chan struct{}
	release  chan struct{}
}

func newHeldLease(t *testing.T) *heldLease {
	t.Helper()
	mr := redistest.StartMini(t)
	c := mr.Client(t)
	h := &heldLease{entered: make(chan struct{}, 1), release: make(chan struct{})}
	hook := func(ctx context.Context, call ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		if call.Op != "lease" || !h.arm.Load() {
			return ctx, nil
		}
		return ctx, func(ratelease.RedisOutcome) {
			if h.arm.CompareAndSwap(true, false) {
				h.entered <- struct{}{}
				<-h.release // Redis answered; the answer is not put in yet
			}
		}
	}
	var err error
	h.l, err = ratelease.New(c, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}),
		ratelease.WithRedisTimeout(2*time.Second), ratelease.WithRedisHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.l.Close() })
	if h.exact, err = ratelease.New(c, ratelease.WithExact()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.exact.Close() })
	return h
}

// allowHeld arms the hold and makes an Allow of key "k" under p, whose
// lease is held; it returns once Redis answered it, with the channel the
// Allow's Result comes on.
func (h *heldLease) allowHeld(ctx context.Context, p *ratelease.Policy) <-chan ratelease.Result {
	h.arm.Store(true)
	done := make(chan ratelease.Result, 1)
	go func() {
		res, _ := h.l.Allow(ctx, p, "k")
		done <- res
	}()
	<-h.entered
	return done
}
