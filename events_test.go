package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// eventLog keeps the events a Limiter reports.
type eventLog struct {
	mu     sync.Mutex
	events []ratelease.Event
}

func (e *eventLog) event(ev ratelease.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, ev)
}

// take returns the events so far, and forgets them.
func (e *eventLog) take() []ratelease.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.events
	e.events = nil
	return evs
}

// kinds lists events as kind/breaker state.
func kinds(evs []ratelease.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, fmt.Sprintf("%v/%v", ev.Kind, ev.Breaker))
	}
	return strings.Join(s, " ")
}

// A Redis killed and restarted under a Limiter: WithEvents tells the first
// failure with its cause (connection refused), the breaker's opening with
// the failure that opened it, its probe and its close. The server's eviction policy is read once per Limiter
// life: the restarted server's, evicting now, is not read again, unless
// the first reading failed (the kill came before it was made): then it is
// made again once Redis is back, and warns of the new policy.
func TestEventsOfAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	var log eventLog
	l, err := ratelease.New(client, ratelease.WithExact(), ratelease.WithRedisTimeout(time.Second),
		ratelease.WithEvents(log.event))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := policy(t, "outage", ratelease.PerSecond(1000))
	ctx := context.Background()
	if res, err := l.Allow(ctx, p, "k"); err != nil || res.Source != ratelease.SourceRemote {
		t.Fatalf("Redis up: %+v, %v", res, err)
	}
	srv.Kill()
	for i := range 6 {
		if res, err := l.Allow(ctx, p, "k"); err != nil || res.Source != ratelease.SourceFallback {
			t.Fatalf("Redis down, request %d: %+v, %v", i, res, err)
		}
	}
	evs := log.take()
	if got := kinds(evs); got != "first-failure/closed breaker/open" {
		t.Fatalf("Redis down: %s, want the first failure and the opening", got)
	}
	for _, ev := range evs {
		if !errors.Is(ev.Err, ratelease.ErrUnavailable) || !strings.Contains(ev.Err.Error(), "connection refused") || ev.Node != "" {
			t.Fatalf("%v event: cause %v, node %q; want connection refused, wrapping ErrUnavailable", ev.Kind, ev.Err, ev.Node)
		}
	}
	srv.Restart(t)
	if err := client.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := l.Allow(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Source == ratelease.SourceRemote {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close within 10s of the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Close(); err != nil { // waits for any reading in the background
		t.Fatal(err)
	}
	// Probes that failed while the client's pool got over the outage
	// reopen the breaker, with their cause; the last probe closes it.
	evs = log.take()
	if got := kinds(evs); !regexp.MustCompile(`^(breaker/half-open breaker/open )*breaker/half-open breaker/closed( warning/closed)?$`).MatchString(got) {
		t.Fatalf("Redis back: %s, want probes and the close (and a second reading only after a failed first)", got)
	}
	if n := len(evs); evs[n-1].Kind == ratelease.EventWarning {
		evs = evs[:n-1] // the second reading's (see above)
	}
	for _, ev := range evs {
		if (ev.Breaker == ratelease.BreakerOpen) != (ev.Err != nil) {
			t.Fatalf("%v/%v event: cause %v; want one for an opening only", ev.Kind, ev.Breaker, ev.Err)
		}
	}
}

// A Redis whose maxmemory-policy evicts (allkeys-lru, or volatile-lru,
// which evicts limiter keys too: they all carry TTLs) is reported once,
// in lease and in exact mode, as an EventWarning wrapping
// ErrEvictionPolicy; noeviction is not. New reads nothing: the reading
// follows the first call that succeeds.
func TestWarningOfAnEvictingRedis(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	p := policy(t, "evict", ratelease.PerSecond(1000))
	for _, policy := range []string{"noeviction", "allkeys-lru", "volatile-lru"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		for _, exact := range []bool{false, true} {
			var log eventLog
			opts := []ratelease.Option{ratelease.WithEvents(log.event)}
			if exact {
				opts = append(opts, ratelease.WithExact())
			}
			l, err := ratelease.New(srv.Client(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
			if s := l.Stats(); s.RoundTrips != 0 || len(log.take()) != 0 {
				t.Fatalf("New called Redis: %+v", s)
			}
			for i := range 20 {
				if _, err := l.Allow(ctx, p, fmt.Sprint("k", i%3)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			evs := log.take()
			if policy == "noeviction" {
				if len(evs) != 0 {
					t.Fatalf("noeviction, exact %v: %s", exact, kinds(evs))
				}
				continue
			}
			if len(evs) != 1 || evs[0].Kind != ratelease.EventWarning || evs[0].Breaker != ratelease.BreakerClosed ||
				!errors.Is(evs[0].Err, ratelease.ErrEvictionPolicy) || !strings.Contains(evs[0].Err.Error(), "maxmemory-policy "+policy) {
				t.Fatalf("%s, exact %v: %+v, want one warning of it", policy, exact, evs)
			}
			if s := l.Stats(); s.Errors != 0 {
				t.Fatalf("%s, exact %v: %d errors", policy, exact, s.Errors)
			}
		}
	}
}

// miniredis has no CONFIG: the Limiter says nothing of it, and counts no
// error.
func TestNoWarningWithoutConfig(t *testing.T) {
	var log eventLog
	e := newEnv(t, ratelease.WithEvents(log.event))
	p := policy(t, "mini", ratelease.PerSecond(10))
	for range 3 {
		if _, err := e.l.Allow(context.Background(), p, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	if evs := log.take(); len(evs) != 0 {
		t.Fatalf("events: %+v", evs)
	}
	if s := e.l.Stats(); s.Errors != 0 || s.RoundTrips != 4 {
		t.Fatalf("Stats: %+v; want 3 decisions and the refused reading, no error", s)
	}
}

// The reading of the eviction policy is a Redis round trip like the
// others: WithRedisHook is told of it, once, as "config".
func TestEvictionReadingIsHooked(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var ops []string
	hook := func(ctx context.Context, c ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		return ctx, func(o ratelease.RedisOutcome) {
			mu.Lock()
			defer mu.Unlock()
			ops = append(ops, fmt.Sprintf("%v/%d/%v", c.Op, c.Keys, o.Err))
		}
	}
	var log eventLog
	l, err := ratelease.New(srv.Client(t), ratelease.WithExact(), ratelease.WithRedisHook(hook), ratelease.WithEvents(log.event))
	if err != nil {
		t.Fatal(err)
	}
	p := policy(t, "hooked", ratelease.PerSecond(10))
	for range 2 {
		if _, err := l.Allow(context.Background(), p, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(ops)
	if got, want := fmt.Sprint(ops), "[config/0/<nil> decide/1/<nil> decide/1/<nil>]"; got != want {
		t.Fatalf("the hook was told of %s, want %s", got, want)
	}
}
