package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/ratelease/ratelease"
)

// ErrNoLimiter is the error a middleware made with a nil Limiter hands its
// error handler for every request; New returns it at once.
var ErrNoLimiter = errors.New("httplimit: nil Limiter")

// ErrNoPolicy: a nil policy, for Middleware or a WithDimension; New
// returns it at once.
var ErrNoPolicy = errors.New("httplimit: nil policy")

// KeyFunc returns the key that a request is limited by under one policy.
// An empty key means that the policy does not apply to the request (an
// anonymous request under a per-API-key policy, say).
type KeyFunc func(r *http.Request) string

// Header returns a KeyFunc that keys requests by the value of the named
// header (an API key, say). A request without it has no key under that
// dimension: see WithMissingKey for what happens then. A value longer than ratelease.MaxKeyLen is an error
// (ratelease.ErrInvalidKey: 400 with the default error handler).
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// Option configures a Middleware.
type Option interface{ apply(*config) }

// optionFunc is an Option of a function.
type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// ErrMissingKey is the error a request gets, under DenyMissingKey, when a
// dimension has no key for it (401 Unauthorized with the default error
// handler).
var ErrMissingKey = errors.New("httplimit: no key for the request")

// MissingKey is what a dimension does with a request its KeyFunc gives no
// key for (an anonymous request under a per-API-key policy, say): see
// WithMissingKey.
type MissingKey struct {
	deny     bool
	fallback string
}

// key returns the key to use for a request whose KeyFunc gave key: key
// itself, or for an empty one the fallback ("" when none: the request is
// not limited there), or deny when m refuses it.
func (m MissingKey) key(key string) (k string, deny bool) {
	if key != "" {
		return key, false
	}
	return m.fallback, m.deny
}

var (
	// DenyMissingKey refuses the request: the error handler gets
	// ErrMissingKey (401 Unauthorized by default). The safe choice for a
	// service whose every client must be limited.
	DenyMissingKey = MissingKey{deny: true}
	// PassMissingKey lets the request through, not limited by the
	// dimension (other dimensions still apply). The default.
	PassMissingKey = MissingKey{}
)

// FallbackKey limits every request without a key under the dimension by
// one key shared by all of them: anonymous clients share one budget.
func FallbackKey(key string) MissingKey { return MissingKey{fallback: key} }

// WithMissingKey sets what every dimension does with a request its KeyFunc
// gives no key for: DenyMissingKey, FallbackKey(k), or PassMissingKey (the
// default).
func WithMissingKey(m MissingKey) Option { return optionFunc(func(c *config) { c.missing = m }) }

// WithKey sets the key of the Middleware's own policy. The default (and
// what a nil key means, here and in WithDimension) is ClientIP(), with no
// trusted proxies.
func WithKey(key KeyFunc) Option { return optionFunc(func(c *config) { c.dims[0].key = key }) }

// WithDimension limits requests under p too, keyed by key: per API key and
// per IP at once, say. Every dimension that applies to a request must admit
// it; the most restrictive one (a denying one, or else the one with the
// fewest units left) fills the X-RateLimit headers. Dimensions are asked in
// order (the Middleware's own policy first) and the first denial, or error,
// ends the request; the units that earlier dimensions charged for it are given back
// (Limiter.Refund), so a denied request costs no dimension anything and the
// order of dimensions does not change who pays. (A refund Redis cannot take
// is dropped: those units stay spent.)
//
// Keys of different dimensions never meet, as long as the dimensions have
// different policies.
func WithDimension(p *ratelease.Policy, key KeyFunc) Option {
	return optionFunc(func(c *config) { c.dims = append(c.dims, dimension{Dimension: Dimension{policy: p}, key: key}) })
}

// WithCost sets the units each request costs (a GraphQL query's
// complexity, say); the default is 1. A cost below 1 is an error
// (ratelease.ErrInvalidN: 500 with the default error handler), a cost no
// limit could ever admit is ratelease.ErrExceedsCapacity (400).
func WithCost(cost func(r *http.Request) int) Option {
	return optionFunc(func(c *config) { c.cost = cost })
}

// WithHeaders picks the rate-limit headers sent on every response;
// AllHeaders by default. Retry-After is sent on every 429 whatever the
// styles.
func WithHeaders(styles HeaderStyle) Option { return optionFunc(func(c *config) { c.styles = styles }) }

// WithDeniedHandler sets the handler of a denied request, called after the
// headers (Retry-After included) are set. ResultFrom gives it the deciding
// Result. The default writes 429 Too Many Requests with a one-line body.
func WithDeniedHandler(h http.Handler) Option { return optionFunc(func(c *config) { c.denied = h }) }

// WithErrorHandler sets what happens when the limiter returns an error;
// DefaultErrorHandler by default.
func WithErrorHandler(h func(w http.ResponseWriter, r *http.Request, err error)) Option {
	return optionFunc(func(c *config) { c.onError = h })
}

// DefaultErrorHandler answers a limiter error:
//
//   - ratelease.ErrUnavailable (Redis is down and the Limiter's mode is
//     FailClosed), ratelease.ErrClosed, a deadline: 503 Service Unavailable;
//   - ErrMissingKey (a request without a key, under DenyMissingKey): 401
//     Unauthorized;
//   - ratelease.ErrInvalidKey (a key longer than MaxKeyLen, from a header
//     say) and ratelease.ErrExceedsCapacity (a cost no limit can admit): 400
//     Bad Request;
//   - the request's context cancelled (the client left): nothing is written;
//   - anything else (a nil Limiter or policy, a cost below 1): 500.
func DefaultErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, context.Canceled):
	case errors.Is(err, ratelease.ErrUnavailable), errors.Is(err, ratelease.ErrClosed),
		errors.Is(err, context.DeadlineExceeded):
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
	case errors.Is(err, ErrMissingKey):
		http.Error(w, "a key is required", http.StatusUnauthorized)
	case errors.Is(err, ratelease.ErrInvalidKey), errors.Is(err, ratelease.ErrExceedsCapacity):
		http.Error(w, "request cannot be rate limited: "+err.Error(), http.StatusBadRequest)
	default:
		// A mistake in the program (a nil Limiter or policy, a cost below
		// 1): said in the log, since the client only sees 500.
		log.Printf("httplimit: %s %s: %v", r.Method, r.URL.Path, err)
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
	}
}

// deniedResponse is the default denied handler.
func deniedResponse(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
}

type config struct {
	missing MissingKey
	dims    []dimension
	cost    func(*http.Request) int
	styles  HeaderStyle
	denied  http.Handler
	onError func(http.ResponseWriter, *http.Request, error)
}

// dimension is one policy, described for the headers, and the key that
// requests have under it.
type dimension struct {
	Dimension
	key KeyFunc
}

// New returns middleware that limits each request under p, keyed by
// WithKey's function (the client IP by default), and under any further
// WithDimension. An admitted request goes on to the next handler; a denied
// one gets 429 (WithDeniedHandler); a limiter error goes to the error
// handler (WithErrorHandler). A policy in shadow mode (Policy.Shadow) never
// denies a request: its would-be denial is admitted (Result.Shadowed), and
// the headers report it as they report any admission, with what the policy
// would decide (Remaining 0, say); it charged nothing, so nothing is
// refunded for it when a later dimension denies. A nil Limiter or policy
// is an error here, where the middleware is built (ErrNoLimiter,
// ErrNoPolicy).
func New(l *ratelease.Limiter, p *ratelease.Policy, opts ...Option) (func(http.Handler) http.Handler, error) {
	c := build(p, opts)
	if err := c.check(l); err != nil {
		return nil, err
	}
	return c.middleware(l), nil
}

// Middleware is New for a configuration known to be right: a nil Limiter
// or policy is logged once, here, and every request then goes to the error
// handler with the error (500 with DefaultErrorHandler).
func Middleware(l *ratelease.Limiter, p *ratelease.Policy, opts ...Option) func(http.Handler) http.Handler {
	c := build(p, opts)
	if err := c.check(l); err != nil {
		log.Printf("%v: every request will get the error handler; httplimit.New reports this as an error", err)
	}
	return c.middleware(l)
}

// check reports what makes c unusable with l.
func (c *config) check(l *ratelease.Limiter) error {
	if l == nil {
		return ErrNoLimiter
	}
	for i, d := range c.dims {
		if d.policy == nil {
			if i == 0 {
				return fmt.Errorf("%w: the Middleware's own", ErrNoPolicy)
			}
			return fmt.Errorf("%w: WithDimension %d", ErrNoPolicy, i)
		}
	}
	return nil
}

// middleware returns the handler wrapper of c on l.
func (c *config) middleware(l *ratelease.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.serve(l, next, w, r)
		})
	}
}

// build makes the configuration of p and opts.
func build(p *ratelease.Policy, opts []Option) *config {
	c := &config{
		dims:    []dimension{{Dimension: Dimension{policy: p}, key: ClientIP()}},
		styles:  AllHeaders,
		denied:  http.HandlerFunc(deniedResponse),
		onError: DefaultErrorHandler,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	for i := range c.dims {
		if c.dims[i].key == nil {
			c.dims[i].key = ClientIP()
		}
		c.dims[i].describe()
	}
	return c
}

// serve decides r under every dimension that applies to it.
func (c *config) serve(l *ratelease.Limiter, next http.Handler, w http.ResponseWriter, r *http.Request) {
	if l == nil {
		c.onError(w, r, ErrNoLimiter)
		return
	}
	cost := 1
	if c.cost != nil {
		if cost = c.cost(r); cost < 1 {
			c.onError(w, r, fmt.Errorf("%w: WithCost's function returned %d for %s %s", ratelease.ErrInvalidN, cost, r.Method, r.URL.Path))
			return
		}
	}
	// The dimensions that apply (a key), all of them named in
	// RateLimit-Policy on every response, decided in order until one
	// denies: each decision is made in place, in as[:n]. No allocation for
	// up to four.
	var pending [4]Decision
	var dims [4]*Dimension
	as, applying := pending[:0], dims[:0]
	for i := range c.dims {
		key, deny := c.missing.key(c.dims[i].key(r))
		if deny {
			c.onError(w, r, fmt.Errorf("%w: %s %s under policy %q", ErrMissingKey, r.Method, r.URL.Path, c.dims[i].policy.Name()))
			return
		}
		if key != "" {
			as = append(as, Decision{Dimension: &c.dims[i].Dimension, Key: key})
			applying = append(applying, &c.dims[i].Dimension)
		}
	}
	n := 0
	for n < len(as) {
		d := &as[n]
		res, err := l.AllowN(r.Context(), d.Dimension.policy, d.Key, cost)
		if err != nil {
			// The request ends here: what earlier dimensions admitted
			// for it goes back, as when a later one denies.
			Refund(r.Context(), l, as[:n], cost)
			c.onError(w, r, err)
			return
		}
		d.Result = res
		n++
		if !res.Allowed {
			Refund(r.Context(), l, as[:n-1], cost)
			break
		}
	}
	if n == 0 { // no dimension applies
		next.ServeHTTP(w, r)
		return
	}
	ds := as[:n]
	var now time.Time // read only for X-RateLimit-Reset, on the Limiter's clock
	if c.styles&XRateLimitHeaders != 0 {
		now = l.Clock().Now()
	}
	f := c.styles.Fields(applying, ds, now)
	c.styles.write(w.Header(), &f)
	if tightest := Tightest(ds); !tightest.Result.Allowed {
		c.denied.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, tightest.Result)))
		return
	}
	next.ServeHTTP(w, r)
}

// Refund gives back the cost that the decisions ds admitted for a request
// that a later dimension denied or failed to decide, with
// Limiter.Refund, so that a request that does not go on costs no
// dimension anything, and adds it back to each refunded decision's
// Result.Remaining, so that the headers report what the dimension has left
// after the refund. Decisions that denied, and admissions of a policy in
// shadow mode (Result.Shadowed), are skipped: nothing was charged for
// them. A refund that fails is dropped: its units stay spent, as they
// would without it, as is the refund of a nil Limiter. The middleware
// calls it; it is exported for code that decides requests of another
// protocol as the middleware does.
func Refund(ctx context.Context, l *ratelease.Limiter, ds []Decision, cost int) {
	if l == nil {
		return
	}
	for i := range ds {
		d := &ds[i]
		if d.Result.Allowed && !d.Result.Shadowed {
			if l.Refund(ctx, d.Dimension.Policy(), d.Key, cost) == nil {
				d.Result.Remaining += cost
			}
		}
	}
}

type resultKey struct{}

// ResultFrom returns the Result that denied the request, in a denied
// handler's request context.
func ResultFrom(ctx context.Context) (ratelease.Result, bool) {
	res, ok := ctx.Value(resultKey{}).(ratelease.Result)
	return res, ok
}
