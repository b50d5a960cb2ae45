package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

// Limit every API key to 2 calls a minute on a gRPC server (here the
// standard health service), with the rate-limit fields in the response
// metadata, and ResourceExhausted with a retry hint past the limit.
func ExampleNew() {
	mr, _ := miniredis.Run() // your Redis instead
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	perKey, _ := ratelease.NewPolicy("per-key", ratelease.PerMinute(2))

	lim, err := grpclimit.New(limiter, perKey, grpclimit.WithKey(grpclimit.Metadata("x-api-key")))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(lim.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "alice")
	for i := 0; i < 3; i++ {
		var header, trailer metadata.MD // an admission's fields, a denial's
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		md := metadata.Join(header, trailer)
		fmt.Println(status.Code(err), md.Get("ratelimit-policy"), md.Get("x-ratelimit-remaining"), md.Get("retry-after"))
		if delay, ok := grpclimit.RetryDelay(err); ok {
			fmt.Println("retry in", delay.Round(time.Second))
		}
	}
	// Output:
	// OK ["per-key";q=2;w=60] [1] []
	// OK ["per-key";q=2;w=60] [0] []
	// ResourceExhausted ["per-key";q=2;w=60] [0] [30]
	// retry in 30s
}

// A client that waits as long as the server's hint says and tries again,
// here past a limit of 5 calls a second.
func ExampleUnaryClientInterceptor() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client, ratelease.WithExact())
	defer limiter.Close()
	perIP, _ := ratelease.NewPolicy("per-ip", ratelease.PerSecond(5))
	lim, _ := grpclimit.New(limiter, perIP)
	srv := grpc.NewServer(lim.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	retry, err := grpclimit.UnaryClientInterceptor(grpclimit.WithMaxRetries(3), grpclimit.WithMaxWait(2*time.Second))
	if err != nil {
		panic(err)
	}
	conn, _ := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retry))
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	start := time.Now()
	ok := 0
	for i := 0; i < 8; i++ {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
			ok++
		}
	}
	// 5 at once, then one every 200ms.
	fmt.Println(ok, "calls succeeded, the last 3 after waiting:", time.Since(start) >= 500*time.Millisecond)
	// Output:
	// 8 calls succeeded, the last 3 after waiting: true
}
