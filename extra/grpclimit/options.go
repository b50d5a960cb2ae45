package grpclimit

import (
	"context"
	"errors"
	"log"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelease/ratelease"
)

// Option configures an Interceptor (New).
type Option interface{ apply(*config) }

// optionFunc is an Option of a function.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithKey sets the key of the Interceptor's own policy and of every
// WithMethod policy. The default (and what a nil key means, here and in
// WithDimension) is ClientIP(), with no trusted proxies. A call the key
// function gives no key for is WithMissingKey's.
func WithKey(key KeyFunc) Option { return optionFunc(func(c *config) { c.key = key }) }

// WithMethod limits the calls of a method under p instead of New's policy,
// keyed by WithKey's function: "/package.Service/Method" for one method,
// "/package.Service/*" for every method of a service that has no
// WithMethod of its own. Methods with no WithMethod get New's policy, the
// default. A method given twice, or a name of neither form, is
// ErrInvalidOption from New.
func WithMethod(fullMethod string, p *ratelease.Policy) Option {
	return optionFunc(func(c *config) { c.routes = append(c.routes, route{pattern: fullMethod, policy: p}) })
}

// WithExempt exempts methods from every limit of the Interceptor: calls of
// them are neither decided nor charged, and get no rate-limit metadata
// (health checks and reflection, say). Each is "/package.Service/Method"
// or "/package.Service/*", as for WithMethod.
func WithExempt(fullMethods ...string) Option {
	return optionFunc(func(c *config) { c.exempts = append(c.exempts, fullMethods...) })
}

// WithDimension limits calls under p too, keyed by key: per API key and
// per client IP at once, say. Every dimension that applies to a call must
// admit it; the most restrictive one (a denying one, or else the one with
// the fewest units left) fills the x-ratelimit metadata. Dimensions are
// asked in order (the Interceptor's own policy, or the method's, first)
// and the first denial ends the call; the units that earlier dimensions
// charged for it are given back (Limiter.Refund), so a denied call costs
// no dimension anything and the order of dimensions does not change who
// pays. (A refund Redis cannot take is dropped: those units stay spent.)
//
// Keys of different dimensions never meet, as long as the dimensions have
// different policies.
func WithDimension(p *ratelease.Policy, key KeyFunc) Option {
	return optionFunc(func(c *config) { c.extra = append(c.extra, dimension{policy: p, key: key}) })
}

// WithCost sets the units each call costs (a batch request's size, say);
// the default is 1. A stream costs its units once, when it opens. A cost
// below 1 is an error (ratelease.ErrInvalidN: codes.Internal with the
// default error handler), a cost no limit could ever admit is
// ratelease.ErrExceedsCapacity (codes.InvalidArgument).
func WithCost(cost func(ctx context.Context, c Call) int) Option {
	return optionFunc(func(c *config) { c.cost = cost })
}

// WithHeaders picks the rate-limit metadata sent on every response;
// AllHeaders by default. An admitted call's are in its header metadata; a
// denied call's are in its trailer metadata (grpc.Trailer, ClientStream's
// Trailer), with no header metadata: a Trailers-Only response, the one
// kind that gRPC's own retry policy retries. A denial's trailer carries
// retry-after (in whole seconds, rounded up, as HTTP's Retry-After) and
// grpc-retry-pushback-ms (in milliseconds, for that retry policy) whatever
// the styles. (An interceptor before this one that sends header metadata
// on a denial makes it a response with headers, which gRPC does not retry.)
func WithHeaders(styles HeaderStyle) Option { return optionFunc(func(c *config) { c.styles = styles }) }

// WithDeniedHandler sets what a denied call returns, called after its
// trailer metadata is set; DefaultDeniedHandler by default. A non-nil
// error is the
// call's error (make it with the status package); nil lets the call go on
// to its handler, uncharged (a dimension that denies charges nothing, and
// the earlier ones were refunded).
func WithDeniedHandler(h func(ctx context.Context, d Denial) error) Option {
	return optionFunc(func(c *config) { c.denied = h; c.deniedSet = true })
}

// WithErrorHandler sets what happens when the limiter returns an error;
// DefaultErrorHandler by default. A non-nil error is the call's error,
// and the units that dimensions decided before the error charged for the
// call are refunded; nil lets the call go on to its handler, undecided by
// the dimensions after the error (fail open for this call).
func WithErrorHandler(h func(ctx context.Context, c Call, err error) error) Option {
	return optionFunc(func(c *config) { c.onError = h; c.onErrorSet = true })
}

// Denial is what a denied handler is told of a denied call.
type Denial struct {
	Call
	// Policy is the policy of the dimension that denied the call.
	Policy *ratelease.Policy
	// Key is the call's key under Policy.
	Key string
	// LimitName names the deciding limit as the ratelimit metadata do:
	// the policy's name, or for a policy of several limits the name and
	// the limit's period ("api-1m").
	LimitName string
	// Result is the denying decision: RetryAfter says when the call could
	// next be admitted.
	Result ratelease.Result
}

// DefaultDeniedHandler answers a denied call with codes.ResourceExhausted,
// and the details a client can act on:
//
//   - errdetails.RetryInfo, whose RetryDelay is the Result's RetryAfter
//     (UnaryClientInterceptor waits for it and retries);
//   - errdetails.QuotaFailure, with one violation: Subject the policy's
//     name, QuotaId the deciding limit's name (d.LimitName), QuotaValue its
//     Rate, and a Description that says the limit ("rate limit exceeded: 3
//     req/min (burst 3)"), or that the key is blocked (Limiter.Block).
//
// The key is not in the details: it may be a credential.
func DefaultDeniedHandler(_ context.Context, d Denial) error {
	st := status.New(codes.ResourceExhausted, "rate limit exceeded; retry in "+d.Result.RetryAfter.String())
	v := &errdetails.QuotaFailure_Violation{
		QuotaId:     d.LimitName,
		QuotaValue:  int64(d.Result.Limit.Rate),
		Description: "rate limit exceeded: " + d.Result.Limit.String(),
	}
	if d.Policy != nil {
		v.Subject = d.Policy.Name()
	}
	if d.Result.Blocked {
		v.Description = "blocked"
	}
	detailed, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(d.Result.RetryAfter)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}},
	)
	if err != nil { // cannot happen: both details marshal
		return st.Err()
	}
	return detailed.Err()
}

// DefaultErrorHandler answers a limiter error, as httplimit's does with
// HTTP statuses:
//
//   - ratelease.ErrUnavailable (Redis is down, or slower than the
//     Limiter's Redis timeout, and the Limiter's mode is FailClosed) and
//     ratelease.ErrClosed: codes.Unavailable;
//   - ErrMissingKey (a call without a key, under DenyMissingKey):
//     codes.Unauthenticated, as httplimit answers 401;
//   - ratelease.ErrInvalidKey (a key longer than MaxKeyLen, from metadata
//     say) and ratelease.ErrExceedsCapacity (a cost no limit can admit):
//     codes.InvalidArgument;
//   - the call's context ended: codes.Canceled or codes.DeadlineExceeded;
//   - anything else (a cost below 1): codes.Internal, and a log line, since
//     it is a mistake in the program.
func DefaultErrorHandler(_ context.Context, c Call, err error) error {
	switch {
	// First: ErrUnavailable wraps its cause, which may be the deadline of
	// the Limiter's own Redis timeout.
	case errors.Is(err, ratelease.ErrUnavailable), errors.Is(err, ratelease.ErrClosed):
		return status.Error(codes.Unavailable, "rate limiter unavailable")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, ErrMissingKey):
		return status.Error(codes.Unauthenticated, "a key is required")
	case errors.Is(err, ratelease.ErrInvalidKey), errors.Is(err, ratelease.ErrExceedsCapacity):
		return status.Error(codes.InvalidArgument, "call cannot be rate limited: "+err.Error())
	default:
		log.Printf("grpclimit: %s: %v", c.FullMethod, err)
		return status.Error(codes.Internal, "rate limiter error")
	}
}
