package frameworks_test

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// r.Use(mw): 200, 200, 429 with Retry-After and the headers; the handler
// runs for the admitted requests only.
func TestChi(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l, _ := newLimiter(t, m.opts...)
			var served atomic.Int64
			r := chi.NewRouter()
			r.Use(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2)))
			r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) {
				served.Add(1)
				_, _ = io.WriteString(w, "hello")
			})
			checkLimited(t, r, "/hello", "hello")
			if got := served.Load(); got != 3 { // 2, and 1 for the other client
				t.Errorf("handler ran %d times, want 3", got)
			}
		})
	}
}

// r.With(mw) runs after routing: a key read from the URL parameters limits
// each tenant on its own, and the routes without it are not limited.
func TestChiRouteKey(t *testing.T) {
	l, _ := newLimiter(t)
	perTenant := newMiddleware(t, l, "reports", ratelease.PerMinute(1),
		httplimit.WithKey(func(r *http.Request) string { return chi.URLParam(r, "tenant") }))
	r := chi.NewRouter()
	r.With(perTenant).Get("/tenants/{tenant}/report", func(http.ResponseWriter, *http.Request) {})
	r.Get("/tenants/{tenant}", func(http.ResponseWriter, *http.Request) {})

	for i, c := range []struct {
		path, remote string
		want         int
	}{
		{"/tenants/acme/report", "192.0.2.1:1", http.StatusOK},
		{"/tenants/acme/report", "192.0.2.2:1", http.StatusTooManyRequests}, // another IP, the same tenant
		{"/tenants/globex/report", "192.0.2.1:1", http.StatusOK},
		{"/tenants/acme", "192.0.2.1:1", http.StatusOK},
		{"/tenants/acme", "192.0.2.1:1", http.StatusOK},
	} {
		w := do(r, c.path, c.remote)
		if w.Code != c.want {
			t.Errorf("%d: %s: status %d, want %d", i, c.path, w.Code, c.want)
		}
		limited := w.Header().Get("RateLimit-Policy") != ""
		if wantLimited := c.path != "/tenants/acme"; limited != wantLimited {
			t.Errorf("%d: %s: rate-limit headers %v, want %v", i, c.path, limited, wantLimited)
		}
	}
}

// A group limits its routes only; Group and Route take middleware as r.Use
// does.
func TestChiGroup(t *testing.T) {
	l, _ := newLimiter(t)
	r := chi.NewRouter()
	r.Route("/api", func(api chi.Router) {
		api.Use(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2)))
		api.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	})
	r.Get("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	checkLimited(t, r, "/api/hello", "hello")
	for range 3 {
		w := do(r, "/health", "192.0.2.1:1234")
		if w.Code != http.StatusNoContent || w.Header().Get("RateLimit") != "" {
			t.Fatalf("/health: status %d, headers %v", w.Code, w.Header())
		}
	}
}
