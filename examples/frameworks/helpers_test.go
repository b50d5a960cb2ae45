package frameworks_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// modes are the Limiter modes every framework is checked in.
var modes = []struct {
	name string
	opts []ratelease.Option
}{
	{"exact", []ratelease.Option{ratelease.WithExact()}},
	{"lease", nil},
}

// newLimiter returns a Limiter on a miniredis whose clock stands still, so
// that no limit refills during a test, and the miniredis.
func newLimiter(t *testing.T, opts ...ratelease.Option) (*ratelease.Limiter, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(time.Unix(1_700_000_000, 0))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l, err := ratelease.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, mr
}

// newMiddleware returns httplimit.New's middleware for a policy of limits
// named name.
func newMiddleware(t *testing.T, l *ratelease.Limiter, name string, limit ratelease.Limit, opts ...httplimit.Option) func(http.Handler) http.Handler {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(l, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// do sends one GET of path through h from remote, with headers (name,
// value, name, value…), and returns the recorded response.
func do(h http.Handler, path, remote string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkLimited sends 3 requests to path through h from one client, under
// a limit of 2 a minute: 200, 200, then 429 with Retry-After, each with
// every rate-limit header, and body the body of each 200.
func checkLimited(t *testing.T, h http.Handler, path, body string) {
	t.Helper()
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		w := do(h, path, "192.0.2.1:1234")
		if w.Code != want {
			t.Fatalf("request %d: status %d, want %d (body %q)", i+1, w.Code, want, w.Body)
		}
		h := w.Header()
		if got := h.Get("RateLimit-Policy"); got != `"per-ip";q=2;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, got)
		}
		if got, want := h.Get("X-RateLimit-Remaining"), strconv.Itoa(max(0, 1-i)); got != want {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want %q", i+1, got, want)
		}
		if h.Get("RateLimit") == "" || h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Reset") == "" {
			t.Errorf("request %d: headers %v", i+1, h)
		}
		if want == http.StatusOK {
			if w.Body.String() != body {
				t.Errorf("request %d: body %q, want %q", i+1, w.Body, body)
			}
			if got := h.Get("Retry-After"); got != "" {
				t.Errorf("request %d: Retry-After %q on a 200", i+1, got)
			}
			continue
		}
		// 2 a minute, the clock stopped: one unit comes back in 30s.
		if got := h.Get("Retry-After"); got != "30" {
			t.Errorf("request %d: Retry-After %q, want 30", i+1, got)
		}
		if got := h.Get("RateLimit"); got != `"per-ip";r=0;t=30` {
			t.Errorf("request %d: RateLimit %q", i+1, got)
		}
	}
	// Another client has a budget of its own.
	if w := do(h, path, "192.0.2.2:1234"); w.Code != http.StatusOK {
		t.Errorf("another client: status %d, want 200", w.Code)
	}
}
