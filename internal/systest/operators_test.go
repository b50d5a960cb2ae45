package systest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// twoLeasing returns two Limiters leasing with cfg on srv, each with a
// client of its own.
func twoLeasing(t *testing.T, srv *redistest.Server, cfg ratelease.LeaseConfig) (a, b *ratelease.Limiter) {
	t.Helper()
	ls := limiters(newInstances(t, 2, clientsTo(t, srv.Addr), engine(cfg)...))
	return ls[0], ls[1]
}

// Two instances in lease mode on a real Redis: Reset on one restores the
// full limit in Redis at once; the other's lease lapses within its TTL,
// after which it meets Redis's state. Until then it may admit, beyond the
// fresh limit, the units it held at the Reset: by using them, or by giving
// them back, lapsed, into the fresh state.
func TestOperatorsTwoInstancesRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 300 * time.Millisecond
	cfg := ratelease.LeaseConfig{Min: 10, Max: 10, TTL: ttl}
	a, b := twoLeasing(t, srv, cfg)
	exact, err := ratelease.New(srv.Client(t), ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	ctx := context.Background()
	p := policy(t, "two", ratelease.PerHour(40))
	for _, l := range []*ratelease.Limiter{a, b} {
		for i := 0; i < 3; i++ {
			if res, err := l.Allow(ctx, p, "k"); err != nil || !res.Allowed {
				t.Fatalf("Allow: %+v, %v", res, err)
			}
		}
	}
	leased := int(a.Stats().UnitsLeased + b.Stats().UnitsLeased)
	for i := 0; i < 10; i++ { // Peek charges nothing
		if _, err := a.Peek(ctx, p, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Peek(ctx, p, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 40-leased {
		t.Fatalf("Redis has %d left, want %d", res.Remaining, 40-leased)
	}
	sb := b.Stats()
	heldB := int(sb.UnitsLeased-sb.UnitsRefunded) - 3
	if err := a.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if res, _ := exact.Peek(ctx, p, "k"); res.Remaining != 40 {
		t.Fatalf("after Reset Redis has %d, want 40", res.Remaining)
	}
	// b still holds units of its lease, for up to its TTL.
	if res, _ := b.Allow(ctx, p, "k"); !res.Allowed || res.Source != ratelease.SourceLocal {
		t.Fatalf("b after a's Reset: %+v, want a unit it holds", res)
	}
	// a takes the whole limit; once b's lease lapses, b meets Redis's word.
	if res, _ := a.AllowAtMost(ctx, p, "k", 40); res.Granted != 40 {
		t.Fatalf("a.AllowAtMost(40) after Reset: %+v", res)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	after := 1 // b's Allow above
	var denied ratelease.Result
	for {
		res, err := b.Allow(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			denied = res
			break
		}
		if res.Source == ratelease.SourceLocal && after > heldB {
			t.Fatalf("b after its TTL answers from a lease it held: %+v", res)
		}
		after++
	}
	if after > heldB {
		t.Fatalf("b admitted %d after the Reset beyond the fresh limit, more than the %d it held", after, heldB)
	}
	// b's denial is cached, with Redis's RetryAfter (exact mode's: up to
	// 1.5 min for a unit of 40 per hour, less when what b's lease left
	// unused went back), for its TTL at most: what another instance does
	// to the key (a Refund, a Reset, an Unblock) reaches b within its TTL.
	res, _ := b.AllowAtMost(ctx, p, "k", 5)
	if res.Granted != 0 || res.Source != ratelease.SourceCached || res.RetryAfter <= 0 || res.RetryAfter > denied.RetryAfter || res.FairShare {
		t.Fatalf("b.AllowAtMost(5): %+v, want its cached denial, with Redis's RetryAfter (%+v)", res, denied)
	}
	time.Sleep(ttl) // b's denial lapses from its cache; b gives back what lapsed
	// (its sweeper gives lapsed units back a sweep or two later: wait for
	// them to reach Redis before reading what it has)
	for end := time.Now().Add(5 * time.Second); b.Stats().UnitsHeld > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("b still holds units: %+v", b.Stats())
		}
	}
	before, _ := exact.Peek(ctx, p, "k")
	if err := a.Refund(ctx, p, "k", 2); err != nil {
		t.Fatal(err)
	}
	// From Redis: by its own call, or by a lease of b's in flight (made in
	// the background as b's denial ended) that it waited for.
	if res, _ := b.AllowAtMost(ctx, p, "k", 40); res.Granted != before.Remaining+2 ||
		(res.Source != ratelease.SourceRemote && res.Source != ratelease.SourceLocal) {
		t.Fatalf("b.AllowAtMost(40) after a's Refund(2): %+v, want %d from Redis", res, before.Remaining+2)
	}
	for range 2 { // denied by Redis, then from the cache
		if res, _ := b.Allow(ctx, p, "k"); res.Allowed {
			t.Fatalf("b after taking all: %+v, want a denial", res)
		}
	}
	if err := a.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	// Within its TTL (here polled for up to ten: a lease in flight at
	// the Reset may cache its denial later), not the minute and a half of
	// the denial's RetryAfter.
	reset := time.Now()
	for {
		res, err := b.Allow(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			t.Logf("b admitted %v after a's Reset: %+v", time.Since(reset), res)
			break
		}
		if time.Since(reset) > 10*ttl {
			t.Fatalf("b still denied %v after a's Reset: %+v", time.Since(reset), res)
		}
		time.Sleep(ttl / 10)
	}
}

// Two instances in lease mode on a real Redis: a Block on one denies the
// key on the other within the lease bound (its TTL): the other uses at
// most the units it held, then is denied, Blocked. (A decision counts as
// past the TTL when it was asked for past it: a loaded machine may take
// long to answer one asked for in time.)
func TestBlockTwoInstancesRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 300 * time.Millisecond
	cfg := ratelease.LeaseConfig{Min: 10, Max: 10, TTL: ttl}
	a, b := twoLeasing(t, srv, cfg)
	ctx := context.Background()
	p := policy(t, "two", ratelease.PerHour(1000))
	for _, l := range []*ratelease.Limiter{a, b} {
		if res, err := l.Allow(ctx, p, "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
	}
	start := time.Now()
	if err := a.Block(ctx, p, "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	if res, _ := a.Allow(ctx, p, "k"); !res.Blocked || res.Allowed {
		t.Fatalf("a after its Block: %+v", res)
	}
	admitted := 0
	for {
		asked := time.Since(start) // a lease taken before start lapses by start + TTL
		res, err := b.Allow(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			if !res.Blocked || res.RetryAfter <= time.Hour-time.Minute || res.RetryAfter > time.Hour {
				t.Fatalf("b denied: %+v, want Blocked for about an hour", res)
			}
			break
		}
		admitted++
		if admitted > 9 || asked > ttl+100*time.Millisecond {
			t.Fatalf("b admitted %d after the Block, the last asked for %v after it: more than it held, or past its TTL", admitted, asked)
		}
	}
	if err := a.Unblock(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if res, _ := a.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("a after Unblock: %+v", res)
	}
	// b's cached block lapses within its TTL.
	time.Sleep(ttl + 50*time.Millisecond)
	if res, _ := b.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("b a TTL after the Unblock: %+v", res)
	}
}
