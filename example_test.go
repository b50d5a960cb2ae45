package ratelease_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// exampleRedis starts an in-memory Redis with its clock stopped at t0, so
// that the examples print the same numbers every time. Use your own Redis:
// redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true}).
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	mr.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return c, func() { c.Close(); mr.Close() }
}

func Example() {
	client, done := exampleRedis()
	defer done()

	limiter, err := ratelease.New(client)
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	api, err := ratelease.NewPolicy("api", ratelease.PerSecond(3))
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for i := 0; i < 4; i++ {
		res, err := limiter.Allow(ctx, api, "user:42")
		if err != nil {
			panic(err) // Redis unavailable, or bad input
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=333.334ms
}

// Several limits at once: every one must admit, and the Result names the
// one that decided.
func ExampleNewPolicy() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()

	policy, err := ratelease.NewPolicy("search",
		ratelease.PerSecond(10),
		ratelease.PerMinute(100),
		ratelease.Limit{Rate: 3, Period: time.Hour, Algorithm: ratelease.SlidingWindowLog},
	)
	if err != nil {
		panic(err)
	}
	for i := 0; i < 4; i++ {
		res, _ := limiter.Allow(context.Background(), policy, "team:7")
		fmt.Printf("allowed=%v by %v, %d left\n", res.Allowed, res.Limit, res.Remaining)
	}
	// Output:
	// allowed=true by 3 req/h (sliding window log), 2 left
	// allowed=true by 3 req/h (sliding window log), 1 left
	// allowed=true by 3 req/h (sliding window log), 0 left
	// allowed=false by 3 req/h (sliding window log), 0 left
}

// A weighted request: an expensive query costs 5 units of the budget.
func ExampleLimiter_AllowN() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	graphql, _ := ratelease.NewPolicy("graphql", ratelease.PerMinute(12))

	for _, cost := range []int{5, 5, 5, 2} {
		res, _ := limiter.AllowN(context.Background(), graphql, "client:a", cost)
		fmt.Printf("cost %d: allowed=%v remaining=%d\n", cost, res.Allowed, res.Remaining)
	}
	// Output:
	// cost 5: allowed=true remaining=7
	// cost 5: allowed=true remaining=2
	// cost 5: allowed=false remaining=2
	// cost 2: allowed=true remaining=0
}

// Wait blocks until the request is admitted, or the context ends.
func ExampleLimiter_Wait() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	jobs, _ := ratelease.NewPolicy("jobs", ratelease.PerHour(1))

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fmt.Println(limiter.Wait(ctx, jobs, "worker"))
	// The next unit comes in an hour: the deadline is sooner, so Wait
	// returns at once instead of sleeping in vain.
	fmt.Println(limiter.Wait(ctx, jobs, "worker"))
	// Output:
	// <nil>
	// context deadline exceeded
}

func ExampleLimit_String() {
	fmt.Println(ratelease.PerSecond(10))
	fmt.Println(ratelease.Limit{Rate: 100, Period: time.Minute, Algorithm: ratelease.SlidingWindowCounter})
	fmt.Println(ratelease.Limit{Rate: 5, Period: time.Second, Burst: 20, Algorithm: ratelease.LeakyBucket})
	// Output:
	// 10 req/s (burst 10)
	// 100 req/min (sliding window counter)
	// 5 req/s (leaky bucket, queue 20)
}

// HTTP middleware (package httplimit) with a multi-limit policy, keyed by
// the client's IP: the draft-standard headers on every response, and 429
// with Retry-After once a limit is spent.
func Example_httpMiddleware() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	api, _ := ratelease.NewPolicy("api", ratelease.PerSecond(2), ratelease.PerHour(100))

	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })
	handler := httplimit.Middleware(limiter, api, httplimit.WithHeaders(httplimit.DraftHeaders))(hello)

	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil) // RemoteAddr 192.0.2.1
		handler.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(w.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 RateLimit: "api-1s";r=1;t=1 Retry-After: ""
	// 200 RateLimit: "api-1s";r=0;t=1 Retry-After: ""
	// 429 RateLimit: "api-1s";r=0;t=1 Retry-After: "1"
	// "api-1s";q=2;w=1, "api-1h";q=100;w=3600
}
