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

// AllowAtMost takes what is left, up to n: a batch cut to the budget.
func ExampleLimiter_AllowAtMost() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	emails, _ := ratelease.NewPolicy("emails", ratelease.PerMinute(100))

	ctx := context.Background()
	for _, batch := range []int{70, 70, 70} {
		res, err := limiter.AllowAtMost(ctx, emails, "tenant:7", batch)
		if err != nil {
			panic(err)
		}
		fmt.Printf("asked %d, granted %d, retry-after=%v\n", batch, res.Granted, res.RetryAfter)
	}
	// Output:
	// asked 70, granted 70, retry-after=0s
	// asked 70, granted 30, retry-after=0s
	// asked 70, granted 0, retry-after=600ms
}

// Refund gives back units whose work did not happen.
func ExampleLimiter_Refund() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	uploads, _ := ratelease.NewPolicy("uploads", ratelease.PerHour(10))

	ctx := context.Background()
	res, _ := limiter.AllowN(ctx, uploads, "user:42", 4)
	fmt.Println("admitted 4, remaining", res.Remaining)
	// The upload failed before it started: its units go back.
	if err := limiter.Refund(ctx, uploads, "user:42", 4); err != nil {
		panic(err)
	}
	res, _ = limiter.Peek(ctx, uploads, "user:42")
	fmt.Println("after the refund, remaining", res.Remaining)
	// Output:
	// admitted 4, remaining 6
	// after the refund, remaining 10
}

// Charge settles a cost known after the work: a request admitted on an
// estimate that turned out dearer is charged the rest, past the limit if
// need be, and the key owes it.
func ExampleLimiter_Charge() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	tokens, _ := ratelease.NewPolicy("llm-tokens", ratelease.PerMinute(1000))

	ctx := context.Background()
	estimate := 600 // the prompt's tokens and the answer's max_tokens
	res, _ := limiter.AllowN(ctx, tokens, "user:42", estimate)
	fmt.Println("admitted", res.Allowed, "remaining", res.Remaining)
	used := 1300 // what the model's answer came to
	res, _ = limiter.Charge(ctx, tokens, "user:42", used-estimate)
	fmt.Println("debt", res.Debt, "next token in", res.RetryAfter.Round(time.Second))
	// (Had it used less, Refund would give the rest back.)
	// Output:
	// admitted true remaining 400
	// debt 300 next token in 18s
}

// Settle settles an estimate against the Result that admitted it: what
// the work did not use goes back only to the window that admitted it.
func ExampleLimiter_Settle() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	tokens, _ := ratelease.NewPolicy("llm-tokens", ratelease.PerMinute(1000))

	ctx := context.Background()
	est, _ := limiter.AllowN(ctx, tokens, "user:42", 600) // the prompt and max_tokens
	fmt.Println("admitted", est.Allowed, "remaining", est.Remaining)
	limiter.Settle(ctx, tokens, "user:42", est, 250) // what the answer came to
	res, _ := limiter.Peek(ctx, tokens, "user:42")
	fmt.Println("after the settlement, remaining", res.Remaining)
	// Output:
	// admitted true remaining 400
	// after the settlement, remaining 750
}

// Peek tells where a key stands, charging nothing.
func ExampleLimiter_Peek() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	api, _ := ratelease.NewPolicy("api", ratelease.PerSecond(2))

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, _ := limiter.Peek(ctx, api, "user:42")
		fmt.Printf("peek: allowed=%v remaining=%d retry-after=%v\n", res.Allowed, res.Remaining, res.RetryAfter)
		limiter.Allow(ctx, api, "user:42")
	}
	// Output:
	// peek: allowed=true remaining=2 retry-after=0s
	// peek: allowed=true remaining=1 retry-after=0s
	// peek: allowed=false remaining=0 retry-after=500ms
}

// Reset gives a key its full limits back: after a support ticket, say.
func ExampleLimiter_Reset() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	logins, _ := ratelease.NewPolicy("logins", ratelease.PerHour(3))

	ctx := context.Background()
	limiter.AllowN(ctx, logins, "user:42", 3)
	res, _ := limiter.Allow(ctx, logins, "user:42")
	fmt.Println("before Reset: allowed", res.Allowed)
	if err := limiter.Reset(ctx, logins, "user:42"); err != nil {
		panic(err)
	}
	res, _ = limiter.Allow(ctx, logins, "user:42")
	fmt.Println("after Reset: allowed", res.Allowed, "remaining", res.Remaining)
	// Output:
	// before Reset: allowed false
	// after Reset: allowed true remaining 2
}

// Shadow mode rolls a new limit out safely: its would-be denials are
// admitted, marked and counted, and charge nothing.
func ExamplePolicy_Shadow() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	strict, _ := ratelease.NewPolicy("search", ratelease.PerMinute(2))
	trial := strict.Shadow() // same name, limits and state; never denies

	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, _ := limiter.Allow(ctx, trial, "user:42")
		fmt.Printf("allowed=%v shadowed=%v retry-after=%v\n", res.Allowed, res.Shadowed, res.RetryAfter)
	}
	fmt.Println("would have denied:", limiter.Stats().Policies[trial.Name()].ShadowDenied)
	// Output:
	// allowed=true shadowed=false retry-after=0s
	// allowed=true shadowed=false retry-after=0s
	// allowed=true shadowed=true retry-after=30s
	// would have denied: 1
}

// Block puts a key in a penalty box on every instance, until it lapses or
// Unblock lifts it.
func ExampleLimiter_Block() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	logins, _ := ratelease.NewPolicy("logins", ratelease.PerHour(10))

	ctx := context.Background()
	if err := limiter.Block(ctx, logins, "user:42", 15*time.Minute); err != nil {
		panic(err)
	}
	res, _ := limiter.Allow(ctx, logins, "user:42")
	fmt.Println("blocked:", res.Blocked, "allowed:", res.Allowed, "retry-after:", res.RetryAfter)
	if err := limiter.Unblock(ctx, logins, "user:42"); err != nil {
		panic(err)
	}
	res, _ = limiter.Allow(ctx, logins, "user:42")
	fmt.Println("after Unblock: allowed", res.Allowed, "remaining", res.Remaining)
	// Output:
	// blocked: true allowed: false retry-after: 15m0s
	// after Unblock: allowed true remaining 9
}

// A quota per calendar month beside a rate limit: both must admit, and
// the quota's window ends at midnight of the month's last day in its
// zone.
func ExamplePerCalendarMonth() {
	mr, _ := miniredis.Run() // its TIME is this host's: the calendar's windows are placed by both
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	berlin, _ := time.LoadLocation("Europe/Berlin")
	plan, _ := ratelease.NewPolicy("free-plan", ratelease.PerSecond(5), ratelease.PerCalendarMonth(3, berlin))
	fmt.Println(plan.Limits()[1])

	ctx := context.Background()
	for range 4 {
		res, _ := limiter.Allow(ctx, plan, "user:42")
		fmt.Println(res.Allowed, res.Limit.Algorithm, res.Remaining)
	}
	// Output:
	// 3 req/calendar month (Europe/Berlin)
	// true calendar window 2
	// true calendar window 1
	// true calendar window 0
	// false calendar window 0
}

// A concurrency limit: at most 2 exports in flight per tenant, whatever
// their rate; a permit is held until it is released (or its TTL ends,
// should its holder crash).
func ExampleLimiter_AcquirePermit() {
	client, done := exampleRedis()
	defer done()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	exports, _ := ratelease.NewConcurrency("exports", 2, time.Minute)

	ctx := context.Background()
	a, _, _ := limiter.AcquirePermit(ctx, exports, "tenant:7")
	b, _, _ := limiter.AcquirePermit(ctx, exports, "tenant:7")
	_, res, _ := limiter.AcquirePermit(ctx, exports, "tenant:7")
	fmt.Printf("third in flight: %v, retry within the TTL: %v\n", res.Allowed, res.RetryAfter <= time.Minute)
	_ = a.Release(ctx) // the first export is done
	c, res, _ := limiter.AcquirePermit(ctx, exports, "tenant:7")
	fmt.Println("after a release:", res.Allowed)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third in flight: false, retry within the TTL: true
	// after a release: true
}
