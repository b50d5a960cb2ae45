package systest_test

// Windows that turn while a fleet floods them, on a real redis-server: what
// a used-up window's denial says, and who gets the next window.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// TestWindowTurnsUnderAFlood floods a fixed window of 400 a second with 4
// lease-mode instances (the defaults, each a client of its own), each
// asking four times its part, for several windows, and checks each
// decision against Redis's clock:
//
//   - a denial by Redis where the window itself is used up (not the fair
//     share: Result.FairShare false) says when the window ends, as exact
//     mode does (to the clock's error and the call's flight), and no
//     denial, cached or not, says later than the window's end;
//   - every window after the first is shared: each instance admits at
//     least 0.8 of its part (none is left out for a denial cached from
//     the last window, or a debt), and no window admits more than 400.
func TestWindowTurnsUnderAFlood(t *testing.T) {
	const (
		instances = 4
		rate      = 400
		period    = time.Second
		windows   = 4
		slack     = 40 * time.Millisecond // the clock's error and a call's flight
	)
	srv := redistest.Start(t)
	p := policy(t, "turns", ratelease.Limit{Algorithm: ratelease.FixedWindow, Rate: rate, Burst: rate, Period: period})
	ins := newInstances(t, instances, clientsTo(t, srv.Addr))
	clock := redisClock(t, dial(t, srv.Addr))
	// Redis's time less this host's, read at the middle of a TIME call.
	before := time.Now()
	r := clock()
	offset := r - (before.UnixMicro()+time.Now().UnixMicro())/2
	redisNow := func(at time.Time) int64 { return at.UnixMicro() + offset }
	// Start at a window's start, and run until the end of the last.
	first := r/int64(period/time.Microsecond) + 1
	start := time.UnixMicro(first*int64(period/time.Microsecond) - offset)
	time.Sleep(time.Until(start))
	d := time.Duration(windows) * period

	type tally struct {
		mu       sync.Mutex
		admitted map[int64]int // by window
	}
	counts := make([]tally, instances)
	var wg sync.WaitGroup
	var failed struct {
		sync.Mutex
		first []string
		n     int
	}
	fail := func(format string, args ...any) {
		failed.Lock()
		defer failed.Unlock()
		if failed.n++; len(failed.first) < 5 {
			failed.first = append(failed.first, fmt.Sprintf(format, args...))
		}
	}
	for i, in := range ins {
		counts[i].admitted = map[int64]int{}
		wg.Go(func() {
			pace(start, 4*rate/instances, d, 1, func(int) {
				t0 := time.Now()
				res, err := in.l.Allow(context.Background(), p, "k")
				t1 := time.Now()
				if err != nil {
					in.fail(err)
					return
				}
				at := (redisNow(t0) + redisNow(t1)) / 2
				w := at / int64(period/time.Microsecond)
				end := time.Duration((w+1)*int64(period/time.Microsecond)-at) * time.Microsecond
				if res.Allowed {
					counts[i].mu.Lock()
					counts[i].admitted[w]++
					counts[i].mu.Unlock()
					return
				}
				nearTurn := end < slack || period-end < slack
				switch {
				case nearTurn:
				case res.RetryAfter > end+slack:
					fail("instance %d: denied (%v, FairShare %v) with RetryAfter %v, past the window's end in %v", i, res.Source, res.FairShare, res.RetryAfter, end)
				case res.Source == ratelease.SourceRemote && !res.FairShare && res.RetryAfter < end-slack:
					fail("instance %d: denied by Redis, the window used up, with RetryAfter %v; it ends in %v", i, res.RetryAfter, end)
				}
			})
		})
	}
	wg.Wait()
	for _, e := range failed.first {
		t.Error(e)
	}
	if failed.n > 0 {
		t.Errorf("%d denials in all told a wrong RetryAfter", failed.n)
	}
	for i, in := range ins {
		in.check(t, fmt.Sprintf("instance %d", i))
	}
	for w := first + 1; w < first+windows; w++ {
		all := 0
		got := make([]int, instances)
		for i := range counts {
			got[i] = counts[i].admitted[w]
			all += got[i]
		}
		if all > rate {
			t.Errorf("window %d admitted %d, past its %d", w-first, all, rate)
		}
		for i := range got {
			if float64(got[i]) < 0.8*rate/instances {
				t.Errorf("window %d: instance %d admitted %d, less than 0.8 of its part of %d; all: %v", w-first, i, got[i], rate/instances, got)
			}
		}
		t.Logf("window %d: admitted %v", w-first, got)
	}
}
