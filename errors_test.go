package ratelease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// Every exported enum of the package is a word in JSON, as String says it,
// its zero value included.
func TestEnumsMarshalAsWords(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{ratelease.Algorithm(0), "token bucket"},
		{ratelease.TokenBucket, "token bucket"},
		{ratelease.FixedWindow, "fixed window"},
		{ratelease.SlidingWindowLog, "sliding window log"},
		{ratelease.SlidingWindowCounter, "sliding window counter"},
		{ratelease.LeakyBucket, "leaky bucket"},

		{ratelease.Source(0), "none"},
		{ratelease.SourceLocal, "local"},
		{ratelease.SourceRemote, "remote"},
		{ratelease.SourceFallback, "fallback"},
		{ratelease.SourceCached, "cached"},
		{ratelease.SourceBusy, "busy"},

		{ratelease.FailureMode(0), "fail-local"},
		{ratelease.FailLocal, "fail-local"},
		{ratelease.FailOpen, "fail-open"},
		{ratelease.FailClosed, "fail-closed"},

		{ratelease.BreakerClosed, "closed"},
		{ratelease.BreakerOpen, "open"},
		{ratelease.BreakerHalfOpen, "half-open"},

		{ratelease.EventFirstFailure, "first-failure"},
		{ratelease.EventBreaker, "breaker"},
		{ratelease.EventWarning, "warning"},

		{ratelease.CalendarDay, "day"},
		{ratelease.CalendarWeek, "week"},
		{ratelease.CalendarMonth, "month"},
	} {
		got, err := json.Marshal(c.v)
		if err != nil || string(got) != `"`+c.want+`"` || fmt.Sprint(c.v) != c.want {
			t.Errorf("%T(%v): json %s, %v; fmt %q; want %q for both", c.v, c.v, got, err, fmt.Sprint(c.v), c.want)
		}
	}
}

// engineErr checks err, from a call named what, against root, a sentinel
// of the root package that stands for one of the engine's: it matches both,
// and says what the engine's error said.
func engineErr(t *testing.T, what string, err, root, engine error) {
	t.Helper()
	if !errors.Is(err, root) || !errors.Is(err, engine) {
		t.Errorf("%s: %v; want an error matching %q, the root's and the engine's", what, err, root)
		return
	}
	if u := errors.Unwrap(err); u == nil || u.Error() != err.Error() {
		t.Errorf("%s: %q wraps %v; want the engine's error, saying the same", what, err, u)
	}
}

// The errors that come from the engine match the root's sentinels
// (ErrInvalidPolicy, ErrUnavailable, ErrClosed, ErrEvictionPolicy), the
// engine's and every cause they wrap, on every path that reaches a user:
// each method's error, an event's Err, a RedisHook's outcome.
func TestEngineErrorsMatchTheRootSentinels(t *testing.T) {
	ctx := context.Background()
	// calls makes every call of l that can fail, on p and key "k".
	calls := func(l *ratelease.Limiter, p *ratelease.Policy) map[string]error {
		_, allow := l.Allow(ctx, p, "k")
		_, atMost := l.AllowAtMost(ctx, p, "k", 2)
		_, peek := l.Peek(ctx, p, "k")
		return map[string]error{
			"Allow": allow, "AllowAtMost": atMost, "Peek": peek,
			"Wait":    l.Wait(ctx, p, "k"),
			"Refund":  l.Refund(ctx, p, "k", 1),
			"Reset":   l.Reset(ctx, p, "k"),
			"Block":   l.Block(ctx, p, "k", time.Minute),
			"Unblock": l.Unblock(ctx, p, "k"),
		}
	}

	t.Run("closed", func(t *testing.T) {
		e := newEnv(t)
		p := policy(t, "p", ratelease.PerSecond(10))
		if err := e.l.Close(); err != nil {
			t.Fatal(err)
		}
		errs := calls(e.l, p)
		errs["Ping"] = e.l.Ping(ctx)
		for what, err := range errs {
			engineErr(t, what, err, ratelease.ErrClosed, door.ErrClosed)
		}
	})

	t.Run("unavailable", func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
		defer client.Close()
		var mu sync.Mutex
		var evs []ratelease.Event
		var outcomes []error
		l, err := ratelease.New(client, ratelease.WithExact(), ratelease.WithFailureMode(ratelease.FailClosed),
			ratelease.WithRedisTimeout(time.Second),
			ratelease.WithEvents(func(ev ratelease.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }),
			ratelease.WithRedisHook(func(ctx context.Context, _ ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
				return ctx, func(o ratelease.RedisOutcome) { mu.Lock(); outcomes = append(outcomes, o.Err); mu.Unlock() }
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		p := policy(t, "p", ratelease.PerSecond(10))
		// The first call, before the breaker opens, has the dial's cause.
		_, err = l.Allow(ctx, p, "k")
		engineErr(t, "Allow", err, ratelease.ErrUnavailable, door.ErrUnavailable)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Allow: %v; want its cause, syscall.ECONNREFUSED, found", err)
		}
		errs := calls(l, p)
		errs["Ping"] = l.Ping(ctx)
		for what, err := range errs {
			engineErr(t, what, err, ratelease.ErrUnavailable, door.ErrUnavailable)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(evs) == 0 || evs[0].Kind != ratelease.EventFirstFailure {
			t.Fatalf("events %+v; want the first failure first", evs)
		}
		for _, ev := range evs {
			if ev.Err != nil {
				engineErr(t, "the Err of an event "+string(ev.Kind), ev.Err, ratelease.ErrUnavailable, door.ErrUnavailable)
			}
		}
		if len(outcomes) == 0 {
			t.Fatal("the hook heard of no round trip")
		}
		engineErr(t, "the outcome of a round trip", outcomes[0], ratelease.ErrUnavailable, door.ErrUnavailable)
		if !errors.Is(outcomes[0], syscall.ECONNREFUSED) {
			t.Errorf("the outcome of a round trip: %v; want its cause, syscall.ECONNREFUSED, found", outcomes[0])
		}
	})

	// A policy redefined under its name (a config reload) is refused once
	// the grace for requests in flight has passed.
	t.Run("invalid policy", func(t *testing.T) {
		e := newEnv(t)
		old := policy(t, "r", ratelease.PerSecond(10))
		if _, err := e.l.Allow(ctx, old, "k"); err != nil {
			t.Fatal(err)
		}
		raised := policy(t, "r", ratelease.PerSecond(20))
		if _, err := e.l.Allow(ctx, raised, "k"); err != nil {
			t.Fatal(err)
		}
		e.advance(tier.RedefinitionGrace)
		for what, err := range calls(e.l, old) {
			engineErr(t, what, err, ratelease.ErrInvalidPolicy, remote.ErrInvalidPolicy)
			if err != nil && !strings.Contains(err.Error(), "redefined") {
				t.Errorf("%s: %q; want it to say the policy was redefined", what, err)
			}
		}
	})

	t.Run("eviction policy", func(t *testing.T) {
		srv := redistest.Start(t)
		if err := srv.Client(t).ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var evs []ratelease.Event
		l, err := ratelease.New(srv.Client(t), ratelease.WithExact(),
			ratelease.WithEvents(func(ev ratelease.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(ctx, policy(t, "p", ratelease.PerSecond(10)), "k"); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil { // waits for the reading in the background
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(evs) != 1 || evs[0].Kind != ratelease.EventWarning {
			t.Fatalf("events %+v; want one warning", evs)
		}
		engineErr(t, "the warning's Err", evs[0].Err, ratelease.ErrEvictionPolicy, door.ErrEvictionPolicy)
	})
}
