package rateleaseprom_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/rateleaseprom"
)

// A Limiter's metrics, registered with a registry, after three requests
// under a limit of two a minute. (promhttp.HandlerFor(registry, ...)
// serves them; prometheus.MustRegister registers with the default
// registry.)
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := ratelease.New(client, ratelease.WithExact())
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	collector, err := rateleaseprom.New(limiter, rateleaseprom.WithLimiterName("api"))
	if err != nil {
		panic(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collector)

	login, _ := ratelease.NewPolicy("login", ratelease.PerMinute(2))
	for range 3 {
		limiter.Allow(context.Background(), login, "user:42")
	}

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "ratelease_policy_decisions_total" && f.GetName() != "ratelease_redis_round_trips_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Printf("%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
		}
	}
	runtime.KeepAlive(login) // a policy's series last while the program holds it
	// Output:
	// ratelease_policy_decisions_total{limiter="api",outcome="allowed",policy="login"} 2
	// ratelease_policy_decisions_total{limiter="api",outcome="denied",policy="login"} 1
	// ratelease_redis_round_trips_total{limiter="api"} 3
}

// The time of a Limiter's Redis round trips takes two steps, one before
// the Limiter is made and one after: TimeRedisCalls returns both halves,
// timing for ratelease.New and report for rateleaseprom.New. The Limiter's
// other Redis hooks (rateleaseotel's spans, say) go to TimeRedisCalls,
// not to ratelease.New, which keeps one hook.
func ExampleTimeRedisCalls() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	timing, report := rateleaseprom.TimeRedisCalls()
	limiter, err := ratelease.New(client, ratelease.WithExact(), timing) // 1: the Limiter times its calls
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	collector, err := rateleaseprom.New(limiter, report, rateleaseprom.WithLimiterName("api")) // 2: the Collector reports them
	if err != nil {
		panic(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collector)

	login, _ := ratelease.NewPolicy("login", ratelease.PerMinute(2))
	for range 3 {
		limiter.Allow(context.Background(), login, "user:42")
	}
	limiter.Reset(context.Background(), login, "user:42")

	families, err := registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "ratelease_redis_call_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Printf("%s_count{%s} %d\n", f.GetName(), strings.Join(labels, ","), m.GetHistogram().GetSampleCount())
		}
	}
	// Output:
	// ratelease_redis_call_duration_seconds_count{limiter="api",op="decide"} 3
	// ratelease_redis_call_duration_seconds_count{limiter="api",op="reset"} 1
}
