package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
