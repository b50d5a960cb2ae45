package grpclimit

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The client interceptor's defaults.
const (
	// DefaultMaxRetries is how many times a denied call is retried.
	DefaultMaxRetries = 3
	// DefaultMaxWait bounds the time one call spends waiting for retries,
	// all of them together.
	DefaultMaxWait = 5 * time.Second
)

// ClientOption configures UnaryClientInterceptor.
type ClientOption interface{ apply(*clientConfig) }

// clientOptionFunc is an ClientOption of a function.
type clientOptionFunc func(*clientConfig)

func (f clientOptionFunc) apply(c *clientConfig) { f(c) }

// WithMaxRetries sets how many times a denied call is retried
// (DefaultMaxRetries by default); 0 never retries. Negative is
// ErrInvalidOption.
func WithMaxRetries(n int) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.maxRetries = n })
}

// WithMaxWait bounds the time one call spends waiting for its retries, all
// of them together (DefaultMaxWait by default): a retry hint that would
// take it past that is not waited for, and the call returns the denial at
// once. It must be positive (else ErrInvalidOption).
func WithMaxWait(d time.Duration) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.maxWait = d })
}

type clientConfig struct {
	maxRetries int
	maxWait    time.Duration
}

// UnaryClientInterceptor returns a unary client interceptor that honours a
// server's retry hint: a call that fails with codes.ResourceExhausted and
// an errdetails.RetryInfo (as an Interceptor's denial does) is made again
// after the RetryInfo's delay, up to WithMaxRetries times, as long as the
// waits of the call add up to no more than WithMaxWait and the call's
// context would not end during the wait. Otherwise, and on any other
// error, the call returns the last attempt's error at once. A context that
// ends while the call waits ends it, with codes.Canceled or
// codes.DeadlineExceeded.
//
// A denial of an Interceptor is made before the method's handler runs, so
// a retry never repeats the method's work. A server that sends RetryInfo
// with ResourceExhausted after doing some of it should not be called
// through this interceptor.
//
// Install it with grpc.WithChainUnaryInterceptor. Invalid options are
// ErrInvalidOption.
func UnaryClientInterceptor(opts ...ClientOption) (grpc.UnaryClientInterceptor, error) {
	c := clientConfig{maxRetries: DefaultMaxRetries, maxWait: DefaultMaxWait}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.maxRetries < 0 {
		return nil, fmt.Errorf("%w: WithMaxRetries(%d)", ErrInvalidOption, c.maxRetries)
	}
	if c.maxWait <= 0 {
		return nil, fmt.Errorf("%w: WithMaxWait(%v)", ErrInvalidOption, c.maxWait)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var waited time.Duration
		for attempt := 0; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || attempt >= c.maxRetries {
				return err
			}
			delay, ok := RetryDelay(err)
			if !ok || waited+delay > c.maxWait {
				return err
			}
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < delay {
				return err
			}
			if err := sleep(ctx, delay); err != nil {
				return status.FromContextError(err).Err()
			}
			waited += delay
		}
	}, nil
}

// RetryDelay returns the retry hint of err: the delay of its
// errdetails.RetryInfo when err is a codes.ResourceExhausted status that
// has one, as an Interceptor's denials do. For stream clients, which
// UnaryClientInterceptor does not serve, and for clients that retry their
// own way.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if ri.GetRetryDelay().CheckValid() != nil {
				return 0, false
			}
			return max(0, ri.GetRetryDelay().AsDuration()), true
		}
	}
	return 0, false
}

// sleep waits for d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
