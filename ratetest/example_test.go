package ratetest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/ratetest"
)

// A limit of 2 per second, exactly: the third request in the same instant
// is denied, and half a second later (on the Env's clock, which moves only
// when told) one unit has come back. In a test, ratetest.New(t) makes the
// Env and closes it when the test ends.
func Example() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	api, _ := ratelease.NewPolicy("api", ratelease.PerSecond(2))

	for range 3 {
		res, _ := env.Limiter().Allow(ctx, api, "user:42")
		fmt.Println(res.Allowed, res.RetryAfter)
	}
	env.Advance(500 * time.Millisecond)
	res, _ := env.Limiter().Allow(ctx, api, "user:42")
	fmt.Println(res.Allowed, "at", env.Now().Sub(ratetest.Epoch))
	// Output:
	// true 0s
	// true 0s
	// false 500ms
	// true at 500ms
}

// A cost settled after the work (Limiter.Charge) puts the key in debt;
// Advance pays it off as the limit refills.
func ExampleEnv_Advance_debt() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	tokens, _ := ratelease.NewPolicy("tokens", ratelease.PerSecond(100))

	res, _ := env.Limiter().Charge(ctx, tokens, "user:42", 150)
	fmt.Println("debt", res.Debt, "retry after", res.RetryAfter)
	env.Advance(res.RetryAfter)
	res, _ = env.Limiter().Allow(ctx, tokens, "user:42")
	fmt.Println("then", res.Allowed)
	// Output:
	// debt 50 retry after 510ms
	// then true
}

// A calendar quota moves with the Env's clock: Exhaust spends the day's,
// and Advance to the next local midnight (here UTC's) brings a fresh one.
func ExampleEnv_Exhaust_calendar() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	daily, _ := ratelease.NewPolicy("daily", ratelease.PerCalendarDay(100, time.UTC))

	env.Advance(20 * time.Hour) // 20:00 on Epoch's day
	if err := env.Exhaust(ctx, daily, "user:42"); err != nil {
		log.Fatal(err)
	}
	res, _ := env.Limiter().Allow(ctx, daily, "user:42")
	fmt.Println(res.Allowed, "retry after", res.RetryAfter)
	env.Advance(res.RetryAfter)
	res, _ = env.Limiter().Allow(ctx, daily, "user:42")
	fmt.Println(res.Allowed, "at", env.Now().Format(time.DateTime))
	// Output:
	// false retry after 4h0m0s
	// true at 2024-01-02 00:00:00
}

// A permit whose holder never releases it (a crash) comes back when its
// TTL ends on the Env's clock.
func ExampleEnv_Advance_permit() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	exports, _ := ratelease.NewConcurrency("exports", 1, 30*time.Second)

	env.Limiter().AcquirePermit(ctx, exports, "tenant:7") // never released
	_, res, _ := env.Limiter().AcquirePermit(ctx, exports, "tenant:7")
	fmt.Println(res.Allowed, "retry after", res.RetryAfter)
	env.Advance(res.RetryAfter)
	_, res, _ = env.Limiter().AcquirePermit(ctx, exports, "tenant:7")
	fmt.Println(res.Allowed)
	// Output:
	// false retry after 30s
	// true
}

// Exhaust uses a key up, so that a test can check what the code under
// test does with a denial; Advance then moves to when the limit admits
// again.
func ExampleEnv_Exhaust() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	logins, _ := ratelease.NewPolicy("logins",
		ratelease.Limit{Rate: 5, Period: time.Minute, Algorithm: ratelease.FixedWindow})

	if err := env.Exhaust(ctx, logins, "user:42"); err != nil {
		log.Fatal(err)
	}
	res, _ := env.Limiter().Allow(ctx, logins, "user:42")
	fmt.Println("after Exhaust:", res.Allowed, "retry after", res.RetryAfter)

	env.Advance(res.RetryAfter)
	res, _ = env.Limiter().Allow(ctx, logins, "user:42")
	fmt.Println("a minute later:", res.Allowed, res.Remaining, "left")
	// Output:
	// after Exhaust: false retry after 1m0s
	// a minute later: true 4 left
}

// Two replicas of a service share one limit: what one admits, the other
// cannot.
func ExampleEnv_NewLimiter() {
	env, err := ratetest.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	p, _ := ratelease.NewPolicy("p", ratelease.PerMinute(3))
	replica, err := env.NewLimiter()
	if err != nil {
		log.Fatal(err)
	}

	first, _ := env.Limiter().AllowN(ctx, p, "k", 3)
	second, _ := replica.Allow(ctx, p, "k")
	fmt.Println(first.Allowed, second.Allowed, second.RetryAfter)
	// Output:
	// true false 20s
}
