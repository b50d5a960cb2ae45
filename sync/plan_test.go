package sync_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/local"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// Redis's word that a key is empty holds until the key is full again (its
// ResetAt), no longer: a small lease of a key that a lease emptied goes
// as an exact decision until then, and as a member's lease once the key
// has refilled, as if it had never been empty (an everyday key, whose
// instances each take the last units now and then, paid a round trip a
// decision for the stale word).
func TestAnEmptyKeysWordLapsesWhenItRefills(t *testing.T) {
	_, l, p := planLeaser(t)
	e := l.NewTable(p, nil).GetOrCreate("k")
	d, _, err := l.Lease(context.Background(), e, 5) // the whole bucket
	if err != nil || d.Granted != 5 || d.Remaining != 0 {
		t.Fatalf("lease of the bucket: %+v, %v", d, err)
	}
	start := l.Now()
	st := local.Lease{Rate: 3} // 3 units over the horizon: a small lease
	for _, tc := range []struct {
		after  time.Duration
		member bool
	}{{500 * time.Millisecond, false}, {999 * time.Millisecond, false}, {1001 * time.Millisecond, true}, {5 * time.Second, true}} {
		req := leasesync.PlanOf(l, e, st, 1, start+int64(tc.after))
		if member := req.Demand > 0; member != tc.member {
			t.Errorf("%v after the key was emptied (full again after 1s): %+v, want a member's lease %v", tc.after, req, tc.member)
		}
	}
}

// planLeaser is a leaser on a fresh miniredis with a manual clock, and a
// policy of 5 a second, burst 5.
func planLeaser(t *testing.T) (*redistest.Mini, *leasesync.Leaser, *remote.Policy) {
	t.Helper()
	mr := redistest.StartMini(t)
	l := newLeaser(t, mr.Client(t), clock.NewManual(mr.Now()), leasesync.Config{Min: 1, Refresh: time.Second, TTL: 1500 * time.Millisecond, LowWater: 0.25, MaxKeys: 10})
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 5, Period: time.Second, Burst: 5}})
	if err != nil {
		t.Fatal(err)
	}
	return mr, l, p
}

// A lease tells Redis the key's demand in whole units a second: the
// nearest (2.001 a second is 2, not 3, which would claim a fair share it
// does not use), and at least 1 for any demand.
func TestDemandIsTheNearestWholeRate(t *testing.T) {
	mr := redistest.StartMini(t)
	l := newLeaser(t, mr.Client(t), clock.NewManual(mr.Now()), leasesync.Config{Min: 1, Refresh: time.Second, TTL: 1500 * time.Millisecond, LowWater: 0.25, MaxKeys: 10})
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewTable(p, nil).GetOrCreate("k")
	for _, tc := range []struct {
		rate float64
		want int64
	}{{0.01, 1}, {0.5, 1}, {1.4, 1}, {2.001, 2}, {2.5, 3}, {2.99, 3}, {100.4, 100}} {
		if req := leasesync.PlanOf(l, e, local.Lease{Rate: tc.rate}, 0, l.Now()); req.Demand != tc.want {
			t.Errorf("rate %v a second: demand %d, want %d (%+v)", tc.rate, req.Demand, tc.want, req)
		}
	}
}

// A region's pool that a lease emptied, with no refill on its way, says
// nothing of when it has room again (ResetAfter 0): the word that it is
// empty holds until a reply says otherwise, and a small lease of it goes
// as an exact decision (it did not when the word lapsed at its ResetAt,
// taken as the reply's time).
func TestAnEmptyPoolsWordHolds(t *testing.T) {
	mr, l, p := planLeaser(t)
	p = p.Pooled()
	s := remote.NewStore(mr.Client(t), "t") // the prefix of newDoor
	ctx := context.Background()
	c, err := s.Claim(ctx, p, "k", 1, time.Millisecond, time.Millisecond, time.Second, time.Second)
	if err != nil || !c.Refill {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	if _, err := s.Deposit(ctx, p, "k", remote.Deposit{Granted: 5, Valid: -1, At: 1, Since: c.Now, TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e := l.NewTable(p, nil).GetOrCreate("k")
	d, _, err := l.Lease(ctx, e, 5) // the whole pool
	if err != nil || d.Granted != 5 || d.Remaining != 0 || d.ResetAfter != 0 {
		t.Fatalf("lease of the pool: %+v, %v, want its 5 units, and no word of when it has more", d, err)
	}
	for _, after := range []time.Duration{0, time.Second, time.Minute} {
		if req := leasesync.PlanOf(l, e, local.Lease{Rate: 3}, 1, l.Now()+int64(after)); req.Demand != 0 || req.Max != 1 {
			t.Errorf("%v after the pool was emptied: %+v, want an exact decision of 1 unit", after, req)
		}
	}
}

// A key is hot (a due lease follows its fair share's wait) when this
// instance alone asks more than the key makes, by its measured demand,
// not the whole units Redis is told: 2.4 a second of a key of 2 a second
// is hot, though Redis is told 2; 2 a second is not.
func TestAHotKeyIsTheMeasuredDemandsNotTheRoundedOnes(t *testing.T) {
	mr := redistest.StartMini(t)
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 2, Period: time.Second, Burst: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rate float64
		hot  bool
	}{{1.9, false}, {2, false}, {2.4, true}, {3, true}} {
		l := newLeaser(t, mr.Client(t), clock.NewManual(mr.Now()), leasesync.Config{Min: 1, Refresh: time.Second, TTL: 1500 * time.Millisecond, LowWater: 0.25, MaxKeys: 10})
		e := l.NewTable(p, nil).GetOrCreate("k")
		if hot := leasesync.Hot(l, e, local.Lease{Rate: tc.rate}, remote.Decision{Granted: 1, Next: time.Second}); hot != tc.hot {
			t.Errorf("demand %v a second of a key of 2: hot %v, want %v", tc.rate, hot, tc.hot)
		}
	}
}
