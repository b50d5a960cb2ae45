package ratelease_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

// WithEvents tells what goes wrong with Redis as it happens, with the
// cause: here Redis goes away, and the first failed call says so at once;
// the fifth in a row opens the circuit breaker, which says why.
func ExampleWithEvents() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()

	limiter, err := ratelease.New(client, ratelease.WithExact(), ratelease.WithEvents(func(ev ratelease.Event) {
		// A real observer logs ev.Err, which names the cause (here
		// "connect: connection refused", with the port of the day).
		fmt.Printf("%v: breaker %v, redis unavailable: %v\n", ev.Kind, ev.Breaker, errors.Is(ev.Err, ratelease.ErrUnavailable))
	}))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	api, _ := ratelease.NewPolicy("api", ratelease.PerSecond(100))
	ctx := context.Background()

	res, _ := limiter.Allow(ctx, api, "user:42")
	fmt.Println("Redis up:", res.Source)
	mr.Close()
	for range 5 {
		res, _ = limiter.Allow(ctx, api, "user:42")
	}
	fmt.Println("Redis down:", res.Source)
	// Output:
	// Redis up: remote
	// first-failure: breaker closed, redis unavailable: true
	// breaker: breaker open, redis unavailable: true
	// Redis down: fallback
}
