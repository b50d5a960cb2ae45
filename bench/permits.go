package bench

import (
	"context"
	"sync"
	"time"

	"github.com/ratelease/ratelease"
)

// PermitConfig is the permits workload: Goroutines callers of one process
// each acquire a permit of one key, hold it for Hold, and release it, for
// Duration, under a concurrency limit of Limit permits (at least the
// goroutines: no acquire is denied).
type PermitConfig struct {
	Goroutines, Limit int
	Hold, Duration    time.Duration
}

// DefaultPermits is the permits workload of docs/benchmarks.md.
var DefaultPermits = PermitConfig{Goroutines: 8, Limit: 100, Hold: 0, Duration: time.Second}

// PermitResult is one run of Permits: the permits acquired and released,
// the time they took, the Redis round trips on the wire and the Redis CPU
// time (s) they cost.
type PermitResult struct {
	Permits      int64
	Elapsed      time.Duration
	RoundTrips   int64
	RedisSeconds float64
}

// PerSecond is the permits acquired and released per second.
func (r PermitResult) PerSecond() float64 { return float64(r.Permits) / r.Elapsed.Seconds() }

// RoundTripsPerPermit is the Redis round trips per permit.
func (r PermitResult) RoundTripsPerPermit() float64 {
	return float64(r.RoundTrips) / float64(r.Permits)
}

// RedisMicrosPerPermit is the Redis CPU µs per permit.
func (r PermitResult) RedisMicrosPerPermit() float64 {
	return r.RedisSeconds * 1e6 / float64(r.Permits)
}

// Permits runs the permits workload with a Limiter of ratelease on the
// Redis at addr: in lease mode (the default) or exact mode.
func Permits(addr string, exact bool, cfg PermitConfig) (PermitResult, error) {
	c, trips := newClient(addr, cfg.Goroutines)
	defer c.Close()
	opts := []ratelease.Option{ratelease.WithKeyPrefix(prefix("permits")), ratelease.WithRedisTimeout(time.Second)}
	if exact {
		opts = append(opts, ratelease.WithExact())
	}
	l, err := ratelease.New(c, opts...)
	if err != nil {
		return PermitResult{}, err
	}
	defer l.Close()
	con, err := ratelease.NewConcurrency("bench", cfg.Limit, time.Minute)
	if err != nil {
		return PermitResult{}, err
	}
	ctx := context.Background()
	cpu0, err := redisCPU(ctx, c)
	if err != nil {
		return PermitResult{}, err
	}
	rt0 := trips.Trips.Load()
	var mu sync.Mutex
	var total int64
	var first error
	start := time.Now()
	stop := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for range cfg.Goroutines {
		wg.Go(func() {
			var n int64
			for time.Now().Before(stop) {
				p, _, err := l.AcquirePermit(ctx, con, "k")
				if err == nil && p != nil {
					if cfg.Hold > 0 {
						time.Sleep(cfg.Hold)
					}
					err = p.Release(ctx)
					n++
				}
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return PermitResult{}, first
	}
	r := PermitResult{Permits: total, Elapsed: elapsed, RoundTrips: trips.Trips.Load() - rt0}
	cpu1, err := redisCPU(ctx, c)
	if err != nil {
		return PermitResult{}, err
	}
	r.RedisSeconds = cpu1 - cpu0
	return r, nil
}
