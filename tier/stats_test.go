package tier_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// A policy of 2/s and 3/min denies by one limit, then by the other:
// DeniedBy counts each denial under the name of the limit the Decision
// names, exactly and in lease mode (the denials repeated locally too).
func TestStatsDeniedBy(t *testing.T) {
	second := remote.Limit{Algorithm: remote.TokenBucket, Rate: 2, Period: time.Second, Burst: 2}
	minute := remote.Limit{Algorithm: remote.FixedWindow, Rate: 3, Period: time.Minute, Burst: 3}
	for _, lease := range []int64{0, 1} {
		t.Run(fmt.Sprint("lease=", lease), func(t *testing.T) {
			e, mr, clk := newEngineClock(t, lease)
			p, err := remote.NewPolicy("two", []remote.Limit{second, minute})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]uint64{tier.LimitName(second): 0, tier.LimitName(minute): 0}
			allow := func(allowed bool, by remote.Limit) {
				t.Helper()
				d, err := e.Allow(context.Background(), p, "k", 1)
				if err != nil || d.Allowed != allowed || (!allowed && p.Limits()[d.Limit] != by) {
					t.Fatalf("%+v, %v; want allowed %v (else by %v)", d, err, allowed, by)
				}
				if !allowed {
					want[tier.LimitName(by)]++
				}
				if got := e.Stats().DeniedBy["two"]; !maps.Equal(got, want) {
					t.Fatalf("DeniedBy %v, want %v", got, want)
				}
			}
			allow(true, second)
			allow(true, second)
			allow(false, second)
			allow(false, second)
			mr.Advance(time.Second)
			clk.Set(mr.Now())
			allow(true, second)
			allow(false, minute)
			allow(false, minute)
			s := e.Stats()
			if ps := s.Policies["two"]; ps.Denied != 4 || s.Denied != 4 || (lease > 0 && ps.Cached == 0) {
				t.Fatalf("Stats %+v", s)
			}
			runtime.KeepAlive(p)
		})
	}
}

// The engine counts its own refusal of a policy that a later one
// redefined (ErrInvalidPolicy) in Invalid, and the root's (CountInvalid);
// Keys is the number of keys its Leaser holds (none in exact mode).
func TestStatsInvalidAndKeys(t *testing.T) {
	e, mr, clk := newEngineClock(t, 4)
	ctx := context.Background()
	old := named(t, "r", remote.TokenBucket, 10)
	for i := range 3 {
		if _, err := e.Allow(ctx, old, fmt.Sprint("k", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.Stats(); s.Keys != 3 || s.Invalid != 0 {
		t.Fatalf("Keys %d, Invalid %d; want 3 keys, none invalid", s.Keys, s.Invalid)
	}
	if _, err := e.Allow(ctx, named(t, "r", remote.TokenBucket, 20), "k", 1); err != nil {
		t.Fatal(err)
	}
	mr.Advance(2 * tier.RedefinitionGrace)
	clk.Set(mr.Now())
	if _, err := e.Allow(ctx, old, "k", 1); !errors.Is(err, remote.ErrInvalidPolicy) {
		t.Fatalf("%v, want ErrInvalidPolicy", err)
	}
	if _, err := e.Peek(ctx, old, "k"); !errors.Is(err, remote.ErrInvalidPolicy) {
		t.Fatalf("%v, want ErrInvalidPolicy", err)
	}
	e.CountInvalid()
	if s := e.Stats(); s.Invalid != 3 {
		t.Fatalf("Invalid %d, want 3", s.Invalid)
	}

	exact, _ := newEngine(t, 0)
	if _, err := exact.Allow(ctx, old, "k", 1); err != nil {
		t.Fatal(err)
	}
	if k := exact.Stats().Keys; k != 0 {
		t.Fatalf("exact engine: Keys %d", k)
	}
}
