package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

// missingCases are the WithMissingKey choices, with what three anonymous
// calls of a 2/min policy get and whether the fallback key was charged:
// refused under DenyMissingKey (Unauthenticated by the default error
// handler), limited under one shared key with FallbackKey, let through
// under PassMissingKey, the default.
var missingCases = []struct {
	name    string
	opts    []grpclimit.Option
	want    []codes.Code
	limited bool
}{
	{"deny", []grpclimit.Option{grpclimit.WithMissingKey(grpclimit.DenyMissingKey)},
		[]codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated}, false},
	{"fallback", []grpclimit.Option{grpclimit.WithMissingKey(grpclimit.FallbackKey("anonymous"))},
		[]codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, true},
	{"pass", []grpclimit.Option{grpclimit.WithMissingKey(grpclimit.PassMissingKey)},
		[]codes.Code{codes.OK, codes.OK, codes.OK}, false},
	{"default", nil, []codes.Code{codes.OK, codes.OK, codes.OK}, false},
}

// TestMissingKey: each choice, for unary calls and for streams (which are
// decided when they open); a call with a key is limited by it whatever the
// choice.
func TestMissingKey(t *testing.T) {
	kinds := []struct {
		name string
		call func(ctx context.Context, s *server) error
	}{
		{"unary", func(ctx context.Context, s *server) error { return s.call(ctx) }},
		{"stream", func(ctx context.Context, s *server) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := s.health.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			return err
		}},
	}
	for _, k := range kinds {
		for _, c := range missingCases {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				l := newLimiter(t, ratelease.WithExact())
				p := newPolicy(t, "key", ratelease.PerMinute(2))
				var errs errRecorder
				opts := append([]grpclimit.Option{grpclimit.WithKey(grpclimit.Metadata("x-api-key")), errs.handler()}, c.opts...)
				s := serve(t, newInterceptor(t, l, p, opts...).ServerOptions())
				for i, want := range c.want {
					if err := k.call(ctxFor(t), s); status.Code(err) != want {
						t.Fatalf("anonymous call %d: %v, want %v", i, err, want)
					}
				}
				if c.want[0] == codes.Unauthenticated {
					if err := errs.last(); !errors.Is(err, grpclimit.ErrMissingKey) || !strings.Contains(err.Error(), `"key"`) {
						t.Fatalf("the error handler got %v, want ErrMissingKey naming the policy", err)
					}
				}
				res, err := l.Peek(context.Background(), p, "anonymous")
				if err != nil {
					t.Fatal(err)
				}
				if limited := res.Remaining < 2; limited != c.limited {
					t.Fatalf("the fallback key has %d left: charged %v, want %v", res.Remaining, limited, c.limited)
				}
				if err := k.call(withMD(ctxFor(t), "x-api-key", "alice"), s); err != nil {
					t.Fatalf("a call with a key: %v", err)
				}
				if res, err := l.Peek(context.Background(), p, "alice"); err != nil || res.Remaining != 1 {
					t.Fatalf("alice's key: %+v, %v; want 1 left", res, err)
				}
			})
		}
	}
}

// TestMissingKeyDimensions: the choice is every dimension's, and a refusal
// comes before any dimension decides, so it charges none.
func TestMissingKeyDimensions(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(10))
	perKey := newPolicy(t, "key", ratelease.PerMinute(10))
	s := serve(t, newInterceptor(t, l, perIP, grpclimit.WithMissingKey(grpclimit.DenyMissingKey),
		grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key"))).ServerOptions())
	if err := s.call(ctxFor(t)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a call without a key in the second dimension: %v, want Unauthenticated", err)
	}
	if s.echo.calls.Load() != 0 {
		t.Fatal("the handler ran for a refused call")
	}
	if res, err := l.Peek(context.Background(), perIP, "127.0.0.1"); err != nil || res.Remaining != 10 {
		t.Fatalf("the IP dimension, asked first: %+v, %v; want 10 left (nothing charged)", res, err)
	}
	// An error handler that returns nil lets the call through, undecided.
	through := grpclimit.WithErrorHandler(func(_ context.Context, _ grpclimit.Call, err error) error {
		if !errors.Is(err, grpclimit.ErrMissingKey) {
			return err
		}
		return nil
	})
	s = serve(t, newInterceptor(t, l, perIP, grpclimit.WithMissingKey(grpclimit.DenyMissingKey), through,
		grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key"))).ServerOptions())
	if err := s.call(ctxFor(t)); err != nil || s.echo.calls.Load() != 1 {
		t.Fatalf("an error handler returning nil: %v, handler ran %d times", err, s.echo.calls.Load())
	}
	if res, err := l.Peek(context.Background(), perIP, "127.0.0.1"); err != nil || res.Remaining != 10 {
		t.Fatalf("the IP dimension after a call let through: %+v, %v; want 10 left", res, err)
	}
}

// TestMissingKeyClient: UnaryClientInterceptor does not retry a call
// refused for want of a key: it would fail again, so the refusal carries
// no retry hint.
func TestMissingKeyClient(t *testing.T) {
	retry, err := grpclimit.UnaryClientInterceptor(grpclimit.WithMaxRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "key", ratelease.PerMinute(1))
	var attempts atomic.Int64
	count := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		attempts.Add(1)
		return h(ctx, req)
	})
	lim := newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.Metadata("x-api-key")), grpclimit.WithMissingKey(grpclimit.DenyMissingKey))
	s := serve(t, append([]grpc.ServerOption{count}, lim.ServerOptions()...), grpc.WithChainUnaryInterceptor(retry))
	err = s.call(ctxFor(t))
	if status.Code(err) != codes.Unauthenticated || attempts.Load() != 1 {
		t.Fatalf("an anonymous call through the client interceptor: %v after %d attempts, want Unauthenticated after 1", err, attempts.Load())
	}
	if _, ok := grpclimit.RetryDelay(err); ok {
		t.Fatal("a missing key's refusal carries a retry hint")
	}
}

// TestFallbackKeyTooLong: a fallback key no Limiter would take is an
// option error, from New.
func TestFallbackKeyTooLong(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "key", ratelease.PerMinute(1))
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)
	if _, err := grpclimit.New(l, p, grpclimit.WithMissingKey(grpclimit.FallbackKey(long))); !errors.Is(err, grpclimit.ErrInvalidOption) {
		t.Fatalf("FallbackKey of %d bytes: %v, want ErrInvalidOption", len(long), err)
	}
	if _, err := grpclimit.New(l, p, grpclimit.WithMissingKey(grpclimit.FallbackKey(long[:ratelease.MaxKeyLen]))); err != nil {
		t.Fatalf("FallbackKey of MaxKeyLen bytes: %v", err)
	}
}
