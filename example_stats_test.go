package ratelease_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/ratelease/ratelease"
)

// Each policy's decisions, by outcome and by source, and its denials by
// the limit that decided: what a metrics exporter publishes, with the
// policy's name as a label.
func ExampleStats() {
	client, done := exampleRedis()
	defer done()

	limiter, err := ratelease.New(client, ratelease.WithExact())
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	api, _ := ratelease.NewPolicy("api", ratelease.PerSecond(3))
	login, _ := ratelease.NewPolicy("login", ratelease.PerMinute(1))
	ctx := context.Background()
	for range 5 {
		limiter.Allow(ctx, api, "user:42")
	}
	limiter.Allow(ctx, login, "user:42")

	s := limiter.Stats()
	fmt.Printf("api: %+v\n", s.Policies[api.Name()])
	fmt.Printf("api denied by: %v\n", s.DeniedBy[api.Name()])
	names := make([]string, 0, len(s.Policies))
	for name := range s.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ps := s.Policies[name]
		fmt.Printf("%s: allowed %d, denied %d, remote %d\n", name, ps.Allowed, ps.Denied, ps.Remote)
	}
	// Output:
	// api: {Allowed:3 Denied:2 Local:0 Remote:5 Cached:0 Fallback:0 Busy:0 ShadowDenied:0}
	// api denied by: map[3 req/s (burst 3):2]
	// api: allowed 3, denied 2, remote 5
	// login: allowed 1, denied 0, remote 1
}
