package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

// NewInFlight holds a permit while a call is served: a second call of the
// key meanwhile gets ResourceExhausted with RetryInfo, and one after it
// is served goes through.
func TestInFlight(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	c, err := ratelease.NewConcurrency("exports", 1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f, err := grpclimit.NewInFlight(l, c)
	if err != nil {
		t.Fatal(err)
	}
	// A call with the metadata "block" waits for release, inside the
	// permit.
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("block")) > 0 {
			entered <- struct{}{}
			<-release
		}
		return h(ctx, req)
	}
	s := serve(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(f.Unary(), block)})
	first := make(chan error)
	go func() { first <- s.call(metadata.AppendToOutgoingContext(ctxFor(t), "block", "1")) }()
	<-entered
	err = s.call(ctxFor(t))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || len(st.Details()) != 1 {
		t.Fatalf("a second call in flight: %v, want ResourceExhausted with RetryInfo", err)
	}
	if ri, ok := st.Details()[0].(*errdetails.RetryInfo); !ok || ri.RetryDelay.AsDuration() != 30*time.Second {
		t.Fatalf("details %v, want a RetryInfo of 30s", st.Details())
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first call: %v", err)
	}
	if err := s.call(ctxFor(t)); err != nil {
		t.Fatalf("after the first was served: %v, want its permit back", err)
	}
	if _, err := grpclimit.NewInFlight(l, nil); err != grpclimit.ErrNoConcurrency {
		t.Fatalf("NewInFlight(nil Concurrency): %v", err)
	}
}
