package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelease/ratelease"
)

// ErrNoConcurrency is NewInFlight's error for a nil Concurrency.
var ErrNoConcurrency = errors.New("grpclimit: no concurrency limit")

// InFlight holds a permit of a ratelease.Concurrency for each call while
// its handler runs (a stream's, while it is open): at most the limit's
// calls of a key in flight at once, across every instance. Make it with
// NewInFlight; it is safe for concurrent use.
type InFlight struct {
	l *ratelease.Limiter
	c *ratelease.Concurrency
	k *config
}

// NewInFlight returns an InFlight for c on l. The key is WithKey's (the
// client IP by default), and WithMissingKey and WithErrorHandler apply;
// the other options do not. A call that finds every permit held gets
// codes.ResourceExhausted with errdetails.RetryInfo: when the first permit
// held expires, at the latest (a release frees one sooner; the client
// interceptor waits for it and retries). A limiter error goes to the error
// handler. The permit is released when the handler returns, on a context
// of its own, within 5s; a release that fails leaves the permit to its
// TTL. Errors: ErrNoLimiter, ErrNoConcurrency.
func NewInFlight(l *ratelease.Limiter, c *ratelease.Concurrency, opts ...Option) (*InFlight, error) {
	k := &config{onError: DefaultErrorHandler}
	for _, o := range opts {
		if o != nil {
			o.apply(k)
		}
	}
	switch {
	case l == nil:
		return nil, ErrNoLimiter
	case c == nil:
		return nil, ErrNoConcurrency
	case k.onError == nil:
		return nil, fmt.Errorf("%w: a nil error handler", ErrInvalidOption)
	}
	if k.key == nil {
		k.key = ClientIP()
	}
	return &InFlight{l: l, c: c, k: k}, nil
}

// Unary returns the unary server interceptor.
func (f *InFlight) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := f.acquire(ctx, Call{FullMethod: info.FullMethod, Request: req})
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor: a stream holds its permit
// while it is open.
func (f *InFlight) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := f.acquire(ss.Context(), Call{FullMethod: info.FullMethod})
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// acquire takes a permit for call c, or says why not (the status to
// return); release gives it back.
func (f *InFlight) acquire(ctx context.Context, c Call) (release func(), err error) {
	none := func() {}
	key, deny := f.k.missing.key(f.k.key(ctx, c))
	switch {
	case deny:
		return none, f.k.onError(ctx, c, fmt.Errorf("%w: %s under concurrency limit %q", ErrMissingKey, c.FullMethod, f.c.Name()))
	case key == "":
		return none, nil
	}
	p, res, err := f.l.AcquirePermit(ctx, f.c, key)
	switch {
	case err != nil:
		return none, f.k.onError(ctx, c, err)
	case p == nil:
		st := status.New(codes.ResourceExhausted, "too many calls in flight; retry in "+res.RetryAfter.String())
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)}); err == nil {
			st = d
		}
		return none, st.Err()
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = p.Release(ctx)
	}, nil
}
