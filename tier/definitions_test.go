package tier_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// A policy made later with other limits under one name redefines the name
// in the engine (a config reload): usage carries over in units, what the
// engine leased under the earlier policy goes back to Redis, and the
// earlier policy is decided exactly for RedefinitionGrace (requests in
// flight), then refused, by every call, with ErrInvalidPolicy. A policy
// with the current limits is the same definition, whenever it was made; a
// later one with the earlier limits redefines it back.
func TestRedefinition(t *testing.T) {
	ctx := context.Background()
	for _, lease := range []int64{4, 0} {
		t.Run(fmt.Sprint("lease=", lease), func(t *testing.T) {
			e, _, clk := newEngineClock(t, lease)
			old := named(t, "r", remote.TokenBucket, 10)
			for i := 0; i < 6; i++ {
				if d, err := e.Allow(ctx, old, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("old, request %d: %+v, %v", i, d, err)
				}
			}
			same := named(t, "r", remote.TokenBucket, 10) // (made per request, say)
			if d, err := e.Allow(ctx, same, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("a policy with the same limits: %+v, %v", d, err)
			}
			// 7 used of 10; with leases of 4, 5 units are held here (each
			// policy value has its own allowance).
			// The units held go back in the background: wait for them.
			raised := named(t, "r", remote.TokenBucket, 20)
			var d tier.Decision
			var err error
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				d, err = e.Peek(ctx, raised, "k")
				if err != nil || d.Remaining == 13 || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || d.Remaining != 13 || d.Source != tier.SourceRemote {
				t.Fatalf("raised to 20: Peek %+v, %v; want 13 left (7 used, the units held given back)", d, err)
			}
			// In flight: the earlier policy is decided exactly, with its
			// own limits (7 used of 10, then 8), leasing nothing.
			for i, p := range []*remote.Policy{old, same} {
				if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed || d.Source != tier.SourceRemote || d.Remaining != int64(2-i) {
					t.Fatalf("the earlier policy within the grace: %+v, %v; want %d left from Redis", d, err, 2-i)
				}
			}
			clk.Advance(tier.RedefinitionGrace)
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, remote.ErrInvalidPolicy) {
					t.Fatalf("%s with the redefined policy: %v, want ErrInvalidPolicy", what, err)
				}
			}
			for _, p := range []*remote.Policy{old, same} {
				_, err := e.Allow(ctx, p, "k", 1)
				refused("Allow", err)
				_, err = e.Allow(ctx, p, "other", 1)
				refused("Allow of another key", err)
				_, err = e.Peek(ctx, p, "k")
				refused("Peek", err)
				_, err = e.AllowAtMost(ctx, p, "k", 2)
				refused("AllowAtMost", err)
				refused("Refund", e.Refund(ctx, p, "k", 1))
				refused("Reset", e.Reset(ctx, p, "k"))
				refused("Block", e.Block(ctx, p, "k", time.Minute))
				refused("Unblock", e.Unblock(ctx, p, "k"))
				refused("Wait", e.Wait(ctx, p, "k", 1))
			}
			for i := 0; i < 11; i++ {
				if d, err := e.Allow(ctx, raised, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("raised, request %d: %+v, %v", i, d, err)
				}
			}
			if d, err := e.Allow(ctx, raised, "k", 1); err != nil || d.Allowed {
				t.Fatalf("raised, the 21st unit: %+v, %v; want a denial", d, err)
			}
			// Rolled back: a policy made now with the earlier limits.
			back := named(t, "r", remote.TokenBucket, 10)
			if d, err := e.Allow(ctx, back, "k", 1); err != nil || d.Allowed {
				t.Fatalf("rolled back to 10 with 20 used: %+v, %v; want a denial", d, err)
			}
			clk.Advance(tier.RedefinitionGrace)
			_, err = e.Allow(ctx, raised, "k", 1)
			refused("Allow after the rollback", err)
			// Every decision is counted under the name; the refusals are
			// errors, not decisions.
			ps := e.PolicyStats("r")
			all := sum(e.Stats())
			if all.Allowed != 20 || all.Denied != 2 || ps.Allowed+ps.Denied > 22 {
				t.Fatalf("counted %+v (the name's now: %+v), want 20 allowed and 2 denied in all", all, ps)
			}
		})
	}
}

// Policies of other names, or of one name and the same limits, never
// refuse each other.
func TestDefinitionsByName(t *testing.T) {
	e, _ := newEngine(t, 4)
	ctx := context.Background()
	a := named(t, "a", remote.TokenBucket, 10)
	b := named(t, "b", remote.TokenBucket, 20)
	a2 := named(t, "a", remote.TokenBucket, 10)
	for _, p := range []*remote.Policy{a, b, a2, a, b} {
		if _, err := e.Allow(ctx, p, "k", 1); err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
	}
}

// Policies of one name with the same limits, made per request (numbered
// past the dense slice), share their state: they lease as one policy.
func TestPoliciesPerRequestShareLeases(t *testing.T) {
	e, _ := newEngine(t, 4)
	sparse(e)
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		p := named(t, "per-request", remote.TokenBucket, 100)
		if d, err := e.Allow(ctx, p, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	if s := e.Stats(); s.Leases != 10 || s.Local != 30 {
		t.Fatalf("%d leases, %d local decisions for 40 requests, each with a policy of its own; want 10 leases of 4", s.Leases, s.Local)
	}
	if ps := e.PolicyStats("per-request"); ps.Allowed != 40 {
		t.Fatalf("the name counted %+v, want 40 allowed", ps)
	}
}
