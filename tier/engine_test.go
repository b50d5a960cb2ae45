package tier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
	"github.com/ratelease/ratelease/tier"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newEngine returns an engine on a fresh miniredis: leasing leases of
// exactly lease units, or exact when lease is 0.
func newEngine(t *testing.T, lease int64) (*tier.Engine, *redistest.Mini) {
	t.Helper()
	mr := redistest.StartMini(t)
	store := remote.NewStore(mr.Client(t), "t")
	clk := clock.NewManual(mr.Now())
	var l *leasesync.Leaser
	if lease > 0 {
		var err error
		l, err = leasesync.New(store, clk, leasesync.Config{Min: lease, Max: lease, Refresh: time.Second,
			TTL: time.Hour, LowWater: 0.01, Timeout: 300 * time.Millisecond, Heartbeat: time.Hour, MaxKeys: 10})
		if err != nil {
			t.Fatal(err)
		}
	}
	e := tier.New(tier.Config{Store: store, Clock: clk, Timeout: 300 * time.Millisecond, Guard: true, Leaser: l})
	t.Cleanup(func() { _ = e.Close() })
	return e, mr
}

func perHour(t *testing.T, n int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: n, Period: time.Hour, Burst: n}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The order of a leased decision: a lease (Remote) first, then the
// allowance (Local), and once Redis has denied, the cached denial (Cached).
// Stats counts each by source.
func TestDecisionSources(t *testing.T) {
	e, _ := newEngine(t, 4)
	p := perHour(t, 8)
	ctx := context.Background()
	count := map[tier.Source]int{}
	var last tier.Source
	for i := 0; i < 10; i++ {
		d, err := e.Allow(ctx, p, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 8) || (i == 0 && d.Source != tier.Remote) {
			t.Fatalf("request %d: %+v", i, d)
		}
		count[d.Source]++
		last = d.Source
	}
	// Of the 8 units, 2 leases of 4, each bringing 3 for later requests
	// (the second may be a prefetch, made in the background before the
	// miss); once Redis has denied, the rest is Cached.
	if count[tier.Local] < 6 || last != tier.Cached {
		t.Fatalf("sources %v, last %v", count, last)
	}
	s := e.Stats()
	if s.Allowed != 8 || s.Denied != 2 || s.Local != uint64(count[tier.Local]) || s.Remote != uint64(count[tier.Remote]) ||
		s.Cached != uint64(count[tier.Cached]) || s.UnitsLeased != 8 {
		t.Fatalf("Stats %+v, sources %v", s, count)
	}
}

// A cached denial of n units holds for n or more, not for fewer: those may
// still fit.
func TestCachedDenialIsPerSize(t *testing.T) {
	e, _ := newEngine(t, 1)
	p := perHour(t, 12)
	ctx := context.Background()
	for _, c := range []struct {
		n      int64
		allow  bool
		source tier.Source
	}{{5, true, tier.Remote}, {5, true, tier.Remote}, {5, false, tier.Remote}, {6, false, tier.Cached}, {2, true, tier.Remote}} {
		d, err := e.Allow(ctx, p, "k", c.n)
		if err != nil || d.Allowed != c.allow || d.Source != c.source {
			t.Fatalf("Allow(%d) = %+v, %v; want allowed=%v from %v", c.n, d, err, c.allow, c.source)
		}
	}
}

func TestClosed(t *testing.T) {
	for _, lease := range []int64{0, 10} {
		e, _ := newEngine(t, lease)
		p := perHour(t, 10)
		if _, err := e.Allow(context.Background(), p, "k", 1); err != nil {
			t.Fatal(err)
		}
		_ = e.Close()
		if _, err := e.Allow(context.Background(), p, "k", 1); !errors.Is(err, tier.ErrClosed) {
			t.Fatalf("lease %d: Allow after Close: %v", lease, err)
		}
		if err := e.Wait(context.Background(), p, "k", 1); !errors.Is(err, tier.ErrClosed) {
			t.Fatalf("lease %d: Wait after Close: %v", lease, err)
		}
	}
}

// With Redis gone, a miss is an error wrapping ErrUnavailable; the caller's
// own context errors come back unwrapped. Units already leased still serve.
func TestRedisGone(t *testing.T) {
	for _, lease := range []int64{0, 10} {
		e, mr := newEngine(t, lease)
		p := perHour(t, 100)
		if _, err := e.Allow(context.Background(), p, "held", 1); err != nil {
			t.Fatal(err)
		}
		mr.Close()
		if d, err := e.Allow(context.Background(), p, "held", 1); lease > 0 && (err != nil || d.Source != tier.Local) {
			t.Fatalf("leased units with Redis gone: %+v, %v", d, err)
		}
		if _, err := e.Allow(context.Background(), p, "new", 1); !errors.Is(err, tier.ErrUnavailable) {
			t.Fatalf("lease %d: %v, want ErrUnavailable", lease, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.Allow(ctx, p, "new", 1); err != context.Canceled {
			t.Fatalf("lease %d: cancelled context: %v, want context.Canceled unwrapped", lease, err)
		}
	}
}
