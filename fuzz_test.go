package ratelease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

// FuzzPublicAPI drives the public API with whatever a caller could pass:
// a limit's values, a policy's name, lease settings and other options, a
// key and a number of units. Nothing may panic, and every error must be one
// of the documented sentinels. CI runs it briefly (.ci/run); more with
//
//	go test -run '^$' -fuzz FuzzPublicAPI -fuzztime 1m .
func FuzzPublicAPI(f *testing.F) {
	f.Add("api", int64(5), int64(time.Second), int64(0), int64(0), int64(1), "user:42", int64(1), int64(0), int64(0), int64(0), 0.25, int64(100), "rl", false)
	f.Add("w", int64(100), int64(time.Minute), int64(0), int64(1), int64(3), "k", int64(101), int64(0), int64(0), int64(0), 0.5, int64(1), "p", true)
	f.Add("log", int64(2_000_000), int64(time.Second), int64(0), int64(2), int64(1), "", int64(-1), int64(-5), int64(1), int64(-1), 1.5, int64(0), "", false)
	f.Add("a:b", int64(-1), int64(-1), int64(-3), int64(42), int64(0), "\xff\x00{}", int64(0), int64(1<<62), int64(1), int64(1<<62), -0.1, int64(-1), "a{b", false)
	f.Add("lb", int64(3), int64(time.Millisecond), int64(7), int64(4), int64(2), "x", int64(7), int64(10), int64(5), int64(time.Hour), 0.9, int64(5), "q", false)
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		f.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	sentinels := []error{ratelease.ErrInvalidLimit, ratelease.ErrInvalidPolicy, ratelease.ErrInvalidKey,
		ratelease.ErrInvalidN, ratelease.ErrExceedsCapacity, ratelease.ErrInvalidOption, ratelease.ErrUnavailable}
	documented := func(err error) bool {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, name string, rate, period, burst, alg, n int64, key string,
		min, max, refresh, ttl int64, lowWater float64, maxKeys int64, prefix string, exact bool) {
		p, err := ratelease.NewPolicy(name, ratelease.Limit{Rate: int(rate), Period: time.Duration(period),
			Burst: int(burst), Algorithm: ratelease.Algorithm(alg)})
		if err != nil {
			if !documented(err) || p != nil {
				t.Fatalf("NewPolicy: %v, %v", p, err)
			}
			return
		}
		opts := []ratelease.Option{
			ratelease.WithLease(ratelease.LeaseConfig{Min: int(min), Max: int(max), Refresh: time.Duration(refresh),
				TTL: time.Duration(ttl), LowWater: lowWater}),
			ratelease.WithMaxKeys(int(maxKeys)),
			ratelease.WithKeyPrefix(prefix),
			ratelease.WithRedisTimeout(time.Second),
		}
		if exact {
			opts = append(opts, ratelease.WithExact())
		}
		l, err := ratelease.New(client, opts...)
		if err != nil {
			if !documented(err) || l != nil {
				t.Fatalf("New: %v, %v", l, err)
			}
			// The defaults, then, so that the decision below still runs.
			if l, err = ratelease.New(client, ratelease.WithRedisTimeout(time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		defer l.Close()
		ctx := context.Background()
		res, err := l.AllowN(ctx, p, key, int(n))
		switch {
		case err != nil && !documented(err):
			t.Fatalf("AllowN(%q, %d): %v", key, n, err)
		case err == nil && res.Allowed && res.RetryAfter != 0:
			t.Fatalf("AllowN(%q, %d): admitted with RetryAfter %v", key, n, res.RetryAfter)
		}
		// WaitN, for a moment: its context's end comes back unwrapped.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := l.WaitN(wctx, p, key, int(n)); err != nil && !documented(err) && err != context.DeadlineExceeded {
			t.Fatalf("WaitN(%q, %d): %v", key, n, err)
		}
		// A concurrency limit of the same name, n permits for ttl.
		if c, err := ratelease.NewConcurrency(name, int(n), time.Duration(ttl)); err != nil {
			if !documented(err) && !errors.Is(err, ratelease.ErrInvalidDuration) {
				t.Fatalf("NewConcurrency(%q, %d, %d): %v", name, n, ttl, err)
			}
		} else if p, _, err := l.AcquirePermit(ctx, c, key); err != nil && !documented(err) {
			t.Fatalf("AcquirePermit(%q): %v", key, err)
		} else if p != nil {
			if err := p.Release(ctx); err != nil && !documented(err) {
				t.Fatalf("Release: %v", err)
			}
		}
		// Charge: a cost past the limits is no error, and owes.
		res, err = l.Charge(ctx, p, key, int(n))
		switch {
		case err != nil && !documented(err):
			t.Fatalf("Charge(%q, %d): %v", key, n, err)
		case err == nil && (res.Granted != int(n) || res.Debt < 0 || !res.Allowed):
			t.Fatalf("Charge(%q, %d): %+v", key, n, res)
		case err == nil && res.Debt > 0 && res.RetryAfter <= 0:
			t.Fatalf("Charge(%q, %d): in debt with RetryAfter %v", key, n, res.RetryAfter)
		}
	})
}
