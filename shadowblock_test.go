package ratelease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
)

var everyAlgorithm = []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow,
	ratelease.SlidingWindowLog, ratelease.SlidingWindowCounter, ratelease.LeakyBucket}

// Shadow mode in exact mode, each algorithm, at fixed times: 2 units per
// second; what would be admitted is admitted and charged, a would-be
// denial is admitted, marked, counted, and charges nothing.
func TestShadowPerAlgorithm(t *testing.T) {
	for _, alg := range everyAlgorithm {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 2, Period: time.Second, Algorithm: alg})
			s := p.Shadow()
			if s == p || s.Shadow() != s || s.Name() != "p" {
				t.Fatalf("Shadow: %p of %p", s, p)
			}
			res, err := e.l.AllowN(ctx, s, "k", 2)
			if err != nil || !res.Allowed || res.Shadowed || res.Granted != 2 {
				t.Fatalf("AllowN(2) under the shadow: %+v, %v", res, err)
			}
			// p shares its state: it is empty now.
			want, _ := e.l.Peek(ctx, p, "k")
			if want.Allowed {
				t.Fatalf("Peek under p after the shadow took 2: %+v", want)
			}
			for i := 0; i < 5; i++ {
				res, err = e.l.Allow(ctx, s, "k")
				if err != nil || !res.Allowed || !res.Shadowed || res.Granted != 1 || res.Blocked ||
					res.RetryAfter != want.RetryAfter || res.Remaining != want.Remaining ||
					res.ResetAfter != want.ResetAfter || res.Source != ratelease.SourceRemote {
					t.Fatalf("Allow %d under the shadow: %+v, %v; want the denial %+v, admitted", i, res, err, want)
				}
			}
			if res, _ := e.l.AllowAtMost(ctx, s, "k", 10); !res.Shadowed || res.Granted != 2 {
				t.Fatalf("AllowAtMost(10) under the shadow: %+v, want 2 (the capacity) shadowed", res)
			}
			if err := e.l.WaitN(ctx, s, "k", 2); err != nil {
				t.Fatalf("WaitN under the shadow: %v", err)
			}
			if res, _ := e.l.Peek(ctx, s, "k"); !res.Allowed || !res.Shadowed || res.RetryAfter != want.RetryAfter {
				t.Fatalf("Peek under the shadow: %+v", res)
			}
			// Nothing was charged for them: Redis is as it was.
			if res, _ := e.l.Peek(ctx, p, "k"); res != want {
				t.Fatalf("Peek under p after the shadow's denials: %+v, want %+v", res, want)
			}
			st := e.l.Stats().Policies[p.Name()]
			if st.ShadowDenied != 7 || st.Denied != 7 || st.Allowed != 1 {
				t.Fatalf("PolicyStats: %+v, want 7 shadow-denied (and denied), 1 allowed", st)
			}
			// Once the limit frees up, p is admitted as if no shadow denial
			// had happened.
			e.advance(want.RetryAfter)
			if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
				t.Fatalf("Allow under p after RetryAfter: %+v", res)
			}
		})
	}
}

// Shadow mode in lease mode: a would-be denial, from Redis or cached, is
// admitted and counted; what is held is charged as usual.
func TestShadowLeaseMode(t *testing.T) {
	for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8}))
			exact := newExactOn(t, e.mr)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 20, Period: time.Hour, Algorithm: alg})
			s := p.Shadow()
			for i := 0; i < 20; i++ {
				if res, err := e.l.Allow(ctx, s, "k"); err != nil || !res.Allowed || res.Shadowed {
					t.Fatalf("Allow %d: %+v, %v", i, res, err)
				}
			}
			if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 0 {
				t.Fatalf("Redis has %d left, want 0", res.Remaining)
			}
			res, err := e.l.Allow(ctx, s, "k")
			if err != nil || !res.Allowed || !res.Shadowed || res.Granted != 1 || res.RetryAfter <= 0 {
				t.Fatalf("Allow 21 under the shadow: %+v, %v", res, err)
			}
			res, _ = e.l.AllowN(ctx, s, "k", 3)
			if !res.Shadowed || res.Source != ratelease.SourceCached || res.Granted != 3 {
				t.Fatalf("AllowN(3) under the shadow, cached: %+v", res)
			}
			if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed || res.Shadowed {
				t.Fatalf("Allow under p: %+v, want a denial", res)
			}
			st := e.l.Stats().Policies[s.Name()]
			if st.ShadowDenied != 2 || st.Denied != 3 || st.Allowed != 20 {
				t.Fatalf("PolicyStats: %+v", st)
			}
			if err := e.l.Refund(ctx, p, "k", 1); err != nil {
				t.Fatal(err)
			}
			if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 1 {
				t.Fatalf("Redis has %d left after Refund(1), want 1: a shadow admission was charged", res.Remaining)
			}
		})
	}
}

// Block in exact mode, each algorithm, at fixed times: the key is denied,
// Blocked, with the block's time left, nothing charged; another key is
// not; Reset leaves the block; it lapses, or Unblock lifts it.
func TestBlockPerAlgorithm(t *testing.T) {
	ms := time.Millisecond
	for _, alg := range everyAlgorithm {
		t.Run(alg.String(), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			p := policy(t, "p", ratelease.Limit{Rate: 4, Period: time.Second, Algorithm: alg},
				ratelease.Limit{Rate: 100, Period: time.Hour, Algorithm: alg})
			if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
				t.Fatalf("Allow: %+v", res)
			}
			if err := e.l.Block(ctx, p, "k", 1500*ms-ms/2); err != nil { // rounded up to 1500ms
				t.Fatal(err)
			}
			blocked := func(what string, res ratelease.Result, err error, left time.Duration) {
				t.Helper()
				if err != nil || res.Allowed || !res.Blocked || res.Granted != 0 || res.RetryAfter != left ||
					res.ResetAfter != left || res.Remaining != 0 || res.Limit != p.Limits()[0] || res.Source != ratelease.SourceRemote {
					t.Fatalf("%s: %+v, %v; want blocked for %v", what, res, err, left)
				}
			}
			res, err := e.l.Allow(ctx, p, "k")
			blocked("Allow", res, err, 1500*ms)
			res, err = e.l.Peek(ctx, p, "k")
			blocked("Peek", res, err, 1500*ms)
			e.advance(500 * ms)
			res, err = e.l.AllowAtMost(ctx, p, "k", 3)
			blocked("AllowAtMost", res, err, 1000*ms)
			if res, _ := e.l.Allow(ctx, p, "other"); !res.Allowed || res.Blocked {
				t.Fatalf("another key: %+v", res)
			}
			if err := e.l.Reset(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			res, err = e.l.Allow(ctx, p, "k")
			blocked("Allow after Reset", res, err, 1000*ms)
			// The shadow admits it, marked both.
			res, err = e.l.Allow(ctx, p.Shadow(), "k")
			if err != nil || !res.Allowed || !res.Shadowed || !res.Blocked || res.RetryAfter != 1000*ms {
				t.Fatalf("Allow under the shadow: %+v, %v", res, err)
			}
			e.advance(1000 * ms)
			if res, _ := e.l.Peek(ctx, p, "k"); !res.Allowed || res.Blocked || res.Remaining != 4 {
				t.Fatalf("Peek after the block lapsed: %+v, want the full limit (Reset, nothing charged)", res)
			}
			if err := e.l.Block(ctx, p, "k", time.Hour); err != nil {
				t.Fatal(err)
			}
			res, err = e.l.Allow(ctx, p, "k")
			blocked("Allow blocked again", res, err, time.Hour)
			if err := e.l.Unblock(ctx, p, "k"); err != nil {
				t.Fatal(err)
			}
			if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed || res.Blocked {
				t.Fatalf("Allow after Unblock: %+v", res)
			}
			if err := e.l.Unblock(ctx, p, "k"); err != nil {
				t.Fatalf("Unblock of a key not blocked: %v", err)
			}
		})
	}
}

func TestBlockBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerSecond(1))
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond - 1, 366*24*time.Hour + 1} {
		if err := e.l.Block(ctx, p, "k", d); !errors.Is(err, ratelease.ErrInvalidDuration) {
			t.Errorf("Block for %v: %v, want ErrInvalidDuration", d, err)
		}
	}
	if err := e.l.Block(ctx, p, "", time.Second); !errors.Is(err, ratelease.ErrInvalidKey) {
		t.Errorf("Block of an empty key: %v", err)
	}
	if err := e.l.Unblock(ctx, nil, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Errorf("Unblock with a nil policy: %v", err)
	}
	if keys := e.mr.Keys(); len(keys) != 0 {
		t.Errorf("keys written: %v", keys)
	}
	e.mr.Close()
	if err := e.l.Block(ctx, p, "k", time.Second); !errors.Is(err, ratelease.ErrUnavailable) {
		t.Errorf("Block with Redis down: %v, want ErrUnavailable", err)
	}
	_ = e.l.Close()
	if err := e.l.Block(ctx, p, "k", time.Second); !errors.Is(err, ratelease.ErrClosed) {
		t.Errorf("Block after Close: %v, want ErrClosed", err)
	}
}

// Block in lease mode, one instance on miniredis: the units held go back,
// the denial is cached as a block with the block's time left, and Unblock
// drops it.
func TestBlockLeaseMode(t *testing.T) {
	e := newEnv(t, ratelease.WithLease(ratelease.LeaseConfig{Min: 8, Max: 8, TTL: 10 * time.Second}))
	exact := newExactOn(t, e.mr)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerHour(20))
	if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("Allow: %+v", res)
	}
	if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 12 {
		t.Fatalf("Redis has %d left, want 12 (a lease of 8)", res.Remaining)
	}
	if err := e.l.Block(ctx, p, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := e.l.Allow(ctx, p, "k")
	if err != nil || res.Allowed || !res.Blocked || res.Source != ratelease.SourceCached || res.RetryAfter != time.Minute {
		t.Fatalf("Allow after Block: %+v, %v; want a cached block of a minute", res, err)
	}
	// The 7 units held went back (the batcher sends them).
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, _ := exact.Peek(ctx, p, "k")
		if !res.Blocked {
			t.Fatalf("exact Peek: %+v, want blocked", res)
		}
		if e.l.Stats().UnitsRefunded == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("units refunded: %d, want 7", e.l.Stats().UnitsRefunded)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Past the lease TTL the instance asks Redis again: still blocked, for
	// the block's time left.
	e.advance(20 * time.Second)
	res, err = e.l.Allow(ctx, p, "k")
	if err != nil || res.Allowed || !res.Blocked || res.Source != ratelease.SourceRemote || res.RetryAfter != 40*time.Second {
		t.Fatalf("Allow past the TTL: %+v, %v", res, err)
	}
	if res, _ := e.l.Peek(ctx, p, "k"); !res.Blocked || res.Source != ratelease.SourceCached || res.RetryAfter != 40*time.Second {
		t.Fatalf("Peek: %+v", res)
	}
	if err := e.l.Unblock(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	res, err = e.l.Allow(ctx, p, "k")
	if err != nil || !res.Allowed || res.Blocked || res.Remaining != 18 {
		t.Fatalf("Allow after Unblock: %+v, %v; want 18 left (19 with 1 admitted)", res, err)
	}
}
