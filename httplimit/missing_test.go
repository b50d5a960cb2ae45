package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/httplimit"
)

// A request no dimension has a key for: refused under DenyMissingKey (401
// by the default error handler), limited under one shared key with
// FallbackKey, let through under PassMissingKey, the default.
func TestMissingKey(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    []httplimit.Option
		want    []int // the status of each of three anonymous requests
		limited bool  // the fallback key was charged
	}{
		{"deny", []httplimit.Option{httplimit.WithMissingKey(httplimit.DenyMissingKey)}, []int{401, 401, 401}, false},
		{"fallback", []httplimit.Option{httplimit.WithMissingKey(httplimit.FallbackKey("anonymous"))}, []int{200, 200, 429}, true},
		{"pass", []httplimit.Option{httplimit.WithMissingKey(httplimit.PassMissingKey)}, []int{200, 200, 200}, false},
		{"default", nil, []int{200, 200, 200}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t, ratelease.WithExact())
			p := newPolicy(t, "key", ratelease.PerMinute(2))
			var denied error
			opts := append([]httplimit.Option{httplimit.WithKey(httplimit.Header("X-API-Key")),
				httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
					denied = err
					httplimit.DefaultErrorHandler(w, r, err)
				})}, c.opts...)
			h := httplimit.Middleware(l, p, opts...)(ok)
			for i, want := range c.want {
				if res := do(h, "192.0.2.1:1"); res.StatusCode != want {
					t.Fatalf("anonymous request %d: %d, want %d", i, res.StatusCode, want)
				}
			}
			if c.want[0] == 401 && !errors.Is(denied, httplimit.ErrMissingKey) {
				t.Fatalf("the error handler got %v, want ErrMissingKey", denied)
			}
			res, err := l.Peek(context.Background(), p, "anonymous")
			if err != nil {
				t.Fatal(err)
			}
			if limited := res.Remaining < 2; limited != c.limited {
				t.Fatalf("the fallback key has %d left: charged %v, want %v", res.Remaining, limited, c.limited)
			}
			// A request with a key is limited by it, whatever the choice.
			if res := do(h, "192.0.2.1:1", "X-API-Key", "alice"); res.StatusCode != http.StatusOK {
				t.Fatalf("a request with a key: %d", res.StatusCode)
			}
		})
	}
}

// X-RateLimit-Reset is read on the Limiter's clock: a test clock in 2024
// puts it in 2024.
func TestResetHeaderOnTheLimitersClock(t *testing.T) {
	start := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	l := newLimiter(t, ratelease.WithExact(), ratelease.WithClock(clock.NewManual(start)))
	h := httplimit.Middleware(l, newPolicy(t, "api", ratelease.PerMinute(3)))(ok)
	res := do(h, "192.0.2.1:1")
	reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Unix(reset, 0).Sub(start); d < 0 || d > 25*time.Second {
		t.Fatalf("X-RateLimit-Reset %v, %v after the Limiter's clock (want within the 20s a unit takes)", time.Unix(reset, 0).UTC(), d)
	}
}

// A request that a second dimension denies is refunded to the first, and
// the first's RateLimit entry says so: what it has after the refund.
func TestRefundedDimensionReportsWhatIsLeft(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(10))
	perKey := newPolicy(t, "key", ratelease.PerMinute(1))
	h := httplimit.Middleware(l, perIP, httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))(ok)
	if res := do(h, "192.0.2.1:1", "X-API-Key", "alice"); res.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", res.StatusCode)
	}
	res := do(h, "192.0.2.1:1", "X-API-Key", "alice")
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", res.StatusCode)
	}
	// 10 - 1 (the first request) = 9: the second's unit went back.
	if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"ip";r=9;`) {
		t.Fatalf("RateLimit %q: the IP dimension's entry should report the 9 left after the refund", got)
	}
	if p, err := l.Peek(context.Background(), perIP, "192.0.2.1"); err != nil || p.Remaining != 9 {
		t.Fatalf("the IP's limit: %+v, %v; want 9 left", p, err)
	}
}
