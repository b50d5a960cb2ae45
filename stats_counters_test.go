package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// sumDeniedBy adds up by, a policy's Stats.DeniedBy.
func sumDeniedBy(by map[string]uint64) uint64 {
	var n uint64
	for _, v := range by {
		n += v
	}
	return n
}

// A policy of 2/s and 3/min denies by one limit, then by the other:
// Stats.DeniedBy counts each under its own name, as Result.Limit
// names it; a blocked key's denial is in Denied, not in DeniedBy.
func TestStatsDeniedByLimit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	second, minute := ratelease.PerSecond(2), ratelease.PerMinute(3)
	p := policy(t, "two", second, minute)
	want := map[string]uint64{second.String(): 0, minute.String(): 0}
	if got := e.l.Stats().DeniedBy["two"]; got != nil {
		t.Fatalf("DeniedBy before any decision: %v", got)
	}
	step := func(allowed bool, by ratelease.Limit) {
		t.Helper()
		res, err := e.l.Allow(ctx, p, "k")
		if err != nil || res.Allowed != allowed || (!allowed && res.Limit != by) {
			t.Fatalf("%+v, %v; want allowed %v (else by %v)", res, err, allowed, by)
		}
		if !allowed {
			want[by.String()]++
		}
		if got := e.l.Stats().DeniedBy["two"]; !maps.Equal(got, want) {
			t.Fatalf("DeniedBy %v, want %v", got, want)
		}
	}
	step(true, second)
	step(true, second)
	step(false, second) // the second's burst is spent; the minute has 1 left
	e.advance(time.Second)
	step(true, second)
	step(false, minute) // the minute's 3 are spent; the second has 1 left
	step(false, minute)

	s := e.l.Stats()
	ps := s.Policies["two"]
	if ps.Denied != 3 || sumDeniedBy(s.DeniedBy["two"]) != ps.Denied || s.Denied != 3 {
		t.Fatalf("PolicyStats %+v, Stats.Denied %d", ps, s.Denied)
	}
	// A block denies with no limit deciding.
	if err := e.l.Block(ctx, p, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	if res, err := e.l.Allow(ctx, p, "k"); err != nil || res.Allowed || !res.Blocked {
		t.Fatalf("blocked key: %+v, %v", res, err)
	}
	s = e.l.Stats()
	if ps = s.Policies["two"]; ps.Denied != 4 || !maps.Equal(s.DeniedBy["two"], want) {
		t.Fatalf("after a blocked key's denial: %+v, want Denied 4, DeniedBy %v", ps, want)
	}
	// A policy let go leaves its denials by limit behind: the dropped
	// totals keep none.
	runtime.KeepAlive(p)
	if err := e.l.Close(); err != nil {
		t.Fatal(err)
	}
	if s := e.l.Stats(); len(s.Policies) != 0 || s.DroppedPolicies.Denied != 4 || len(s.DeniedBy) != 0 {
		t.Fatalf("after Close: %d policies, dropped %+v", len(s.Policies), s.DroppedPolicies)
	}
}

// In lease mode the denials repeated locally (SourceCached) count under
// the limit Redis named, and so do shadow mode's would-be denials.
func TestStatsDeniedByLeaseAndShadow(t *testing.T) {
	mr := redistest.StartMini(t)
	l := leased(t, mr.Client(t), ratelease.LeaseConfig{Min: 5, Max: 5})
	defer l.Close()
	ctx := context.Background()
	minute, hour := ratelease.PerMinute(100), ratelease.PerHour(3)
	p := policy(t, "hourly", minute, hour)
	var sources []ratelease.Source
	for range 8 {
		res, err := l.Allow(ctx, p, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			if res.Limit != hour {
				t.Fatalf("denied by %v, want %v", res.Limit, hour)
			}
			sources = append(sources, res.Source)
		}
	}
	s := l.Stats()
	ps := s.Policies["hourly"]
	want := map[string]uint64{minute.String(): 0, hour.String(): 5}
	if ps.Denied != 5 || ps.Cached == 0 || !maps.Equal(s.DeniedBy["hourly"], want) {
		t.Fatalf("PolicyStats %+v (denials from %v), want 5 denied, some cached, DeniedBy %v", ps, sources, want)
	}

	shadow := policy(t, "shadowed", ratelease.PerHour(1)).Shadow()
	for range 3 {
		if res, err := l.Allow(ctx, shadow, "k"); err != nil || !res.Allowed {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	s = l.Stats()
	if ps = s.Policies["shadowed"]; ps.ShadowDenied != 2 || s.DeniedBy["shadowed"][ratelease.PerHour(1).String()] != 2 {
		t.Fatalf("shadow policy: %+v, want 2 would-be denials by the hour", ps)
	}
	runtime.KeepAlive(p)
}

// Every call refused for invalid input counts once in Stats.Invalid: the
// root's checks (each error, each kind of call) and the engine's refusal of
// a policy that a later one redefined. None is a decision.
func TestStatsInvalid(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerMinute(5))
	calls := []struct {
		name string
		call func() error
		want error
	}{
		{"nil policy", func() error { _, err := e.l.Allow(ctx, nil, "k"); return err }, ratelease.ErrInvalidPolicy},
		{"zero policy", func() error { _, err := e.l.Allow(ctx, &ratelease.Policy{}, "k"); return err }, ratelease.ErrInvalidPolicy},
		{"empty key", func() error { _, err := e.l.Allow(ctx, p, ""); return err }, ratelease.ErrInvalidKey},
		{"n 0", func() error { _, err := e.l.AllowN(ctx, p, "k", 0); return err }, ratelease.ErrInvalidN},
		{"n over capacity", func() error { _, err := e.l.AllowN(ctx, p, "k", 6); return err }, ratelease.ErrExceedsCapacity},
		{"wait over capacity", func() error { return e.l.WaitN(ctx, p, "k", 6) }, ratelease.ErrExceedsCapacity},
		{"at most 0", func() error { _, err := e.l.AllowAtMost(ctx, p, "k", 0); return err }, ratelease.ErrInvalidN},
		{"refund -1", func() error { return e.l.Refund(ctx, p, "k", -1) }, ratelease.ErrInvalidN},
		{"peek empty key", func() error { _, err := e.l.Peek(ctx, p, ""); return err }, ratelease.ErrInvalidKey},
		{"reset nil policy", func() error { return e.l.Reset(ctx, nil, "k") }, ratelease.ErrInvalidPolicy},
		{"block empty key", func() error { return e.l.Block(ctx, p, "", time.Minute) }, ratelease.ErrInvalidKey},
		{"unblock empty key", func() error { return e.l.Unblock(ctx, p, "") }, ratelease.ErrInvalidKey},
	}
	for i, c := range calls {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if got := e.l.Stats().Invalid; got != uint64(i+1) {
			t.Fatalf("after %s: Invalid %d, want %d", c.name, got, i+1)
		}
	}
	// Valid calls, an over-capacity AllowAtMost (capped, no error) and a
	// Block of a bad duration (ErrInvalidDuration) do not count.
	if _, err := e.l.AllowAtMost(ctx, p, "k", 10); err != nil {
		t.Fatal(err)
	}
	if err := e.l.Block(ctx, p, "k", 0); !errors.Is(err, ratelease.ErrInvalidDuration) {
		t.Fatal(err)
	}
	base := uint64(len(calls))
	if s := e.l.Stats(); s.Invalid != base || s.Allowed != 1 || s.Denied != 0 {
		t.Fatalf("Stats %+v, want Invalid %d and one decision", s, base)
	}

	// A policy that a later one redefined is refused by the engine, once
	// the grace has passed.
	old := policy(t, "r", ratelease.PerMinute(1))
	if _, err := e.l.Allow(ctx, old, "k"); err != nil {
		t.Fatal(err)
	}
	redefined := policy(t, "r", ratelease.PerMinute(2))
	if _, err := e.l.Allow(ctx, redefined, "k"); err != nil {
		t.Fatal(err)
	}
	e.advance(2 * time.Second)
	for i := range 2 {
		if _, err := e.l.Allow(ctx, old, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
			t.Fatalf("the redefined policy: %v, want ErrInvalidPolicy", err)
		}
		if got := e.l.Stats().Invalid; got != base+uint64(i+1) {
			t.Fatalf("Invalid %d after %d refusals of a redefined policy, want %d", got, i+1, base+uint64(i+1))
		}
	}
	runtime.KeepAlive(redefined)
}

// Stats.Keys is the number of keys in the local key store: one per key
// leased (at most WithMaxKeys), none in exact mode, none after Close.
func TestStatsKeys(t *testing.T) {
	ctx := context.Background()
	p := policy(t, "p", ratelease.PerHour(100))
	exact := newEnv(t)
	for i := range 3 {
		if _, err := exact.l.Allow(ctx, p, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	if k := exact.l.Stats().Keys; k != 0 {
		t.Fatalf("exact mode holds %d keys, want 0", k)
	}

	mr := redistest.StartMini(t)
	l, err := ratelease.New(mr.Client(t), ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5}), ratelease.WithMaxKeys(4))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 6 {
		if _, err := l.Allow(ctx, p, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
		if got, want := l.Stats().Keys, uint64(min(i+1, 4)); got != want {
			t.Fatalf("after %d keys: Keys %d, want %d", i+1, got, want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if k := l.Stats().Keys; k != 0 {
		t.Fatalf("after Close: Keys %d, want 0", k)
	}
}

// PolicyStats stays comparable: code outside may compare two with ==, so
// a field that is not (a map, a slice) would break it. This line stops
// compiling first.
var _ = ratelease.PolicyStats{} == ratelease.PolicyStats{}
