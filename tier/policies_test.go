package tier_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// named returns a policy of name with one limit of n per hour.
func named(t testing.TB, name string, a remote.Algorithm, n int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy(name, []remote.Limit{{Algorithm: a, Rate: n, Period: time.Hour, Burst: n}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// noDenials is the denials by limit of p before its first denial: 0 for
// each limit.
func noDenials(p *remote.Policy) map[string]uint64 {
	m := make(map[string]uint64)
	for _, l := range p.Limits() {
		m[tier.LimitName(l)] = 0
	}
	return m
}

// sparse gives away e's dense slots, so that the policies e leases under
// next are kept in its map.
func sparse(e *tier.Engine) { tier.FillSlots(e) }

// sum adds up the policies' counters and those of dropped policies.
func sum(s tier.Stats) tier.PolicyStats {
	all := s.DroppedPolicies
	for _, ps := range s.Policies {
		all.Allowed += ps.Allowed
		all.Denied += ps.Denied
		all.Local += ps.Local
		all.Remote += ps.Remote
		all.Cached += ps.Cached
		all.Fallback += ps.Fallback
	}
	return all
}

// total is the engine's counters that the policies' add up to.
func total(s tier.Stats) tier.PolicyStats {
	return tier.PolicyStats{Allowed: s.Allowed, Denied: s.Denied, Local: s.Local, Remote: s.Remote, Cached: s.Cached, Fallback: s.Fallback}
}

// Stats.Policies counts each policy's decisions by outcome and source, in
// lease mode (a policy that leases, and one decided exactly, a sliding log)
// and in exact mode; policies of one name are summed; they add up to the
// engine's counters.
func TestPolicyStats(t *testing.T) {
	for _, lease := range []int64{4, 0} {
		t.Run(fmt.Sprint("lease=", lease), func(t *testing.T) {
			e, _ := newEngine(t, lease)
			ctx := context.Background()
			tb, log := named(t, "tb", remote.TokenBucket, 8), named(t, "log", remote.SlidingWindowLog, 3)
			again := named(t, "log", remote.SlidingWindowLog, 3) // a second policy of one name
			want := map[string]tier.PolicyStats{}
			wantBy := map[string]map[string]uint64{"tb": noDenials(tb), "log": noDenials(log)}
			for _, c := range []struct {
				p *remote.Policy
				n int
			}{{tb, 10}, {log, 2}, {again, 3}} {
				w := want[c.p.Name()]
				for range c.n {
					d, err := e.Allow(ctx, c.p, "k", 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						w.Allowed++
					} else {
						w.Denied++
						wantBy[c.p.Name()][tier.LimitName(c.p.Limits()[d.Limit])]++
					}
					switch d.Source {
					case tier.SourceLocal:
						w.Local++
					case tier.SourceRemote:
						w.Remote++
					case tier.SourceCached:
						w.Cached++
					}
				}
				want[c.p.Name()] = w
			}
			if w := want["tb"]; w.Allowed != 8 || w.Denied != 2 || (lease > 0 && (w.Local < 6 || w.Cached == 0)) {
				t.Fatalf("decisions of tb: %+v", w)
			}
			if w := want["log"]; w.Allowed != 3 || w.Denied != 2 || w.Remote != 5 {
				t.Fatalf("decisions of log: %+v", w)
			}
			s := e.Stats()
			if len(s.Policies) != 2 || s.Policies["tb"] != want["tb"] || s.Policies["log"] != want["log"] {
				t.Fatalf("Policies %+v, want %+v", s.Policies, want)
			}
			if !reflect.DeepEqual(s.DeniedBy, wantBy) {
				t.Fatalf("DeniedBy %v, want %v", s.DeniedBy, wantBy)
			}
			if sum(s) != total(s) || s.DroppedPolicies != (tier.PolicyStats{}) {
				t.Fatalf("policies add up to %+v, engine %+v", sum(s), total(s))
			}
			if got := e.PolicyStats("log"); got != want["log"] {
				t.Fatalf("PolicyStats(log) = %+v", got)
			}
			if got := e.PolicyStats("none"); got != (tier.PolicyStats{}) {
				t.Fatalf("PolicyStats(none) = %+v", got)
			}
		})
	}
}

// Fallback decisions count too, under their policy.
func TestPolicyStatsFallback(t *testing.T) {
	e, mr, _, _ := newDegrading(t, tier.FailOpen, 1)
	p := named(t, "down", remote.TokenBucket, 100)
	mr.Close()
	for i := range 3 {
		if d, err := e.Allow(context.Background(), p, fmt.Sprint("k", i), 1); err != nil || d.Source != tier.SourceFallback {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	s := e.Stats()
	if got := s.Policies["down"]; got != (tier.PolicyStats{Allowed: 3, Fallback: 3}) || sum(s) != total(s) {
		t.Fatalf("Policies %+v, engine %+v", s.Policies, total(s))
	}
}

// The state of a policy numbered past the dense slice goes with its last
// key (the engine's bound is 10 keys): its counters go to DroppedPolicies,
// and the policy, used again, starts a new state.
func TestPolicyStateGoesWithItsKeys(t *testing.T) {
	e, _ := newEngine(t, 4)
	sparse(e)
	ctx := context.Background()
	ps := make([]*remote.Policy, 30)
	for i := range ps {
		ps[i] = named(t, fmt.Sprint("run-", i), remote.TokenBucket, 8)
		for range 2 { // a lease, then a hit
			if d, err := e.Allow(ctx, ps[i], "k", 1); err != nil || !d.Allowed {
				t.Fatalf("policy %d: %+v, %v", i, d, err)
			}
		}
	}
	s := e.Stats()
	if len(s.Policies) != 10 || s.DroppedPolicies != (tier.PolicyStats{Allowed: 40, Local: 20, Remote: 20}) || sum(s) != total(s) {
		t.Fatalf("%d policies held, dropped %+v; policies add up to %+v, engine %+v", len(s.Policies), s.DroppedPolicies, sum(s), total(s))
	}
	if got := e.PolicyStats("run-0"); got != (tier.PolicyStats{}) {
		t.Fatalf("a dropped policy's stats: %+v", got)
	}
	if d, err := e.Allow(ctx, ps[0], "k", 1); err != nil || !d.Allowed || d.Source != tier.SourceRemote {
		t.Fatalf("a dropped policy used again: %+v, %v", d, err)
	}
	if got := e.PolicyStats("run-0"); got != (tier.PolicyStats{Allowed: 1, Remote: 1}) {
		t.Fatalf("a dropped policy used again: %+v", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); len(s.Policies) != 0 || sum(s) != total(s) {
		t.Fatalf("after Close: %d policies, adding up to %+v; engine %+v", len(s.Policies), sum(s), total(s))
	}
}

// Policies dropped and made again while many goroutines use them: every
// decision is counted once, and none is lost with a table (run with -race).
func TestPolicyStatesUnderChurn(t *testing.T) {
	e, _ := newEngine(t, 2)
	sparse(e)
	ps := make([]*remote.Policy, 16)
	for i := range ps {
		ps[i] = named(t, fmt.Sprint("churn-", i), remote.TokenBucket, 1_000_000)
	}
	const goroutines, each = 4, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := ps[(g+i)%len(ps)]
				if d, err := e.Allow(context.Background(), p, fmt.Sprint("k", i%7), 1); err != nil || !d.Allowed {
					t.Errorf("%+v, %v", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := e.Stats()
	if s.Allowed != goroutines*each || sum(s) != total(s) {
		t.Fatalf("allowed %d of %d; policies add up to %+v, engine %+v", s.Allowed, goroutines*each, sum(s), total(s))
	}
	if s.DroppedPolicies.Allowed == 0 {
		t.Fatal("no policy was dropped")
	}
	t.Logf("%d policies held, dropped ones' decisions %+v", len(s.Policies), s.DroppedPolicies)
}

// The hit allocates nothing, for a policy in the dense slice and one in the
// map.
func TestHitAllocatesNothing(t *testing.T) {
	e, _ := newEngine(t, 1000)
	dense := named(t, "dense", remote.TokenBucket, 1_000_000)
	if _, err := e.Allow(context.Background(), dense, "k", 1); err != nil { // its slot
		t.Fatal(err)
	}
	sparse(e)
	far := named(t, "far", remote.TokenBucket, 1_000_000)
	for _, p := range []*remote.Policy{dense, far} {
		if _, err := e.Allow(context.Background(), p, "k", 1); err != nil {
			t.Fatal(err)
		}
		if a := testing.AllocsPerRun(100, func() {
			if _, _, _, ok := e.Hit(p, "k", 1); !ok {
				t.Fatal("miss")
			}
		}); a != 0 {
			t.Fatalf("policy %d: a hit allocates %v times", p.ID(), a)
		}
	}
}
