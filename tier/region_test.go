package tier_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// newRegional returns an exact-mode engine of region "r1" on a fresh
// miniredis, with another as its global Redis.
func newRegional(t *testing.T) (e *tier.Engine, regional, global *redistest.Mini, clk *clock.Manual) {
	t.Helper()
	regional, global = redistest.StartMini(t), redistest.StartMini(t)
	clk = clock.NewManual(regional.Now())
	e, err := tier.New(tier.Config{Store: remote.NewStore(regional.Client(t), "t"), Clock: clk, Timeout: 300 * time.Millisecond,
		Guard: true, FailureMode: tier.FailClosed, Global: remote.NewStore(global.Client(t), "t:world"), GlobalGuard: true, Region: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, regional, global, clk
}

// worldwide returns the pooled policy of a worldwide token bucket of
// rate a second.
func worldwide(t *testing.T, rate int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("w", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: rate, Period: time.Second, Burst: rate}})
	if err != nil {
		t.Fatal(err)
	}
	return p.Pooled()
}

func allowed(t *testing.T, e *tier.Engine, p *remote.Policy, key string) {
	t.Helper()
	if d, err := e.Allow(context.Background(), p, key, 1); err != nil || !d.Allowed {
		t.Fatalf("Allow(%q): %+v, %v", key, d, err)
	}
}

// What a partition's failure-mode share put in a pool is owed to the
// global key until a refill reaches it, however many pools were refilled
// meanwhile: owed units are not what the tier may forget of a pool.
func TestOwedOutlivesWhatIsKnown(t *testing.T) {
	e, regional, global, clk := newRegional(t)
	p := worldwide(t, 100)
	global.SetError("ERR partitioned")
	allowed(t, e, p, "a") // from the share: half the rate for a second, 50
	global.SetError("")
	tier.KnowPools(e, 1)
	allowed(t, e, p, "b")                     // its refill is known, a's forgotten
	regional.Advance(1100 * time.Millisecond) // the share lapses
	clk.Advance(1100 * time.Millisecond)
	allowed(t, e, p, "a")
	if got := e.Stats().UnitsCharged; got != 50 {
		t.Fatalf("UnitsCharged = %d once the global Redis answered a's refill, want the share's 50", got)
	}
}
