package grpclimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
	"github.com/ratelease/ratelease/httplimit"
)

// TestSameFieldsAsHTTPLimit sends the same calls through httplimit and
// grpclimit, each on a Redis of its own at the same frozen time, and
// finds the same decisions and the same fields: a user who reads one
// reads the other.
func TestSameFieldsAsHTTPLimit(t *testing.T) {
	fields := []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "retry-after"}
	for _, c := range []struct {
		name  string
		own   []ratelease.Limit
		key   []ratelease.Limit // a second dimension, keyed by x-api-key, if any
		cost  int
		calls int
	}{
		{"one limit", []ratelease.Limit{ratelease.PerMinute(3)}, nil, 1, 5},
		{"several limits", []ratelease.Limit{ratelease.PerSecond(2), ratelease.PerMinute(5)}, nil, 1, 4},
		{"dimensions and a cost", []ratelease.Limit{ratelease.PerMinute(9)},
			[]ratelease.Limit{{Rate: 6, Period: time.Minute, Algorithm: ratelease.FixedWindow}}, 2, 5},
		{"sliding windows", []ratelease.Limit{{Rate: 4, Period: time.Minute, Algorithm: ratelease.SlidingWindowCounter}},
			[]ratelease.Limit{{Rate: 3, Period: time.Hour, Algorithm: ratelease.SlidingWindowLog}}, 1, 4},
		{"leaky bucket", []ratelease.Limit{{Rate: 2, Period: time.Second, Burst: 3, Algorithm: ratelease.LeakyBucket}}, nil, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			own := newPolicy(t, "own", c.own...)
			var hopts []httplimit.Option
			var gopts []grpclimit.Option
			if c.key != nil {
				key := newPolicy(t, "key", c.key...)
				hopts = append(hopts, httplimit.WithDimension(key, httplimit.Header("X-API-Key")))
				gopts = append(gopts, grpclimit.WithDimension(key, grpclimit.Metadata("x-api-key")))
			}
			hopts = append(hopts, httplimit.WithCost(func(*http.Request) int { return c.cost }))
			gopts = append(gopts, grpclimit.WithCost(func(context.Context, grpclimit.Call) int { return c.cost }))

			mw, err := httplimit.New(newLimiter(t, ratelease.WithExact()), own, hopts...)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			s := serve(t, newInterceptor(t, newLimiter(t, ratelease.WithExact()), own, gopts...).ServerOptions())

			denied := 0
			for i := 0; i < c.calls; i++ {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = "127.0.0.1:1234"
				r.Header.Set("X-API-Key", "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)

				var hdr, tr metadata.MD
				err := s.call(withMD(ctxFor(t), "x-api-key", "k"), grpc.Header(&hdr), grpc.Trailer(&tr))
				md := metadata.Join(hdr, tr)
				if admitted := w.Code == http.StatusOK; admitted != (err == nil) ||
					!admitted && (w.Code != http.StatusTooManyRequests || status.Code(err) != codes.ResourceExhausted) {
					t.Fatalf("call %d: HTTP %d, gRPC %v", i, w.Code, err)
				}
				if err != nil {
					denied++
				}
				for _, f := range fields {
					if got, want := first(md, f), w.Header().Get(f); got != want {
						t.Errorf("call %d: %s = %q, httplimit's %q", i, f, got, want)
					}
				}
				// Reset is Unix seconds from each one's own clock reading.
				hr, _ := strconv.ParseInt(w.Header().Get("X-RateLimit-Reset"), 10, 64)
				gr, err := strconv.ParseInt(first(md, "x-ratelimit-reset"), 10, 64)
				if err != nil || gr < hr || gr > hr+1 {
					t.Errorf("call %d: x-ratelimit-reset %q, httplimit's %d", i, first(md, "x-ratelimit-reset"), hr)
				}
			}
			if denied == 0 || denied == c.calls {
				t.Errorf("%d of %d calls denied: want admissions and denials compared", denied, c.calls)
			}
		})
	}
}

// TestHeaderStyles: each style sends its fields and no others, on
// admissions and denials; a denial's retry-after is sent whatever the
// styles.
func TestHeaderStyles(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	draft := []string{"ratelimit-policy", "ratelimit"}
	x := []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
	for i, c := range []struct {
		styles       grpclimit.HeaderStyle
		sent, absent []string
	}{
		{grpclimit.AllHeaders, append(draft, x...), nil},
		{grpclimit.DraftHeaders, draft, x},
		{grpclimit.XRateLimitHeaders, x, draft},
		{grpclimit.NoHeaders, nil, append(draft, x...)},
	} {
		p := newPolicy(t, "p"+strconv.Itoa(i), ratelease.PerMinute(1))
		s := serve(t, newInterceptor(t, l, p, grpclimit.WithHeaders(c.styles)).ServerOptions())
		for _, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
			var hdr, tr metadata.MD
			err := s.call(ctxFor(t), grpc.Header(&hdr), grpc.Trailer(&tr))
			md := metadata.Join(hdr, tr)
			if status.Code(err) != want {
				t.Fatalf("styles %b: %v, want %v", c.styles, err, want)
			}
			for _, k := range c.sent {
				if first(md, k) == "" {
					t.Errorf("styles %b, %v: %s missing", c.styles, want, k)
				}
			}
			for _, k := range c.absent {
				if first(md, k) != "" {
					t.Errorf("styles %b, %v: %s sent", c.styles, want, k)
				}
			}
			if (want == codes.ResourceExhausted) != (first(md, "retry-after") == "60") {
				t.Errorf("styles %b, %v: retry-after %q", c.styles, want, first(md, "retry-after"))
			}
		}
	}
}
