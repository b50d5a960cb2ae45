package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
	"github.com/ratelease/ratelease/ratetest"
)

// Limit every client IP to 2 requests a minute, with the standard headers
// on every response and 429 past the limit.
func ExampleMiddleware() {
	mr, _ := miniredis.Run() // your Redis instead
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	perIP, _ := ratelease.NewPolicy("per-ip", ratelease.PerMinute(2))

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	handler := httplimit.Middleware(limiter, perIP)(hello)

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:5000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 "per-ip";q=2;w=60 1
	// 200 "per-ip";q=2;w=60 0
	// 429 "per-ip";q=2;w=60 0
}

// Limit per API key, and per client IP behind a load balancer at 10.0.0.0/8;
// requests without a key are limited by their IP only.
func ExampleWithDimension() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	perIP, _ := ratelease.NewPolicy("ip", ratelease.PerSecond(20))
	perKey, _ := ratelease.NewPolicy("key", ratelease.PerSecond(10), ratelease.PerHour(1000))

	mw := httplimit.Middleware(limiter, perIP,
		httplimit.WithKey(httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))),
		httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))
	handler := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.1.1.1:5000" // the load balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.7")
	r.Header.Set("X-API-Key", "alice")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 "ip";q=20;w=1, "key-1s";q=10;w=1, "key-1h";q=1000;w=3600
}

// Limit requests of a protocol of your own, with the rate-limit fields
// that the middleware sends: describe each policy once (NewDimension),
// decide, and compute the fields from the decisions. Two policies apply
// here: decide them in order until one denies, and refund the earlier
// ones then, as the middleware does.
func ExampleHeaderStyle_Fields() {
	env, _ := ratetest.Run() // your Limiter instead; Redis's time stands still here
	defer env.Close()
	limiter := env.Limiter()
	perUser, _ := ratelease.NewPolicy("user", ratelease.PerMinute(2))
	perTenant, _ := ratelease.NewPolicy("tenant", ratelease.PerHour(100))
	user, _ := httplimit.NewDimension(perUser)
	tenant, _ := httplimit.NewDimension(perTenant)
	applying := []*httplimit.Dimension{user, tenant}

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		var decided []httplimit.Decision
		for _, d := range []httplimit.Decision{{Dimension: user, Key: "alice"}, {Dimension: tenant, Key: "acme"}} {
			d.Result, _ = limiter.Allow(ctx, d.Dimension.Policy(), d.Key)
			decided = append(decided, d)
			if !d.Result.Allowed {
				httplimit.Refund(ctx, limiter, decided[:len(decided)-1], 1)
				break
			}
		}
		f := httplimit.AllHeaders.Fields(applying, decided, env.Now())
		fmt.Printf("policy: %s\nratelimit: %s\nlimit %s, remaining %s, reset %s, retry after %q\n",
			f.Policy, f.RateLimit, f.Limit, f.Remaining, f.Reset, f.RetryAfter)
	}
	// Output:
	// policy: "user";q=2;w=60, "tenant";q=100;w=3600
	// ratelimit: "user";r=1;t=30, "tenant";r=99;t=36
	// limit 2, remaining 1, reset 1704067230, retry after ""
	// policy: "user";q=2;w=60, "tenant";q=100;w=3600
	// ratelimit: "user";r=0;t=30, "tenant";r=98;t=36
	// limit 2, remaining 0, reset 1704067260, retry after ""
	// policy: "user";q=2;w=60, "tenant";q=100;w=3600
	// ratelimit: "user";r=0;t=30
	// limit 2, remaining 0, reset 1704067230, retry after "30"
}

// Find the client of a request that came through your proxies (10.0.0.0/8)
// in the headers of a protocol of your own, here a map with lowercase
// names, and key it as ClientIP does.
func ExampleClientAddr() {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	headers := map[string][]string{"x-forwarded-for": {"203.0.113.9, 2001:db8:1:2::7, 10.0.0.2"}}
	header := func(name string) []string { return headers[strings.ToLower(name)] }

	client := httplimit.ClientAddr(netip.MustParseAddr("10.0.0.1"), header, proxies...)
	fmt.Println(client, httplimit.IPKey(client))
	// Output: 2001:db8:1:2::7 2001:db8:1:2::/64
}
