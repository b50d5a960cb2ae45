package ratetest_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/ratetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

func policy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// limitOf is a limit of 10 per second with alg (burst 10 where it has one).
func limitOf(alg ratelease.Algorithm) ratelease.Limit {
	return ratelease.Limit{Rate: 10, Period: time.Second, Algorithm: alg}
}

var algorithms = []ratelease.Algorithm{
	ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowLog,
	ratelease.SlidingWindowCounter, ratelease.LeakyBucket,
}

// allowN reports whether AllowN admits n, failing t on an error.
func allowN(t *testing.T, l *ratelease.Limiter, p *ratelease.Policy, key string, n int) ratelease.Result {
	t.Helper()
	res, err := l.AllowN(ctx, p, key, n)
	if err != nil {
		t.Fatalf("AllowN(%d): %v", n, err)
	}
	return res
}

// The clocks start at Epoch, on a window boundary, and Advance moves the
// Limiter's clock and Redis's TIME together.
func TestAdvanceMovesBothClocks(t *testing.T) {
	env := ratetest.New(t)
	if got := env.Now(); !got.Equal(ratetest.Epoch) {
		t.Fatalf("Now() = %v, want Epoch %v", got, ratetest.Epoch)
	}
	if ratetest.Epoch.UnixMicro()%(24*time.Hour).Microseconds() != 0 {
		t.Fatalf("Epoch %v is not a whole day since the Unix epoch", ratetest.Epoch)
	}
	env.Advance(1500 * time.Millisecond)
	env.Advance(0)
	env.Advance(-time.Hour) // the time never goes back
	want := ratetest.Epoch.Add(1500 * time.Millisecond)
	redisNow, err := env.Client().Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]time.Time{"Now()": env.Now(), "Clock().Now()": env.Clock().Now(), "Redis TIME": redisNow} {
		if !got.Equal(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Key expiry moves too: a key with a TTL of 2s is gone 2s later.
	if err := env.Client().Set(ctx, "x", "1", 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	env.Advance(1999 * time.Millisecond)
	if !env.Redis().Exists("x") {
		t.Fatal("the key expired before its TTL")
	}
	env.Advance(time.Millisecond)
	if env.Redis().Exists("x") {
		t.Fatal("the key outlived its TTL")
	}
}

// Per algorithm, at 10 per second: after Exhaust the next Allow is denied,
// with the RetryAfter that the limit says; one microsecond before it the
// key is still denied, and at it admitted. Then what the limit frees up at
// fixed points in time, to the unit.
func TestAdvanceRefillsExactly(t *testing.T) {
	for _, c := range []struct {
		alg ratelease.Algorithm
		// retry is the RetryAfter of the first denial after Exhaust at
		// Epoch; steps are then (advance by, units that AllowN must admit
		// then and no more), from the moment the denial's RetryAfter ends
		// (and its one unit is taken).
		retry time.Duration
		steps []step
	}{
		// A full bucket of 10 used up; one unit comes back every 100ms.
		{ratelease.TokenBucket, 100 * time.Millisecond, []step{
			{99 * time.Millisecond, 0}, {time.Millisecond, 1}, {250 * time.Millisecond, 2},
			{10 * time.Second, 10}, // never above the burst
		}},
		// 10 in the window [0, 1s); the next gives 10 at 1s, one of them
		// taken then; the 9 left are there until the window ends.
		{ratelease.FixedWindow, time.Second, []step{
			{500 * time.Millisecond, 9}, {499 * time.Millisecond, 0}, {time.Millisecond, 10}, {2 * time.Second, 10},
		}},
		// 10 logged at 0 leave at 1s; the unit admitted at 1s leaves at 2s.
		{ratelease.SlidingWindowLog, time.Second, []step{
			{500 * time.Millisecond, 9}, {499 * time.Millisecond, 0}, {time.Millisecond, 1},
		}},
		// At 1s the previous window's 10 weigh in fully, and their weight
		// falls by one unit every 100ms: the first unit fits at 1.1s. At
		// 1.5s (e = 500ms) the estimate is 1 + ceil(10·0.5) = 6: 4 more.
		// At 2s, the previous window holds 5 (weight 1): 5 fit.
		{ratelease.SlidingWindowCounter, 1100 * time.Millisecond, []step{
			{400 * time.Millisecond, 4}, {500 * time.Millisecond, 5},
		}},
		// The queue of 10 drains in 1s; Allow admits into an empty queue
		// only (then up to the burst), and one unit keeps it busy 100ms.
		{ratelease.LeakyBucket, time.Second, []step{
			{99 * time.Millisecond, 0}, {time.Millisecond, 1},
		}},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			env := ratetest.New(t)
			l := env.Limiter()
			p := policy(t, "p", limitOf(c.alg))
			if err := env.Exhaust(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			res := allowN(t, l, p, "k", 1)
			if res.Allowed || res.RetryAfter != c.retry {
				t.Fatalf("Allow after Exhaust: %+v, want denied with RetryAfter %v", res, c.retry)
			}
			env.Advance(c.retry - time.Microsecond)
			if res := allowN(t, l, p, "k", 1); res.Allowed || res.RetryAfter != time.Microsecond {
				t.Fatalf("1µs before RetryAfter: %+v, want denied with RetryAfter 1µs", res)
			}
			env.Advance(time.Microsecond)
			if res := allowN(t, l, p, "k", 1); !res.Allowed {
				t.Fatalf("at RetryAfter: %+v, want admitted", res)
			}
			at := c.retry
			for _, s := range c.steps {
				env.Advance(s.advance)
				at += s.advance
				if got := takeAll(t, l, p, "k"); got != s.admit {
					t.Fatalf("at %v: admitted %d, want %d", at, got, s.admit)
				}
			}
		})
	}
}

type step struct {
	advance time.Duration
	admit   int
}

// takeAll admits units of key one at a time until a denial, and returns
// how many.
func takeAll(t *testing.T, l *ratelease.Limiter, p *ratelease.Policy, key string) int {
	t.Helper()
	n := 0
	for allowN(t, l, p, key, 1).Allowed {
		if n++; n > 1000 {
			t.Fatal("more than 1000 units admitted on a clock that stands still")
		}
	}
	return n
}

// Per algorithm, demand far above the limit for 3s of the Env's time, in
// steps of 10ms: what is admitted is exactly what the limit allows, and a
// model of the algorithm, fed the same steps, agrees at every step.
func TestAdmittedFollowsTheLimit(t *testing.T) {
	const (
		rate     = 10
		stepSize = 10 * time.Millisecond
		steps    = 300
	)
	// Each model returns what the algorithm frees up at a time (ms since
	// Epoch), given what it admitted before at each ms (took).
	models := map[ratelease.Algorithm]func(now int, took map[int]int) int{
		ratelease.TokenBucket: func(now int, took map[int]int) int {
			// GCRA: the debt (in ms of refill) grows by 100 per unit and
			// falls by one every ms, never below 0; room = 10 - ceil(debt/100).
			debt, last := 0, 0
			for ms := 0; ms <= now; ms += int(stepSize / time.Millisecond) {
				debt = max(0, debt-(ms-last))
				last = ms
				if ms < now {
					debt += 100 * took[ms]
				}
			}
			return rate - (debt+99)/100
		},
		ratelease.FixedWindow: func(now int, took map[int]int) int {
			used := 0
			for ms, n := range took {
				if ms/1000 == now/1000 {
					used += n
				}
			}
			return rate - used
		},
		ratelease.SlidingWindowLog: func(now int, took map[int]int) int {
			used := 0
			for ms, n := range took {
				if ms > now-1000 {
					used += n
				}
			}
			return rate - used
		},
		ratelease.SlidingWindowCounter: func(now int, took map[int]int) int {
			cur, prev := 0, 0
			for ms, n := range took {
				switch ms / 1000 {
				case now / 1000:
					cur += n
				case now/1000 - 1:
					prev += n
				}
			}
			e := now % 1000
			return max(0, rate-cur-(prev*(1000-e)+999)/1000)
		},
		ratelease.LeakyBucket: func(now int, took map[int]int) int {
			// Allow admits only into an empty queue: one unit at most, each
			// keeping the queue busy 100ms.
			for ms, n := range took {
				if n > 0 && now < ms+100*n {
					return 0
				}
			}
			return 1
		},
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			env := ratetest.New(t)
			p := policy(t, "p", limitOf(alg))
			took := map[int]int{}
			total := 0
			for i := 0; i <= steps; i++ {
				now := i * int(stepSize/time.Millisecond)
				want := models[alg](now, took)
				got := takeAll(t, env.Limiter(), p, "k")
				if got != want {
					t.Fatalf("at %dms: admitted %d, the model says %d", now, got, want)
				}
				took[now] = got
				total += got
				env.Advance(stepSize)
			}
			// Over [0, 3s]: the bucket's Burst + Rate·T; Rate in each of
			// the 4 windows touched; the log's Rate per period at 0, 1, 2
			// and 3s; the counter's 10 at first, then 9 a window (the
			// previous window's weight is rounded up: it frees a unit at
			// e = 100ms·k/0.9, for k = 1..8, on top of the one at e = 0),
			// and 1 at 3s; the leaky bucket's one unit per 100ms.
			wantTotal := map[ratelease.Algorithm]int{
				ratelease.TokenBucket: 40, ratelease.FixedWindow: 40, ratelease.SlidingWindowLog: 40,
				ratelease.SlidingWindowCounter: 29, ratelease.LeakyBucket: 31,
			}[alg]
			if total != wantTotal {
				t.Fatalf("admitted %d over 3s, want %d", total, wantTotal)
			}
		})
	}
}

// A Wait sleeps on the Env's clock: it returns once Advance has moved the
// time to when its units are free, and not before.
func TestWaitWakesOnAdvance(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			env := ratetest.New(t)
			p := policy(t, "p", limitOf(alg))
			if err := env.Exhaust(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			retry := allowN(t, env.Limiter(), p, "k", 1).RetryAfter
			done := make(chan error, 1)
			go func() { done <- env.Limiter().Wait(ctx, p, "k") }()
			for env.Clock().Timers() == 0 { // the Wait is asleep
				runtime.Gosched()
			}
			env.Advance(retry - time.Microsecond)
			select {
			case err := <-done:
				t.Fatalf("Wait returned %v before its time", err)
			case <-time.After(20 * time.Millisecond):
			}
			// A leaky bucket's Wait slept until its queue had room (100ms),
			// then reserved its slot, and sleeps until it begins: 1µs on.
			for env.Clock().Timers() == 0 {
				runtime.Gosched()
			}
			env.Advance(time.Microsecond)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Wait did not return once the Env's time reached its RetryAfter")
			}
		})
	}
}

// Exhaust uses up the tightest of several limits, under every algorithm
// mix, a shadow policy (the next Allow is a would-be denial) and a blocked
// key (nothing to take).
func TestExhaust(t *testing.T) {
	env := ratetest.New(t)
	l := env.Limiter()
	for _, c := range []struct {
		name   string
		limits []ratelease.Limit
	}{
		{"burst below the minute's", []ratelease.Limit{ratelease.PerSecond(5), ratelease.PerMinute(100)}},
		{"minute below the second's burst", []ratelease.Limit{ratelease.PerSecond(50), ratelease.Limit{Rate: 20, Period: time.Minute, Algorithm: ratelease.FixedWindow}}},
		{"a log with more than one request's units", []ratelease.Limit{{Rate: 2500, Period: time.Minute, Algorithm: ratelease.SlidingWindowLog}}},
		{"a big bucket", []ratelease.Limit{{Rate: 1_000_000_000, Period: time.Second}}},
		{"a leaky bucket", []ratelease.Limit{{Rate: 5, Period: time.Second, Burst: 20, Algorithm: ratelease.LeakyBucket}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := policy(t, "x"+strings.ReplaceAll(c.name, " ", "-"), c.limits...)
			if err := env.Exhaust(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			if res := allowN(t, l, p, "k", 1); res.Allowed {
				t.Fatalf("Allow after Exhaust: %+v", res)
			}
			// Exhausted already: nothing more to take, no error.
			if err := env.Exhaust(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("leaky bucket's queue", func(t *testing.T) {
		p := policy(t, "queue", ratelease.Limit{Rate: 10, Period: time.Second, Burst: 5, Algorithm: ratelease.LeakyBucket})
		if err := env.Exhaust(ctx, p, "k"); err != nil {
			t.Fatal(err)
		}
		if res := allowN(t, l, p, "k", 1); res.Allowed || res.RetryAfter != 500*time.Millisecond {
			t.Fatalf("after Exhaust: %+v, want denied until the queue of 5 has drained (500ms)", res)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		p := policy(t, "shadow", ratelease.PerSecond(3))
		if err := env.Exhaust(ctx, p.Shadow(), "k"); err != nil {
			t.Fatal(err)
		}
		if res := allowN(t, l, p.Shadow(), "k", 1); !res.Allowed || !res.Shadowed {
			t.Fatalf("shadow Allow after Exhaust: %+v, want a would-be denial", res)
		}
		if res := allowN(t, l, p, "k", 1); res.Allowed {
			t.Fatalf("Allow after Exhaust of the shadow policy: %+v, want denied: they share the state", res)
		}
	})
	t.Run("blocked", func(t *testing.T) {
		p := policy(t, "blocked", ratelease.PerSecond(3))
		if err := l.Block(ctx, p, "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := env.Exhaust(ctx, p, "k"); err != nil {
			t.Fatal(err)
		}
		if err := l.Unblock(ctx, p, "k"); err != nil {
			t.Fatal(err)
		}
		if got := takeAll(t, l, p, "k"); got != 3 {
			t.Fatalf("after Unblock, admitted %d, want the 3 Exhaust could not take", got)
		}
	})
}

func TestExhaustErrors(t *testing.T) {
	env := ratetest.New(t)
	p := policy(t, "p", ratelease.PerSecond(3))
	for _, c := range []struct {
		name string
		l    *ratelease.Limiter
		p    *ratelease.Policy
		key  string
		want error
	}{
		{"nil limiter", nil, p, "k", ratelease.ErrInvalidOption},
		{"nil policy", env.Limiter(), nil, "k", ratelease.ErrInvalidPolicy},
		{"zero policy", env.Limiter(), &ratelease.Policy{}, "k", ratelease.ErrInvalidPolicy},
		{"empty key", env.Limiter(), p, "", ratelease.ErrInvalidKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := ratetest.ExhaustWith(ctx, c.l, c.p, c.key); !errors.Is(err, c.want) {
				t.Fatalf("ExhaustWith: %v, want %v", err, c.want)
			}
		})
	}
	if err := env.Exhaust(ctx, nil, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Fatalf("Exhaust(nil policy): %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := env.Exhaust(cctx, p, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exhaust with a cancelled context: %v", err)
	}
	// A Limiter that admits without charging: FailOpen while Redis fails.
	open, err := env.NewLimiter(ratelease.WithFailureMode(ratelease.FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	env.Redis().SetError("LOADING Redis is loading the dataset in memory")
	defer env.Redis().SetError("")
	if err := ratetest.ExhaustWith(ctx, open, p, "k"); !errors.Is(err, ratetest.ErrNotExhausted) {
		t.Fatalf("ExhaustWith on a Limiter that admits everything: %v, want ErrNotExhausted", err)
	}
}

// Limiters of one Env are replicas: they share the limits (and the clock).
func TestNewLimiterSharesTheLimits(t *testing.T) {
	env := ratetest.New(t)
	other, err := env.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "shared", ratelease.PerSecond(4))
	if got := takeAll(t, env.Limiter(), p, "k"); got != 4 {
		t.Fatalf("first Limiter admitted %d, want 4", got)
	}
	if res := allowN(t, other, p, "k", 1); res.Allowed {
		t.Fatalf("the other Limiter admitted past the shared limit: %+v", res)
	}
	env.Advance(500 * time.Millisecond)
	if got := takeAll(t, other, p, "k"); got != 2 {
		t.Fatalf("the other Limiter admitted %d 500ms later, want 2", got)
	}
	if _, err := env.NewLimiter(ratelease.WithMaxKeys(0)); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Fatalf("NewLimiter with an invalid option: %v", err)
	}
}

// Lease mode, when asked for: the Limiter leases (decisions from memory),
// and the limit still holds over the Env's time.
func TestLeaseModeOnRequest(t *testing.T) {
	env := ratetest.New(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 20, Max: 20}))
	p := policy(t, "lease", ratelease.PerHour(100))
	sources := map[ratelease.Source]int{}
	for range 30 {
		res := allowN(t, env.Limiter(), p, "k", 1)
		if !res.Allowed {
			t.Fatalf("denied under the limit: %+v", res)
		}
		sources[res.Source]++
	}
	if sources[ratelease.SourceLocal] == 0 {
		t.Fatalf("sources %v: no decision from a lease", sources)
	}
	if err := env.Exhaust(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if res := allowN(t, env.Limiter(), p, "k", 1); res.Allowed {
		t.Fatalf("Allow after Exhaust in lease mode: %+v", res)
	}
	// What every Limiter admitted: never more than the bucket's 100 while
	// the time stands still.
	if s := env.Limiter().Stats(); s.Allowed > 100 {
		t.Fatalf("admitted %d of a limit of 100", s.Allowed)
	}
}

// Run and Close, without a testing.TB: Close is idempotent, and a closed
// Env makes no more Limiters.
func TestRunAndClose(t *testing.T) {
	if _, err := ratetest.Run(ratelease.WithKeyPrefix("{bad}")); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Fatalf("Run with an invalid option: %v", err)
	}
	env, err := ratetest.Run()
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "p", ratelease.PerSecond(1))
	if res := allowN(t, env.Limiter(), p, "k", 1); !res.Allowed {
		t.Fatalf("first Allow: %+v", res)
	}
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	if err := env.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := env.Limiter().Allow(ctx, p, "k"); !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("Allow after Close: %v", err)
	}
	if _, err := env.NewLimiter(); !errors.Is(err, ratetest.ErrClosed) {
		t.Fatalf("NewLimiter after Close: %v", err)
	}
}

// New fails its test on an invalid option, with the error.
func TestNewFailsTheTest(t *testing.T) {
	ft := &fatalT{TB: t}
	var wg sync.WaitGroup
	wg.Go(func() { ratetest.New(ft, ratelease.WithRedisTimeout(-1)) })
	wg.Wait()
	if !strings.Contains(ft.msg, "invalid option") {
		t.Fatalf("New with an invalid option: Fatalf(%q), want the error", ft.msg)
	}
}

// fatalT is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing.T's does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Advance is safe for concurrent use with decisions: many goroutines deciding
// while the time moves never see an error, and the total stays within the
// bucket's bound over the Env's time.
func TestConcurrentAdvance(t *testing.T) {
	env := ratetest.New(t)
	p := policy(t, "p", ratelease.Limit{Rate: 100, Period: time.Second, Burst: 10})
	var admitted sync.Map
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			n := 0
			for {
				select {
				case <-stop:
					admitted.Store(g, n)
					return
				default:
				}
				res, err := env.Limiter().Allow(ctx, p, "k")
				if err != nil {
					t.Error(err)
					admitted.Store(g, n)
					return
				}
				if res.Allowed {
					n++
				}
			}
		})
	}
	for range 100 {
		env.Advance(10 * time.Millisecond)
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	total := 0
	admitted.Range(func(_, v any) bool { total += v.(int); return true })
	bound := 10 + 100*env.Now().Sub(ratetest.Epoch).Seconds()
	if float64(total) > math.Round(bound) {
		t.Fatalf("admitted %d, above Burst + Rate·T = %.0f", total, bound)
	}
}
