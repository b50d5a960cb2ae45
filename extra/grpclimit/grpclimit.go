package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// ErrNoLimiter: New was given a nil Limiter.
var ErrNoLimiter = errors.New("grpclimit: nil Limiter")

// ErrNoPolicy: a nil policy, for New, WithMethod or WithDimension.
var ErrNoPolicy = errors.New("grpclimit: nil policy")

// ErrInvalidOption: an option whose value cannot work: a method name that
// is not "/package.Service/Method" or "/package.Service/*", a method given
// twice to WithMethod or to both WithMethod and WithExempt, a nil handler,
// a header style that does not exist, a FallbackKey longer than
// ratelease.MaxKeyLen; for UnaryClientInterceptor, a negative
// WithMaxRetries or a WithMaxWait that is not positive.
var ErrInvalidOption = errors.New("grpclimit: invalid option")

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

// Interceptor limits the calls of a gRPC server: Unary and Stream return
// its interceptors, which share its configuration. Make it with New; it
// is safe for concurrent use.
type Interceptor struct {
	l *ratelease.Limiter
	c *config
}

// New returns an Interceptor that limits each call under p (or under the
// method's policy, WithMethod), keyed by WithKey's function (the client IP
// by default), and under any further WithDimension. An admitted call goes
// on to its handler; a denied one gets codes.ResourceExhausted
// (WithDeniedHandler); a limiter error goes to the error handler
// (WithErrorHandler): with a FailClosed Limiter and Redis down, that is
// codes.Unavailable. Every response carries the rate-limit metadata
// (WithHeaders).
//
// A policy in shadow mode (Policy.Shadow) never denies a call: its
// would-be denial is admitted (Result.Shadowed), and the metadata report
// it as they report any admission; it charged nothing, so nothing is
// refunded for it when a later dimension denies.
//
// Errors, all at once here: ErrNoLimiter, ErrNoPolicy (New's, a
// WithMethod's or a WithDimension's), ErrInvalidOption.
func New(l *ratelease.Limiter, p *ratelease.Policy, opts ...Option) (*Interceptor, error) {
	c := &config{
		styles:  AllHeaders,
		denied:  DefaultDeniedHandler,
		onError: DefaultErrorHandler,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if l == nil {
		return nil, ErrNoLimiter
	}
	if err := c.build(p); err != nil {
		return nil, err
	}
	return &Interceptor{l: l, c: c}, nil
}

// Unary returns the unary server interceptor:
// grpc.ChainUnaryInterceptor(i.Unary()).
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := i.decide(ctx, Call{FullMethod: info.FullMethod, Request: req}, unaryStream{ctx}); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream returns the stream server interceptor:
// grpc.ChainStreamInterceptor(i.Stream()). A stream is one call, decided
// and charged once, when it opens; to limit its messages, call the
// Limiter per message in the handler.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := i.decide(ss.Context(), Call{FullMethod: info.FullMethod}, ss); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions returns both interceptors as server options:
// grpc.NewServer(i.ServerOptions()...). They chain after any interceptor
// given before them.
func (i *Interceptor) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(i.Unary()), grpc.ChainStreamInterceptor(i.Stream())}
}

type config struct {
	key     KeyFunc
	missing MissingKey
	own     *dimension            // New's policy
	methods map[string]*dimension // a method's own policy, by full method
	svcs    map[string]*dimension // a service's policy, by "/package.Service/"
	exempt  map[string]bool       // full methods and "/package.Service/"
	extra   []dimension           // WithDimension's
	cost    func(context.Context, Call) int
	styles  HeaderStyle
	denied  func(context.Context, Denial) error
	onError func(context.Context, Call, error) error

	routes                []route  // WithMethod's, until build
	exempts               []string // WithExempt's, until build
	deniedSet, onErrorSet bool     // a handler was given (nil is then an error)
}

// route is one WithMethod.
type route struct {
	pattern string
	policy  *ratelease.Policy
}

// dimension is one policy and the key that calls have under it; fields
// describes the policy for the rate-limit fields (made by build).
type dimension struct {
	policy *ratelease.Policy
	key    KeyFunc
	fields *httplimit.Dimension
}

// describe makes d's fields; its policy is not nil.
func (d *dimension) describe() {
	d.fields, _ = httplimit.NewDimension(d.policy) // only a nil policy fails
}

// build validates c's options with New's policy p and compiles them.
func (c *config) build(p *ratelease.Policy) error {
	if p == nil {
		return fmt.Errorf("%w: New's", ErrNoPolicy)
	}
	if c.key == nil {
		c.key = ClientIP()
	}
	if c.denied == nil && c.deniedSet || c.onError == nil && c.onErrorSet {
		return fmt.Errorf("%w: a nil handler", ErrInvalidOption)
	}
	if c.styles&^AllHeaders != 0 {
		return fmt.Errorf("%w: header style %#x", ErrInvalidOption, uint8(c.styles))
	}
	if len(c.missing.fallback) > ratelease.MaxKeyLen {
		return fmt.Errorf("%w: FallbackKey of %d bytes, more than %d", ErrInvalidOption, len(c.missing.fallback), ratelease.MaxKeyLen)
	}
	c.own = &dimension{policy: p, key: c.key}
	c.own.describe()
	c.methods, c.svcs, c.exempt = map[string]*dimension{}, map[string]*dimension{}, map[string]bool{}
	for _, m := range c.exempts {
		k, err := methodPattern("WithExempt", m)
		if err != nil {
			return err
		}
		c.exempt[k] = true
	}
	for _, r := range c.routes {
		k, err := methodPattern("WithMethod", r.pattern)
		if err != nil {
			return err
		}
		if r.policy == nil {
			return fmt.Errorf("%w: WithMethod %q", ErrNoPolicy, r.pattern)
		}
		if c.methods[k] != nil || c.svcs[k] != nil || c.exempt[k] {
			return fmt.Errorf("%w: WithMethod %q given twice, or also to WithExempt", ErrInvalidOption, r.pattern)
		}
		d := &dimension{policy: r.policy, key: c.key}
		d.describe()
		if strings.HasSuffix(k, "/") {
			c.svcs[k] = d
		} else {
			c.methods[k] = d
		}
	}
	for i := range c.extra {
		d := &c.extra[i]
		if d.policy == nil {
			return fmt.Errorf("%w: WithDimension %d", ErrNoPolicy, i+1)
		}
		if d.key == nil {
			d.key = ClientIP()
		}
		d.describe()
	}
	return nil
}

// methodPattern checks a method name given to opt: "/package.Service/Method"
// (returned as it is) or "/package.Service/*" (returned as
// "/package.Service/").
func methodPattern(opt, s string) (string, error) {
	i := strings.LastIndexByte(s, '/')
	if len(s) < 4 || s[0] != '/' || i <= 1 || i == len(s)-1 || strings.IndexByte(s[1:i], '/') >= 0 {
		return "", fmt.Errorf("%w: %s %q: not /package.Service/Method or /package.Service/*", ErrInvalidOption, opt, s)
	}
	if s[i+1:] == "*" {
		return s[:i+1], nil
	}
	return s, nil
}

// policyFor returns the dimension of method's own policy, or nil when the
// method is exempt.
func (c *config) policyFor(method string) *dimension {
	if c.exempt[method] {
		return nil
	}
	if d := c.methods[method]; d != nil {
		return d
	}
	svc := method
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		svc = method[:i+1]
	}
	if c.exempt[svc] {
		return nil
	}
	if d := c.svcs[svc]; d != nil {
		return d
	}
	return c.own
}

// sender sends a call's response metadata: a ServerStream, or unaryStream.
type sender interface {
	SetHeader(metadata.MD) error
	SetTrailer(metadata.MD)
}

// unaryStream sends a unary call's metadata through its context.
type unaryStream struct{ ctx context.Context }

func (u unaryStream) SetHeader(md metadata.MD) error { return grpc.SetHeader(u.ctx, md) }
func (u unaryStream) SetTrailer(md metadata.MD)      { _ = grpc.SetTrailer(u.ctx, md) }

// decide decides call under every dimension that applies to it, sends the
// rate-limit metadata through s (an admission's in the header, a denial's
// in the trailer), and returns the error that ends the call
// (nil: it goes on).
func (i *Interceptor) decide(ctx context.Context, call Call, s sender) error {
	c := i.c
	own := c.policyFor(call.FullMethod)
	if own == nil {
		return nil
	}
	cost := 1
	if c.cost != nil {
		if cost = c.cost(ctx, call); cost < 1 {
			return c.onError(ctx, call, fmt.Errorf("%w: WithCost's function returned %d for %s", ratelease.ErrInvalidN, cost, call.FullMethod))
		}
	}
	// The dimensions that apply (a key, or WithMissingKey's fallback), all
	// of them named in ratelimit-policy on every response, decided in
	// order until one denies: each decision is made in place, in as[:n].
	// No allocation for up to four. Every key is read before any decision,
	// so that DenyMissingKey refuses a call before anything is charged.
	var pending [4]httplimit.Decision
	var dims [4]*httplimit.Dimension
	as, applying := pending[:0], dims[:0]
	for j := -1; j < len(c.extra); j++ {
		d := own
		if j >= 0 {
			d = &c.extra[j]
		}
		key, deny := c.missing.key(d.key(ctx, call))
		switch {
		case deny:
			return c.onError(ctx, call, fmt.Errorf("%w: %s under policy %q", ErrMissingKey, call.FullMethod, d.policy.Name()))
		case key == "":
			continue
		}
		as = append(as, httplimit.Decision{Dimension: d.fields, Key: key})
		applying = append(applying, d.fields)
	}
	if len(as) == 0 {
		return nil
	}
	n := 0
	for n < len(as) {
		d := &as[n]
		res, err := i.l.AllowN(ctx, d.Dimension.Policy(), d.Key, cost)
		if err != nil {
			err = c.onError(ctx, call, err)
			if err != nil { // the call ends: it costs the dimensions that admitted it nothing
				httplimit.Refund(ctx, i.l, as[:n], cost)
			}
			return err
		}
		d.Result = res
		n++
		if !res.Allowed {
			httplimit.Refund(ctx, i.l, as[:n-1], cost)
			break
		}
	}
	ds := as[:n]
	var now time.Time // read only for x-ratelimit-reset, on the Limiter's clock
	if c.styles&XRateLimitHeaders != 0 {
		now = i.l.Clock().Now()
	}
	f := c.styles.http().Fields(applying, ds, now)
	md := make(metadata.MD, 6)
	c.styles.write(md, &f)
	tightest := httplimit.Tightest(ds)
	if tightest.Result.Allowed {
		if len(md) > 0 {
			_ = s.SetHeader(md)
		}
		return nil
	}
	// A denial's fields go in the trailer, with no header metadata: a
	// Trailers-Only response, which gRPC's own retry policy may retry (it
	// never retries a call whose server sent headers).
	res := tightest.Result
	md[mdRetryAfter] = []string{f.RetryAfter}
	md[mdPushback] = []string{strconv.FormatInt(int64((res.RetryAfter+time.Millisecond-1)/time.Millisecond), 10)}
	s.SetTrailer(md)
	return c.denied(ctx, Denial{
		Call:      call,
		Policy:    tightest.Dimension.Policy(),
		Key:       tightest.Key,
		LimitName: tightest.Dimension.LimitName(res.Limit),
		Result:    res,
	})
}
