package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
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
