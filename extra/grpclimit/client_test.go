package grpclimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

// count returns the number of denials recorded.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.denials)
}

// retrier returns a client interceptor made with opts.
func retrier(t *testing.T, opts ...grpclimit.ClientOption) grpc.DialOption {
	t.Helper()
	i, err := grpclimit.UnaryClientInterceptor(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.WithChainUnaryInterceptor(i)
}

// TestClientRetries runs the client interceptor against a real server
// whose Limiter's Redis shows the real time: one call a second per key,
// so that the second call of a key is denied for about a second.
func TestClientRetries(t *testing.T) {
	l := limiterOn(t, startMini(t, true).Addr(), ratelease.WithExact(), ratelease.WithRedisTimeout(2*time.Second))
	p := newPolicy(t, "persec", ratelease.PerSecond(1))
	var rec recorder
	s := serve(t, newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.Metadata("x-api-key")), rec.handler()).ServerOptions())

	// twice calls twice with key through conn (the first call must pass)
	// and returns the second call's duration, the denials it met, and its
	// error.
	twice := func(ctx context.Context, conn *grpc.ClientConn, key string) (time.Duration, int, error) {
		t.Helper()
		ctx = withMD(ctx, "x-api-key", key)
		if err := echoOn(ctx, conn); err != nil {
			t.Fatalf("key %s, first call: %v", key, err)
		}
		before := rec.count()
		start := time.Now()
		err := echoOn(ctx, conn)
		return time.Since(start), rec.count() - before, err
	}

	t.Run("waits for the hint and retries", func(t *testing.T) {
		conn := s.dial(t, retrier(t))
		handled := s.echo.calls.Load()
		took, denials, err := twice(ctxFor(t), conn, "a")
		if err != nil || denials != 1 {
			t.Fatalf("second call: %v after %d denials, want success after one", err, denials)
		}
		if hint := rec.last(t).Result.RetryAfter; hint < 500*time.Millisecond || took < hint {
			t.Errorf("the call took %v, the hint was %v: want a hint of most of a second, and a wait of it", took, hint)
		}
		if got := s.echo.calls.Load() - handled; got != 2 {
			t.Errorf("the handler ran %d times for two calls", got)
		}
	})
	t.Run("a client without it is denied", func(t *testing.T) {
		_, _, err := twice(ctxFor(t), s.dial(t), "b")
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("second call: %v, want ResourceExhausted", err)
		}
	})
	// Each bound returns the denial at once: well within the hint of
	// about a second that waiting would take.
	for _, c := range []struct {
		name     string
		key      string
		opts     []grpclimit.ClientOption
		deadline time.Duration
	}{
		{"no retries", "c", []grpclimit.ClientOption{grpclimit.WithMaxRetries(0)}, 0},
		{"a hint past the max wait", "d", []grpclimit.ClientOption{grpclimit.WithMaxWait(100 * time.Millisecond)}, 0},
		{"a hint past the deadline", "e", nil, 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ctxFor(t)
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			took, denials, err := twice(ctx, s.dial(t, retrier(t, c.opts...)), c.key)
			if status.Code(err) != codes.ResourceExhausted || denials != 1 {
				t.Errorf("second call: %v after %d denials, want ResourceExhausted after one", err, denials)
			}
			if hint := rec.last(t).Result.RetryAfter; took >= hint {
				t.Errorf("the call took %v, the hint was %v: it waited", took, hint)
			}
		})
	}
	t.Run("a context cancelled during the wait", func(t *testing.T) {
		conn := s.dial(t, retrier(t))
		ctx, cancel := context.WithCancel(ctxFor(t))
		defer cancel()
		ctx = withMD(ctx, "x-api-key", "f")
		if err := echoOn(ctx, conn); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := echoOn(ctx, conn)
		if status.Code(err) != codes.Canceled || time.Since(start) >= rec.last(t).Result.RetryAfter {
			t.Errorf("second call: %v after %v, want Canceled before the hint %v", err, time.Since(start), rec.last(t).Result.RetryAfter)
		}
	})
}

// TestClientNoHint: a ResourceExhausted without RetryInfo is not retried.
func TestClientNoHint(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(1))
	var denials atomic.Int64
	plain := grpclimit.WithDeniedHandler(func(context.Context, grpclimit.Denial) error {
		denials.Add(1)
		return status.Error(codes.ResourceExhausted, "no hint")
	})
	s := serve(t, newInterceptor(t, l, p, plain).ServerOptions(), retrier(t))
	if err := s.call(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.call(ctxFor(t)); status.Code(err) != codes.ResourceExhausted || denials.Load() != 1 {
		t.Errorf("%v after %d denials, want ResourceExhausted after one", err, denials.Load())
	}
}

// TestGRPCRetryPolicyPushback: gRPC's own retry policy, with
// RESOURCE_EXHAUSTED retryable and a backoff of 10ms, waits as long as the
// grpc-retry-pushback-ms trailer says: without it the retry would come too
// early and be denied too.
func TestGRPCRetryPolicyPushback(t *testing.T) {
	l := limiterOn(t, startMini(t, true).Addr(), ratelease.WithExact(), ratelease.WithRedisTimeout(2*time.Second))
	p := newPolicy(t, "persec", ratelease.PerSecond(1))
	var rec recorder
	s := serve(t, newInterceptor(t, l, p, rec.handler()).ServerOptions(), grpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "test.Echo"}],
		"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	if err := s.call(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.call(ctxFor(t)); err != nil || rec.count() != 1 {
		t.Fatalf("second call: %v after %d denials, want success after one", err, rec.count())
	}
	if took, hint := time.Since(start), rec.last(t).Result.RetryAfter; took < hint {
		t.Errorf("the call took %v, the pushback was %v", took, hint)
	}
}

// hinted is a ResourceExhausted error with a RetryInfo of d.
func hinted(t *testing.T, d *durationpb.Duration) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// TestClientBounds: the retries and the total wait are bounded, counted
// with an invoker that is always denied.
func TestClientBounds(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     []grpclimit.ClientOption
		hint     time.Duration
		attempts int
	}{
		{"default retries", nil, 0, 1 + grpclimit.DefaultMaxRetries},
		{"max retries", []grpclimit.ClientOption{grpclimit.WithMaxRetries(5)}, time.Millisecond, 6},
		// Waits of 30ms add up to 90ms within 100ms; the fourth would pass it.
		{"max wait", []grpclimit.ClientOption{grpclimit.WithMaxRetries(10), grpclimit.WithMaxWait(100 * time.Millisecond)}, 30 * time.Millisecond, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			i, err := grpclimit.UnaryClientInterceptor(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			attempts := 0
			denied := hinted(t, durationpb.New(c.hint))
			invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				attempts++
				return denied
			}
			start := time.Now()
			if err := i(context.Background(), "/a.B/C", nil, nil, nil, invoker); err != denied || attempts != c.attempts {
				t.Errorf("%v after %d attempts, want the denial after %d", err, attempts, c.attempts)
			}
			if took, least := time.Since(start), time.Duration(c.attempts-1)*c.hint; took < least {
				t.Errorf("took %v, want at least %v of waits", took, least)
			}
		})
	}
	// Any other error is returned at once.
	i, _ := grpclimit.UnaryClientInterceptor()
	for _, e := range []error{errors.New("plain"), status.Error(codes.Unavailable, "down"), status.Error(codes.ResourceExhausted, "no hint")} {
		attempts := 0
		invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			attempts++
			return e
		}
		if err := i(context.Background(), "/a.B/C", nil, nil, nil, invoker); err != e || attempts != 1 {
			t.Errorf("%v: %v after %d attempts", e, err, attempts)
		}
	}
}

func TestClientOptions(t *testing.T) {
	for _, opts := range [][]grpclimit.ClientOption{
		{grpclimit.WithMaxRetries(-1)},
		{grpclimit.WithMaxWait(0)},
		{grpclimit.WithMaxWait(-time.Second)},
	} {
		if i, err := grpclimit.UnaryClientInterceptor(opts...); !errors.Is(err, grpclimit.ErrInvalidOption) || i != nil {
			t.Errorf("%v, want ErrInvalidOption", err)
		}
	}
	if _, err := grpclimit.UnaryClientInterceptor(grpclimit.WithMaxRetries(0), nil, grpclimit.WithMaxWait(time.Nanosecond)); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want time.Duration
		ok   bool
	}{
		{"a hint", hinted(t, durationpb.New(1500*time.Millisecond)), 1500 * time.Millisecond, true},
		{"a hint of 0", hinted(t, durationpb.New(0)), 0, true},
		{"a negative hint", hinted(t, durationpb.New(-time.Second)), 0, true},
		{"an invalid hint", hinted(t, &durationpb.Duration{Seconds: 1, Nanos: -5}), 0, false},
		{"no delay", hinted(t, nil), 0, false},
		{"no details", status.Error(codes.ResourceExhausted, "x"), 0, false},
		{"another code", status.Error(codes.Unavailable, "x"), 0, false},
		{"not a status", errors.New("x"), 0, false},
		{"nil", nil, 0, false},
	} {
		if got, ok := grpclimit.RetryDelay(c.err); got != c.want || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
