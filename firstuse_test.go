package ratelease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A key's first decision in lease mode keeps nothing: "if the requester
// leaves before the answer, a grant goes back". A first Allow whose
// context ends while Redis's reply is on its way (a proxy delays it) must
// leave the key as it was once the Limiter is closed: the unit Redis
// granted comes back, whether the client cuts calls at their context's
// deadline (ContextTimeoutEnabled) or not (the Limiter guards its calls).
func TestFirstUseLeftMidCallGivesItsGrantBack(t *testing.T) {
	for _, honours := range []bool{true, false} {
		name := map[bool]string{true: "ContextTimeoutEnabled", false: "guarded"}[honours]
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.NewProxy(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: honours, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			l, err := ratelease.New(c, ratelease.WithRedisTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			p := policy(t, "fu-"+name, ratelease.PerHour(100))
			ctx := context.Background()
			// The script loaded, the connection made: only the reply is late.
			if _, err := l.Allow(ctx, p, "warm"); err != nil {
				t.Fatal(err)
			}
			proxy.SetDelay(300 * time.Millisecond)
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err = l.Allow(cctx, p, "k")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first Allow past its context: %v, want DeadlineExceeded", err)
			}
			time.Sleep(600 * time.Millisecond) // the reply lands
			proxy.SetDelay(0)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = direct.Close() })
			exact, err := ratelease.New(direct, ratelease.WithExact())
			if err != nil {
				t.Fatal(err)
			}
			defer exact.Close()
			res, err := exact.Peek(ctx, p, "k")
			if err != nil {
				t.Fatal(err)
			}
			if res.Remaining != 100 {
				t.Errorf("after a first use whose requester left, and Close: %d of 100 left in Redis; the grant was not given back", res.Remaining)
			}
		})
	}
}
