package remote_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

const ms = time.Millisecond
const us = time.Microsecond

// step advances the fake clock, then asks for n units (min = max = n).
type step struct {
	advance time.Duration
	n       int64
	reserve bool
	// expectations
	granted    int64
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	wait       time.Duration
}

func runSteps(t *testing.T, l remote.Limit, steps []step) {
	t.Helper()
	f := newFake(t)
	p := mustPolicy(t, "p", l)
	for i, s := range steps {
		f.Advance(s.advance)
		d := acquire(t, f.s, p, "k", s.n, s.n, s.reserve)
		got := step{advance: s.advance, n: s.n, reserve: s.reserve, granted: d.Granted, remaining: d.Remaining,
			retryAfter: d.RetryAfter, resetAfter: d.ResetAfter, wait: d.Wait}
		if got != s {
			t.Fatalf("step %d (t=+%v, n=%d):\n got granted=%d remaining=%d retry=%v reset=%v wait=%v\nwant granted=%d remaining=%d retry=%v reset=%v wait=%v",
				i, f.Now().Sub(t0), s.n, got.granted, got.remaining, got.retryAfter, got.resetAfter, got.wait,
				s.granted, s.remaining, s.retryAfter, s.resetAfter, s.wait)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	// 10/s, burst 5: one unit every 100ms, full bucket = 500ms of debt.
	runSteps(t, tb(10, 5, time.Second), []step{
		{n: 1, granted: 1, remaining: 4, resetAfter: 100 * ms},
		{n: 4, granted: 4, remaining: 0, resetAfter: 500 * ms},
		{n: 1, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 500 * ms},
		{advance: 100 * ms, n: 1, granted: 1, remaining: 0, resetAfter: 500 * ms},
		{advance: 250 * ms, n: 3, granted: 0, remaining: 2, retryAfter: 50 * ms, resetAfter: 250 * ms},
		{advance: 50 * ms, n: 3, granted: 3, remaining: 0, resetAfter: 500 * ms},
		{advance: time.Hour, n: 5, granted: 5, remaining: 0, resetAfter: 500 * ms},
	})
}

func TestTokenBucketRateThatDoesNotDivideThePeriod(t *testing.T) {
	// 3/s: a unit costs exactly 333333⅓µs. Single units one after another
	// use the whole burst: no rounding is charged per grant.
	runSteps(t, tb(3, 3, time.Second), []step{
		{n: 1, granted: 1, remaining: 2, resetAfter: 333334 * us},
		{n: 1, granted: 1, remaining: 1, resetAfter: 666667 * us},
		{n: 1, granted: 1, remaining: 0, resetAfter: time.Second},
		{n: 1, granted: 0, retryAfter: 333334 * us, resetAfter: time.Second},
		{advance: time.Second, n: 1, granted: 1, remaining: 2, resetAfter: 333334 * us},
	})
	runSteps(t, tb(3, 3, time.Second), []step{
		{n: 3, granted: 3, remaining: 0, resetAfter: time.Second},
		{n: 1, granted: 0, retryAfter: 333334 * us, resetAfter: time.Second},
		{advance: 333333 * us, n: 1, granted: 0, retryAfter: us, resetAfter: 666667 * us},
		{advance: us, n: 1, granted: 1, remaining: 0, resetAfter: 1000000 * us},
	})
}

func TestFixedWindow(t *testing.T) {
	runSteps(t, win(remote.FixedWindow, 3, time.Second), []step{
		{n: 2, granted: 2, remaining: 1, resetAfter: time.Second},
		{n: 2, granted: 0, remaining: 1, retryAfter: time.Second, resetAfter: time.Second},
		{advance: 400 * ms, n: 1, granted: 1, remaining: 0, resetAfter: 600 * ms},
		{advance: 599 * ms, n: 1, granted: 0, remaining: 0, retryAfter: ms, resetAfter: ms},
		{advance: ms, n: 3, granted: 3, remaining: 0, resetAfter: time.Second},
		{advance: 5 * time.Second, n: 1, granted: 1, remaining: 2, resetAfter: time.Second},
	})
}

func TestSlidingWindowCounter(t *testing.T) {
	runSteps(t, win(remote.SlidingWindowCounter, 10, time.Second), []step{
		{n: 6, granted: 6, remaining: 4, resetAfter: 2 * time.Second},
		// Next window: the previous 6 weigh 6 at its start.
		{advance: time.Second, n: 5, granted: 0, remaining: 4, retryAfter: 166667 * us, resetAfter: time.Second},
		// 166667µs in, they weigh ceil(6 × 0.833333) = 5.
		{advance: 166666 * us, n: 5, granted: 0, remaining: 4, retryAfter: us, resetAfter: 833334 * us},
		{advance: us, n: 5, granted: 5, remaining: 0, resetAfter: 1833333 * us},
		// The current bucket (5) is too full for 6: wait for the next window
		// (833333µs) and until the 5 weigh at most 4 there (200000µs).
		{n: 6, granted: 0, remaining: 0, retryAfter: 1033333 * us, resetAfter: 1833333 * us},
		{advance: 1033332 * us, n: 6, granted: 0, remaining: 5, retryAfter: us, resetAfter: 800001 * us},
		{advance: us, n: 6, granted: 6, remaining: 0, resetAfter: 1800000 * us},
		{advance: 3 * time.Second, n: 10, granted: 10, remaining: 0, resetAfter: 2*time.Second - 200*ms},
	})
}

func TestSlidingWindowLog(t *testing.T) {
	runSteps(t, win(remote.SlidingWindowLog, 3, time.Second), []step{
		{n: 1, granted: 1, remaining: 2, resetAfter: time.Second},
		{advance: 200 * ms, n: 2, granted: 2, remaining: 0, resetAfter: time.Second},
		// One more fits when the t=0 unit leaves (at 1s); two when the t=200ms ones do.
		{advance: 100 * ms, n: 1, granted: 0, remaining: 0, retryAfter: 700 * ms, resetAfter: 900 * ms},
		{n: 2, granted: 0, remaining: 0, retryAfter: 900 * ms, resetAfter: 900 * ms},
		{advance: 699 * ms, n: 1, granted: 0, remaining: 0, retryAfter: ms, resetAfter: 201 * ms},
		{advance: ms, n: 1, granted: 1, remaining: 0, resetAfter: time.Second},
		// Units granted in the same microsecond stay distinct members.
		{advance: time.Hour, n: 1, granted: 1, remaining: 2, resetAfter: time.Second},
		{n: 1, granted: 1, remaining: 1, resetAfter: time.Second},
		{n: 1, granted: 1, remaining: 0, resetAfter: time.Second},
		{n: 1, granted: 0, remaining: 0, retryAfter: time.Second, resetAfter: time.Second},
	})
}

func TestLeakyBucketAdmitsOnlyWhatConformsNow(t *testing.T) {
	// 10/s, queue of 3: one slot every 100ms.
	runSteps(t, lb(10, 3, time.Second), []step{
		{n: 1, granted: 1, remaining: 0, resetAfter: 100 * ms},
		{n: 1, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 100 * ms},
		{advance: 50 * ms, n: 1, granted: 0, remaining: 0, retryAfter: 50 * ms, resetAfter: 50 * ms},
		{advance: 50 * ms, n: 1, granted: 1, remaining: 0, resetAfter: 100 * ms},
		// A weighted request takes n consecutive slots.
		{advance: 100 * ms, n: 2, granted: 2, remaining: 0, resetAfter: 200 * ms},
		{advance: 100 * ms, n: 1, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 100 * ms},
	})
}

func TestLeakyBucketReserveQueuesUpToBurst(t *testing.T) {
	runSteps(t, lb(10, 3, time.Second), []step{
		{n: 1, reserve: true, granted: 1, remaining: 2, resetAfter: 100 * ms},
		{n: 1, reserve: true, granted: 1, remaining: 1, resetAfter: 200 * ms, wait: 100 * ms},
		{n: 1, reserve: true, granted: 1, remaining: 0, resetAfter: 300 * ms, wait: 200 * ms},
		{n: 1, reserve: true, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 300 * ms},
		{advance: 150 * ms, n: 1, reserve: true, granted: 1, remaining: 0, resetAfter: 250 * ms, wait: 150 * ms},
	})
}

// A token bucket's Wait (reserve) takes its units ahead of time, up to a
// burst or a period's rate beyond what the bucket holds, whichever is more
// (here the burst), each told when it conforms: used then, the units follow
// the bucket's schedule (x/time/rate's WaitN).
func TestTokenBucketReserveQueuesUpToBurst(t *testing.T) {
	runSteps(t, tb(2, 2, time.Second/5), []step{
		{n: 1, reserve: true, granted: 1, remaining: 3, resetAfter: 100 * ms},
		{n: 1, reserve: true, granted: 1, remaining: 2, resetAfter: 200 * ms},
		{n: 1, reserve: true, granted: 1, remaining: 1, resetAfter: 300 * ms, wait: 100 * ms},
		{n: 1, reserve: true, granted: 1, remaining: 0, resetAfter: 400 * ms, wait: 200 * ms},
		{n: 1, reserve: true, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 400 * ms},
		{advance: 150 * ms, n: 1, reserve: true, granted: 1, remaining: 0, resetAfter: 350 * ms, wait: 150 * ms},
		// Without reserve, nothing conforms now.
		{n: 1, granted: 0, remaining: 0, retryAfter: 250 * ms, resetAfter: 350 * ms},
	})
	// At 10/s with a burst of 2, a second's rate waits: 10 beyond the 2.
	runSteps(t, tb(10, 2, time.Second), []step{
		{n: 12, reserve: true, granted: 12, remaining: 0, resetAfter: 1200 * ms, wait: 1000 * ms},
		{n: 1, reserve: true, granted: 0, remaining: 0, retryAfter: 100 * ms, resetAfter: 1200 * ms},
	})
}

// The seeds' boundary example: 10/s, 10 units just before a window boundary
// and 10 just after. A fixed window admits all 20 within 100ms; the token
// bucket refills only one unit in that time; the sliding log admits none.
func TestWindowBoundary(t *testing.T) {
	for _, c := range []struct {
		limit remote.Limit
		after int64
	}{
		{win(remote.FixedWindow, 10, time.Second), 10},
		{tb(10, 10, time.Second), 1},
		{win(remote.SlidingWindowLog, 10, time.Second), 0},
		{win(remote.SlidingWindowCounter, 10, time.Second), 0},
	} {
		t.Run(c.limit.Algorithm.String(), func(t *testing.T) {
			f := newFake(t)
			p := mustPolicy(t, "p", c.limit)
			f.Advance(900 * ms)
			if d := acquire(t, f.s, p, "k", 1, 10, false); d.Granted != 10 {
				t.Fatalf("before the boundary: granted %d, want 10", d.Granted)
			}
			f.Advance(100 * ms)
			before := f.Now()
			granted := int64(0)
			for i := 0; i < 20; i++ {
				granted += acquire(t, f.s, p, "k", 1, 1, false).Granted
			}
			if f.Now() != before {
				t.Fatal("clock moved")
			}
			if granted != c.after {
				t.Fatalf("after the boundary: granted %d, want %d (total %d in 100ms)", granted, c.after, 10+granted)
			}
		})
	}
}

func TestGrantUpToMax(t *testing.T) {
	for _, l := range []remote.Limit{tb(10, 5, time.Second), win(remote.FixedWindow, 5, time.Second),
		win(remote.SlidingWindowLog, 5, time.Second), win(remote.SlidingWindowCounter, 5, time.Second)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			f := newFake(t)
			p := mustPolicy(t, "p", l)
			if d := acquire(t, f.s, p, "k", 2, 3, false); d.Granted != 3 || d.Remaining != 2 {
				t.Fatalf("first: %+v, want 3 granted, 2 remaining", d)
			}
			if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 2 || d.Remaining != 0 {
				t.Fatalf("second: %+v, want the last 2", d)
			}
			if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 0 || d.RetryAfter <= 0 {
				t.Fatalf("third: %+v, want a denial with a retry-after", d)
			}
		})
	}
}

// A denial by one limit charges none of the others; the decider is the
// limit that denied.
func TestMultiLimitAllOrNothing(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "api",
		tb(10, 10, time.Second),
		win(remote.FixedWindow, 100, time.Minute),
		win(remote.SlidingWindowLog, 5, time.Hour))
	keys := p.Keys("test", "user")
	snapshot := func() string {
		tat, _ := f.Get(keys[0])
		return fmt.Sprintf("tb=%s fw=%s swl=%v", tat, f.HGet(keys[1], "c"), mustMembers(t, f, keys[2]))
	}

	d := acquire(t, f.s, p, "user", 5, 5, false)
	if d.Granted != 5 || d.Decider != 2 || d.Remaining != 0 {
		t.Fatalf("first: %+v, want 5 granted, decided by the hour limit with 0 left", d)
	}
	f.Advance(time.Second) // the second limit refills; the hour limit does not
	before := snapshot()
	d = acquire(t, f.s, p, "user", 1, 1, false)
	if d.Granted != 0 || d.Decider != 2 {
		t.Fatalf("second: %+v, want a denial by the hour limit", d)
	}
	if d.RetryAfter != time.Hour-time.Second {
		t.Fatalf("retry after %v, want %v", d.RetryAfter, time.Hour-time.Second)
	}
	if after := snapshot(); after != before {
		t.Fatalf("a denial charged state:\nbefore %s\nafter  %s", before, after)
	}

	// A denial by the second limit does not charge the hour limit either.
	q := mustPolicy(t, "burst", tb(1, 2, time.Second), win(remote.SlidingWindowLog, 100, time.Hour))
	if d := acquire(t, f.s, q, "u", 2, 2, false); d.Granted != 2 {
		t.Fatalf("%+v", d)
	}
	for i := 0; i < 3; i++ {
		if d := acquire(t, f.s, q, "u", 1, 1, false); d.Granted != 0 || d.Decider != 0 {
			t.Fatalf("denial %d: %+v, want decided by the second limit", i, d)
		}
	}
	if n := len(mustMembers(t, f, q.Keys("test", "u")[1])); n != 2 {
		t.Fatalf("hour log holds %d units after denials, want 2", n)
	}
}

func mustMembers(t *testing.T, f *fake, key string) []string {
	t.Helper()
	if !f.Exists(key) {
		return nil
	}
	m, err := f.ZMembers(key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRefund(t *testing.T) {
	t.Run("token bucket, capped at capacity", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", tb(10, 5, time.Second))
		d := acquire(t, f.s, p, "k", 5, 5, false)
		refund(t, f.s, p, "k", 3, d.At)
		if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 3 {
			t.Fatalf("after refunding 3: granted %d", d.Granted)
		}
		f.Advance(time.Hour)
		d = acquire(t, f.s, p, "k", 1, 1, false)
		refund(t, f.s, p, "k", 5, d.At) // more than was taken: the bucket is only full
		if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 5 {
			t.Fatalf("after an over-refund: granted %d, want the capacity 5", d.Granted)
		}
	})
	t.Run("token bucket, less what refilled since the grant", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", tb(10, 10, time.Second))
		first := acquire(t, f.s, p, "k", 10, 10, false)
		f.Advance(300 * time.Millisecond) // 3 units refill
		if d := acquire(t, f.s, p, "k", 3, 3, false); d.Granted != 3 {
			t.Fatalf("after 300ms: granted %d, want the 3 refilled", d.Granted)
		}
		// Had the first 10 stayed in the bucket, 3 of them could have
		// overflowed it since: 7 come back.
		refund(t, f.s, p, "k", 10, first.At)
		if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 7 {
			t.Fatalf("after the late refund: granted %d, want 7", d.Granted)
		}
	})
	t.Run("fixed window, only into the grant's window", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", win(remote.FixedWindow, 5, time.Second))
		d := acquire(t, f.s, p, "k", 5, 5, false)
		refund(t, f.s, p, "k", 9, d.At)
		if d := acquire(t, f.s, p, "k", 1, 100, false); d.Granted != 5 {
			t.Fatalf("after refund: granted %d, want 5", d.Granted)
		}
		f.Advance(time.Second)
		d2 := acquire(t, f.s, p, "k", 2, 2, false)
		refund(t, f.s, p, "k", 5, d.At) // the old window's grant: no-op
		if got := acquire(t, f.s, p, "k", 1, 100, false).Granted; got != 3 {
			t.Fatalf("stale refund changed the window: granted %d, want 3", got)
		}
		_ = d2
	})
	t.Run("sliding window counter, previous window", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", win(remote.SlidingWindowCounter, 10, time.Second))
		d := acquire(t, f.s, p, "k", 10, 10, false)
		f.Advance(time.Second)
		refund(t, f.s, p, "k", 4, d.At)
		if got := acquire(t, f.s, p, "k", 1, 100, false).Granted; got != 4 {
			t.Fatalf("after refunding 4 to the previous window: granted %d, want 4", got)
		}
	})
	t.Run("sliding window log, exactly the grant's members", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", win(remote.SlidingWindowLog, 10, time.Second))
		first := acquire(t, f.s, p, "k", 4, 4, false)
		f.Advance(ms)
		acquire(t, f.s, p, "k", 3, 3, false)
		refund(t, f.s, p, "k", 9, first.At) // only 4 were granted then
		key := p.Keys("test", "k")[0]
		if n := len(mustMembers(t, f, key)); n != 3 {
			t.Fatalf("log holds %d units, want the later grant's 3", n)
		}
	})
	t.Run("leaky bucket, cancelled reservation", func(t *testing.T) {
		f := newFake(t)
		p := mustPolicy(t, "p", lb(10, 3, time.Second))
		acquire(t, f.s, p, "k", 1, 1, true)
		d := acquire(t, f.s, p, "k", 2, 2, true)
		if d.Wait != 100*ms {
			t.Fatalf("wait %v", d.Wait)
		}
		refund(t, f.s, p, "k", 2, d.At)
		if d := acquire(t, f.s, p, "k", 2, 2, true); d.Granted != 2 || d.Wait != 100*ms {
			t.Fatalf("after cancelling, the same slot: %+v", d)
		}
	})
}

func TestKeysExpire(t *testing.T) {
	for _, l := range []remote.Limit{tb(10, 5, time.Second), lb(10, 5, time.Second), win(remote.FixedWindow, 5, time.Second),
		win(remote.SlidingWindowLog, 5, time.Second), win(remote.SlidingWindowCounter, 5, time.Second)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			f := newFake(t)
			p := mustPolicy(t, "p", l)
			acquire(t, f.s, p, "k", 3, 3, false)
			key := p.Keys("test", "k")[0]
			ttl := f.TTL(key)
			if ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("TTL %v, want a TTL of at most two periods", ttl)
			}
			f.Advance(2 * time.Second)
			if f.Exists(key) {
				t.Fatalf("%s still exists two periods later", key)
			}
		})
	}
}

// A log whose members slide out together is trimmed at most 2000 members a
// call (one call must not hold Redis for long), and the members left over
// are not counted; a request takes at most MaxLogUnits units of a log.
func TestLogTrimsInBoundedSteps(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", win(remote.SlidingWindowLog, 6000, time.Second))
	if p.Capacity() != remote.MaxLogUnits {
		t.Fatalf("capacity %d, want MaxLogUnits %d", p.Capacity(), remote.MaxLogUnits)
	}
	for range 5 {
		if d := acquire(t, f.s, p, "k", 1000, 1000, false); d.Granted != 1000 {
			t.Fatalf("filling the log: %+v", d)
		}
	}
	key := p.Keys("test", "k")[0]
	f.Advance(500 * time.Millisecond)
	acquire(t, f.s, p, "k", 1, 1, false)               // keeps the key alive
	f.Advance(500*time.Millisecond + time.Microsecond) // the first 5000 slide out
	d := acquire(t, f.s, p, "k", 1000, 1000, false)
	if d.Granted != 1000 || d.Remaining != 6000-1001 {
		t.Fatalf("after the period: %+v, want 1000 granted and 4999 left (the leftover members not counted)", d)
	}
	if m, err := f.ZMembers(key); err != nil || len(m) != 5001-2000+1000 {
		t.Fatalf("%d members (%v), want 4001: 2000 trimmed by the call", len(m), err)
	}
	for range 2 { // the rest go in later calls
		acquire(t, f.s, p, "k", 1, 1, false)
	}
	if m, _ := f.ZMembers(key); len(m) != 1003 {
		t.Fatalf("%d members after two more calls, want 1003 (the live ones)", len(m))
	}
}
