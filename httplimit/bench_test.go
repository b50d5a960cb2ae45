package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
	"github.com/ratelease/ratelease/internal/redistest"
)

// discard is a ResponseWriter that keeps only its headers, cleared for
// each request, so that the benchmark measures the middleware and not a
// recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware is what the middleware adds to a request in lease
// mode, where a decision is a local hit: impl=bare is the handler alone;
// the others add the middleware, keyed by client IP, with each header style.
//
//	go test -run '^$' -bench Middleware -benchmem -count 6 ./httplimit > mw.txt
//	benchstat -col /impl mw.txt
func BenchmarkMiddleware(b *testing.B) {
	// One lease covers the whole run (as in the root BenchmarkAllowLeased),
	// so that what is measured is the middleware and its local hit, not the
	// Redis round trips of lease renewals (docs/leasing.md measures those).
	l, err := ratelease.New(redistest.StartMini(b).Client(b),
		ratelease.WithLease(ratelease.LeaseConfig{Min: 1_000_000_000, Max: 1_000_000_000, TTL: time.Hour}))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	p := newPolicy(b, "bench", ratelease.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000})
	styles := []struct {
		name  string
		style httplimit.HeaderStyle
	}{
		{"none", httplimit.NoHeaders}, {"draft", httplimit.DraftHeaders},
		{"x", httplimit.XRateLimitHeaders}, {"all", httplimit.AllHeaders},
	}
	run := func(b *testing.B, h http.Handler) {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:5000"
		w := &discard{h: http.Header{}}
		h.ServeHTTP(w, r) // the first lease
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	}
	b.Run("impl=bare", func(b *testing.B) { run(b, ok) })
	for _, s := range styles {
		b.Run("impl=headers-"+s.name, func(b *testing.B) {
			run(b, httplimit.Middleware(l, p, httplimit.WithHeaders(s.style))(ok))
		})
	}
}
