package sync

import (
	"context"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// applied is what apply leaves in an entry that a hit or a cached denial
// reads.
type applied struct {
	members      int64
	shared       bool
	limit        int
	remaining    int64
	resetAt      int64
	blockedUntil int64
	retryAt      int64
	fairShare    bool
	lowWater     int64
	units        int64
	denied       bool
	deniedLeft   int64
}

// TestApplyPutsInWhatItDid: apply, on random answers one after another
// to one entry, leaves in it what it did before it put each answer in
// with one Entry.Answer (written out here as it was: the word and members
// always; the block, or none; on a denial its retry time and a denial of
// max(n, 1) units; on a grant the units kept and low water, and under the
// fair share (Next) its retry time and a denial of one unit; everything
// else as it was).
func TestApplyPutsInWhatItDid(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	l, conf := internalLeaser(t, clk, 5*time.Second)
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 100, Period: time.Second, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range int64(20) {
		applyRandomly(t, l, clk, conf, p, seed)
	}
}

// internalLeaser returns a Leaser on a miniredis of its own, through a
// door of the given timeout, and its Config; both closed at the test's end.
func internalLeaser(t *testing.T, clk clock.Clock, timeout time.Duration) (*Leaser, Config) {
	t.Helper()
	m := redistest.StartMini(t)
	d := door.New(door.Config{Store: remote.NewStore(m.Client(t), "t"), Clock: clk, Timeout: timeout})
	conf := Config{Min: 1, Max: 100, Refresh: time.Second, TTL: time.Second, LowWater: 0.25, MaxKeys: 100}
	l, err := New(d, clk, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		ctx, cancel := d.Bound(context.Background())
		defer cancel()
		d.Close(ctx)
	})
	return l, conf
}

func applyRandomly(t *testing.T, l *Leaser, clk *clock.Manual, conf Config, p *remote.Policy, seed int64) {
	e := l.NewTable(p, nil).GetOrCreate("k" + string(rune('a'+seed)))
	r := rand.New(rand.NewSource(seed))
	read := func(now int64) applied {
		w := e.LastWord()
		at, fs := e.RetryAt()
		denied, left := e.Denied(now, 1)
		return applied{members: e.Members(), shared: e.Shared(), limit: w.Limit, remaining: w.Remaining, resetAt: w.ResetAt,
			blockedUntil: e.BlockedUntil(), retryAt: at, fairShare: fs, lowWater: e.LowWater(), units: e.Units(),
			denied: denied, deniedLeft: left}
	}
	for step := range 2000 {
		clk.Advance(time.Duration(r.Intn(3)) * time.Millisecond)
		now := l.Now()
		n := int64(r.Intn(3))
		st, ch := e.StartLease(n, 1, now)
		if ch != nil {
			t.Fatal("a lease in flight")
		}
		demand := int64(r.Intn(3)) * 50
		max := int64(1 + r.Intn(100))
		dec := remote.Decision{Decider: r.Intn(2), Remaining: int64(r.Intn(120)), ResetAfter: time.Duration(r.Intn(1e9)),
			Members: int64(r.Intn(4)), At: 1_700_000_000_000_000 + int64(step)}
		if r.Intn(3) > 0 {
			dec.Granted = n + int64(r.Intn(40))
			if dec.Granted == 0 {
				dec.Granted = 1
			}
			dec.ValidFor = time.Duration(r.Intn(2e9)) - 1
		} else {
			dec.RetryAfter = time.Duration(1 + r.Intn(2e9))
			dec.FairShare = r.Intn(2) == 0
			dec.Blocked = r.Intn(5) == 0
		}
		if r.Intn(3) == 0 {
			dec.Next = time.Duration(1 + r.Intn(2e9))
		}
		e.Lapse(now, func(int64, int64) bool { return false }) // as the grant's own fill would
		want := read(now)
		// The old apply, written out.
		if dec.Members > 0 {
			want.members = dec.Members
		} else if demand == 0 && dec.Granted > 0 && 2*dec.Remaining >= p.Capacity() {
			want.members = 0
		}
		want.limit, want.remaining, want.resetAt = dec.Decider, dec.Remaining, l.cached()+int64(dec.ResetAfter)
		want.shared = dec.Members > 1 && (dec.Granted == 0 || dec.Next > 0)
		want.blockedUntil = 0
		if dec.Blocked {
			want.blockedUntil = now + int64(dec.RetryAfter)
		}
		deny := func(until, units int64) {
			if units <= 1 {
				want.denied, want.deniedLeft = until > now, until-now
			}
		}
		if dec.Granted == 0 {
			want.retryAt, want.fairShare = now+int64(dec.RetryAfter), dec.FairShare
			deny(now+min(int64(max64(dec.RetryAfter, dec.Next)), int64(conf.TTL)), max64(n, 1))
			if n > 1 {
				want.denied, want.deniedLeft = false, 0 // a denial of n > 1 units does not hold for one
			}
		} else {
			keep := dec.Granted - n
			valid := conf.TTL
			if dec.ValidFor >= 0 {
				valid = min(valid, dec.ValidFor)
			}
			if keep > 0 && now < now+int64(valid) {
				want.units += keep
			}
			if keep > 0 {
				lw := 0.0
				if f := conf.LowWater * float64(dec.Granted); f >= 2 {
					lw = math.Ceil(f)
				}
				want.lowWater = min(int64(math.Ceil(lw)), max)
			}
			if dec.Next > 0 {
				want.retryAt, want.fairShare = now+int64(dec.Next), true
				deny(now+min(int64(dec.Next), int64(conf.TTL)), 1)
			}
		}
		c := &call{req: remote.Request{Policy: p, Key: e.Key(), Min: max64(n, 1), Max: max, Demand: demand},
			entry: e, start: now, epoch: st.Epoch, d: dec}
		l.apply(c, n)
		e.EndLease()
		got := read(now)
		if got != want {
			t.Fatalf("seed %d step %d: n %d, %+v:\n got %+v\nwant %+v", seed, step, n, dec, got, want)
		}
		// The units lapse now and then, to start afresh.
		if r.Intn(4) == 0 {
			e.Lapse(now+int64(2*time.Second), func(int64, int64) bool { return false })
		}
	}
}

func max64[T ~int64](a, b T) T {
	if a > b {
		return a
	}
	return b
}
