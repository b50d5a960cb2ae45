package iolimit_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/iolimit"
)

// zeros is an endless source: every read fills the buffer (with whatever
// it holds: the bytes' values do not matter here).
type zeros struct{}

func (zeros) Read(b []byte) (int, error) { return len(b), nil }

// The accuracy of a bandwidth limit on a real redis-server: two Limiters
// (lease mode, the default; each with its own client, as two processes
// would be), each copying flat out through a Reader and through a Writer at
// once, on one key of 32 MiB/s with a burst of 4 MiB, for 2.5s. The bytes
// moved are held to the token bucket's bound over the run, Burst + Rate·T,
// with T measured on Redis's clock (the only clock that decides) from
// before the first charge to after the last one and every refund: a slow
// or loaded machine lengthens T and moves fewer bytes, and the bound
// holds all the same. They must also reach 85% of it, so that a Reader or
// Writer that charges more than it moves fails: a copy flat out at 32 MiB/s
// in chunks of 8 to 32 KiB is a few thousand decisions a second, mostly
// answered from leases, which a loaded machine keeps up with too. What the
// bound has and the copies do not is what the leases hold when the run
// ends, and the last chunk's time, which WaitN gives up at once when the
// deadline would pass first: both small next to 2.5s of copying at
// 32 MiB/s, and the 15% that the floor leaves is room for them.
func TestAccuracyOnRedis(t *testing.T) {
	const (
		rate   = 32 << 20 // bytes per second
		burst  = 4 << 20
		runFor = 2500 * time.Millisecond
	)
	srv := redistest.Start(t)
	p := policy(t, "bandwidth", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	var limiters []*ratelease.Limiter
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		l, err := ratelease.New(c, ratelease.WithRedisTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() }) // before the client's Close
		limiters = append(limiters, l)
	}
	redisMicros := func() int64 {
		now, err := srv.Client(t).Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMicro()
	}

	start := redisMicros()
	ctx, cancel := context.WithTimeout(context.Background(), runFor)
	defer cancel()
	var moved [2][2]atomic.Int64 // per Limiter: read, written
	var wg sync.WaitGroup
	for i, l := range limiters {
		r, err := iolimit.NewReader(ctx, zeros{}, l, p, "tenant")
		if err != nil {
			t.Fatal(err)
		}
		w, err := iolimit.NewWriter(ctx, io.Discard, l, p, "tenant")
		if err != nil {
			t.Fatal(err)
		}
		for j, copyOnce := range []func() (int64, error){
			func() (int64, error) { return io.Copy(io.Discard, r) }, // io.Discard reads 8 KiB at a time
			func() (int64, error) { return io.Copy(w, zeros{}) },    // io.Copy writes 32 KiB at a time
		} {
			wg.Go(func() {
				n, err := copyOnce()
				moved[i][j].Store(n)
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Limiter %d, copy %d: %v, want the deadline's error", i, j, err)
				}
			})
		}
	}
	wg.Wait()
	end := redisMicros()

	var total int64
	var fallback, decisions, trips uint64
	for i, l := range limiters {
		total += moved[i][0].Load() + moved[i][1].Load()
		s := l.Stats()
		fallback += s.Fallback
		decisions += s.Allowed + s.Denied
		trips += s.RoundTrips
		t.Logf("Limiter %d: read %d, wrote %d bytes; %d decisions, %d Redis round trips", i,
			moved[i][0].Load(), moved[i][1].Load(), s.Allowed+s.Denied, s.RoundTrips)
	}
	secs := float64(end-start) / 1e6
	bound := float64(burst) + float64(rate)*secs
	t.Logf("moved %d bytes in %.3fs of Redis time: %.4f of Burst + Rate·T = %.0f; %.4f Redis round trips per decision (%d decisions by fallback)",
		total, secs, float64(total)/bound, bound, float64(trips)/float64(decisions), fallback)
	if float64(total) > bound {
		t.Errorf("moved %d bytes > Burst + Rate·T = %.0f", total, bound)
	}
	if float64(total) < 0.85*bound {
		t.Errorf("moved %d bytes < 85%% of Burst + Rate·T = %.0f", total, bound)
	}
}
