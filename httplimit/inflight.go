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

// ErrNoConcurrency is InFlight's error for a nil Concurrency.
var ErrNoConcurrency = errors.New("httplimit: no concurrency limit")

// InFlight returns middleware that holds a permit of c for each request
// while the next handler serves it: at most c.Limit() requests of a key in
// flight at once, across every instance (ratelease.Concurrency). The key
// is WithKey's (the client IP by default), and WithMissingKey,
// WithDeniedHandler and WithErrorHandler apply; the other options do not.
// A request that finds every permit held gets 429 (WithDeniedHandler) with
// Retry-After: when the first permit held expires, at the latest (a
// release frees one sooner). A limiter error goes to the error handler.
// The permit is released when the handler returns, on a context of its
// own (the request's may be over), within 5s; a release that fails leaves
// the permit to its TTL. A nil Limiter or Concurrency is logged here, and
// every request then gets the error handler.
func InFlight(l *ratelease.Limiter, c *ratelease.Concurrency, opts ...Option) func(http.Handler) http.Handler {
	cfg := build(nil, opts)
	var bad error
	switch {
	case l == nil:
		bad = ErrNoLimiter
	case c == nil:
		bad = ErrNoConcurrency
	}
	if bad != nil {
		log.Printf("%v: every request will get the error handler", bad)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if bad != nil {
				cfg.onError(w, r, bad)
				return
			}
			key, deny := cfg.missing.key(cfg.dims[0].key(r))
			switch {
			case deny:
				cfg.onError(w, r, fmt.Errorf("%w: %s %s under concurrency limit %q", ErrMissingKey, r.Method, r.URL.Path, c.Name()))
				return
			case key == "":
				next.ServeHTTP(w, r)
				return
			}
			p, res, err := l.AcquirePermit(r.Context(), c, key)
			switch {
			case err != nil:
				cfg.onError(w, r, err)
				return
			case p == nil:
				w.Header().Set(hdrRetryAfter, seconds(res.RetryAfter, 1))
				cfg.denied.ServeHTTP(w, r)
				return
			}
			defer func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
				defer cancel()
				_ = p.Release(ctx)
			}()
			next.ServeHTTP(w, r)
		})
	}
}
