package rateleaseotel_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/rateleaseotel"
)

// A Limiter's Redis calls as spans and its Stats as metrics, after three
// requests under a limit of two a minute. Here the providers are the SDK's
// with an in-memory recorder and a manual reader; in a service, the
// global providers (the default) with their exporters.
func Example() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tracers.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer meters.Shutdown(context.Background())

	hook, err := rateleaseotel.NewRedisHook(rateleaseotel.WithTracerProvider(tracers))
	if err != nil {
		panic(err)
	}
	limiter, err := ratelease.New(client, ratelease.WithExact(), ratelease.WithRedisHook(hook))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	reg, err := rateleaseotel.RegisterMetrics(limiter, rateleaseotel.WithMeterProvider(meters))
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	login, _ := ratelease.NewPolicy("login", ratelease.PerMinute(2))
	for range 3 {
		limiter.Allow(context.Background(), login, "user:42")
	}

	for _, s := range spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == rateleaseotel.OutcomeKey {
				fmt.Println(s.Name(), a.Value.AsString())
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "ratelease.decisions" {
			continue
		}
		var lines []string
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := dp.Attributes.Value(rateleaseotel.OutcomeKey)
			lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, outcome.AsString(), dp.Value))
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	// Output:
	// ratelease.decide allowed
	// ratelease.decide allowed
	// ratelease.decide denied
	// ratelease.decisions{allowed} 2
	// ratelease.decisions{denied} 1
}
