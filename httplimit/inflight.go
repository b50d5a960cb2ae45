package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"sync"
	"time"

	"github.com/ratelease/ratelease"
)

// ErrNoConcurrency is InFlight's error for a nil Concurrency.
var ErrNoConcurrency = errors.New("httplimit: no concurrency limit")

// InFlight returns middleware that holds a permit of c for each request
// while the next handler serves it: at most the limit's permits of a key in
// flight at once, across every instance (ratelease.Concurrency). The key
// is WithKey's (the client IP by default), and WithMissingKey,
// WithDeniedHandler and WithErrorHandler apply; the other options do not.
// A request that finds every permit held gets 429 (WithDeniedHandler; by
// default with the body "too many requests in flight") with Retry-After:
// how long this middleware's permits were held, a decaying average of the
// requests it served (see holdTimes), at least 1s, and never later than
// when the first permit held expires (the permit TTL at most), which is what it
// says before any request was served. ResultFrom gives the denied handler
// the Result, its RetryAfter that estimate. A limiter error goes to the
// error handler.
// The permit is released when the handler returns, on a context of its
// own (the request's may be over), within 5s; a release that fails leaves
// the permit to its TTL. A nil Limiter or Concurrency is logged here, and
// every request then gets the error handler.
func InFlight(l *ratelease.Limiter, c *ratelease.Concurrency, opts ...Option) func(http.Handler) http.Handler {
	cfg := build(nil, append([]Option{WithDeniedHandler(http.HandlerFunc(inFlightDenied))}, opts...))
	holds := &holdTimes{}
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
				res.RetryAfter = holds.retryAfter(res.RetryAfter)
				w.Header().Set(hdrRetryAfter, seconds(res.RetryAfter, 1))
				cfg.denied.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, res)))
				return
			}
			start := l.Clock().Now()
			defer func() {
				holds.add(l.Clock().Now().Sub(start))
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
				defer cancel()
				_ = p.Release(ctx)
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// inFlightDenied is InFlight's default denied handler: a concurrency
// denial, said as one (not "rate limit exceeded": the client's rate may be
// low, its requests slow).
func inFlightDenied(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "too many requests in flight", http.StatusTooManyRequests)
}

// holdWeight is the weight of the samples holdTimes has seen against a
// new one, once it has seen that many: the average follows the last few
// dozen requests, and a change in how long they take within a few
// dozen more.
const holdWeight = 16

// holdTimes measures how long an InFlight's permits are held (from the
// grant to the handler's return, on the Limiter's clock): an average of
// the holds seen so far, each new one weighing 1/n of it, n growing to
// holdWeight and no further, so that old holds decay. The zero value has
// seen none. It is safe for concurrent use.
type holdTimes struct {
	mu  sync.Mutex
	n   int           // samples weighed, at most holdWeight
	avg time.Duration // the decaying average; requires mu held
}

// add counts a permit held for d.
func (h *holdTimes) add(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n = min(h.n+1, holdWeight)
	h.avg += (max(0, d) - h.avg) / time.Duration(h.n)
}

// retryAfter is when a client denied a permit should come back: the
// average hold, at least 1s (Retry-After's unit), and never after latest,
// when the first permit held expires; latest itself before any hold was
// seen.
func (h *holdTimes) retryAfter(latest time.Duration) time.Duration {
	h.mu.Lock()
	n, avg := h.n, h.avg
	h.mu.Unlock()
	if n == 0 {
		return latest
	}
	return min(max(avg, time.Second), max(latest, time.Second))
}
