package remote_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// A policy redefined under its name (a config reload: the same algorithm
// and period, another rate or burst) carries its keys' usage over in
// units, for every algorithm: 6 units used under a limit of 10 leave 14
// under 20 and none under 5, where the denial lasts until the usage falls
// to what the new limit admits.
func TestRedefinedLimitCarriesUsage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		limit         func(rate int64) remote.Limit
		lowRetry      time.Duration // the lowered limit's RetryAfter for 1 unit
		lowRetryRound time.Duration // its rounding, for a window's end
	}{
		// 6 used, 5 fit the burst once 2 have refilled at 5/s.
		{"token bucket", func(r int64) remote.Limit { return tb(r, r, time.Second) }, 400 * time.Millisecond, 0},
		// The queue of 6 drains at 5/s; admit mode waits for it to empty.
		{"leaky bucket", func(r int64) remote.Limit { return lb(r, r, time.Second) }, 1200 * time.Millisecond, 0},
		// Windows: denied until the window ends.
		{"fixed window", func(r int64) remote.Limit { return win(remote.FixedWindow, r, time.Minute) }, time.Minute, time.Minute},
		{"sliding window log", func(r int64) remote.Limit { return win(remote.SlidingWindowLog, r, time.Minute) }, time.Minute, time.Minute},
		{"sliding window counter", func(r int64) remote.Limit { return win(remote.SlidingWindowCounter, r, time.Minute) }, time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			old := mustPolicy(t, "p", tc.limit(10))
			if d := acquire(t, f.s, old, "k", 6, 6, false); d.Granted != 6 {
				t.Fatalf("take 6 of 10: %+v", d)
			}
			raised := mustPolicy(t, "p", tc.limit(20))
			d, err := f.s.Peek(ctx, raised, "k")
			switch {
			case err != nil:
				t.Fatal(err)
			case tc.name == "leaky bucket":
				// Admit mode conforms when the queue is empty: the 6
				// units queued drain at the new 20/s.
				if d.Granted != 0 || d.RetryAfter != 300*time.Millisecond {
					t.Fatalf("raised to 20: Peek %+v; want the queue of 6 at 20/s", d)
				}
			case d.Remaining != 14:
				t.Fatalf("raised to 20: Peek %+v; want 14 left", d)
			}
			if d, err := f.s.Peek(ctx, old, "k"); err != nil || (d.Remaining != 4 && tc.name != "leaky bucket") {
				t.Fatalf("the old definition: Peek %+v, %v; want 4 left", d, err)
			}
			lowered := mustPolicy(t, "p", tc.limit(5))
			d = acquire(t, f.s, lowered, "k", 1, 1, false)
			if d.Granted != 0 || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("lowered to 5 with 6 used: %+v; want a denial", d)
			}
			want := tc.lowRetry
			if tc.lowRetryRound > 0 { // until the window that holds t0 ends
				want = t0.Truncate(tc.lowRetryRound).Add(tc.lowRetryRound).Sub(t0)
			}
			if tc.name == "sliding window counter" {
				// The estimate weighs the window just ended: 1 more fits
				// once the 6 weigh 4 at most, a third into the next.
				want += tc.lowRetryRound / 3
			}
			if d.RetryAfter != want {
				t.Fatalf("lowered to 5: RetryAfter %v, want %v", d.RetryAfter, want)
			}
			// The usage keeps falling at its rate: raised again after the
			// wait, what the lowered limit would admit then is left and more.
			f.Advance(want)
			if d := acquire(t, f.s, lowered, "k", 1, 1, false); d.Granted != 1 {
				t.Fatalf("lowered, after RetryAfter: %+v", d)
			}
		})
	}
}

// A token bucket's state written before the rate was kept in it (a Redis
// from an earlier version) is read with the caller's rate.
func TestTokenBucketStateWithoutRate(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(10, 10, time.Second))
	acquire(t, f.s, p, "k", 6, 6, false)
	keys := f.Keys()
	if len(keys) != 1 {
		t.Fatalf("keys %v", keys)
	}
	v, err := f.Get(keys[0])
	if err != nil || strings.Count(v, ":") != 2 {
		t.Fatalf("state %q, %v: want us:remainder:rate", v, err)
	}
	if err := f.Set(keys[0], v[:strings.LastIndexByte(v, ':')]); err != nil {
		t.Fatal(err)
	}
	if d, err := f.s.Peek(context.Background(), p, "k"); err != nil || d.Remaining != 4 {
		t.Fatalf("Peek of the old format: %+v, %v; want 4 left", d, err)
	}
}
