package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/httplimit"
	"github.com/ratelease/ratelease/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// modes are the Limiter modes every behaviour is checked in.
var modes = []struct {
	name string
	opts []ratelease.Option
}{
	{"exact", []ratelease.Option{ratelease.WithExact()}},
	{"lease", nil},
}

// newLimiter returns a Limiter on a miniredis whose clock stands still, so
// that no limit refills during a test. Its Redis timeout is long: on a
// loaded machine a call past the default 100ms would be decided by the
// failure mode (FailLocal), which is not what these tests check.
func newLimiter(t testing.TB, opts ...ratelease.Option) *ratelease.Limiter {
	t.Helper()
	opts = append([]ratelease.Option{ratelease.WithRedisTimeout(5 * time.Second)}, opts...)
	l, err := ratelease.New(redistest.StartMini(t).Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func newPolicy(t testing.TB, name string, limits ...ratelease.Limit) *ratelease.Policy {
	t.Helper()
	p, err := ratelease.NewPolicy(name, limits...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ok is the next handler: it says 200 "ok".
var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// do sends one request through h from remote, with headers (name, value,
// name, value…), and returns the response.
func do(h http.Handler, remote string, headers ...string) *http.Response {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestHeadersAndStatus(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			p := newPolicy(t, "api", ratelease.PerMinute(3))
			h := httplimit.Middleware(l, p)(ok)
			for i := 1; i <= 3; i++ {
				res := do(h, "192.0.2.1:1234")
				if res.StatusCode != http.StatusOK {
					t.Fatalf("request %d: %d", i, res.StatusCode)
				}
				want := map[string]string{
					"RateLimit-Policy": `"api";q=3;w=60`,
					// t: until the next unit comes back, 20s at 3/min;
					// X-RateLimit-Reset: until the bucket is full.
					"RateLimit":             fmt.Sprintf(`"api";r=%d;t=20`, 3-i),
					"X-RateLimit-Limit":     "3",
					"X-RateLimit-Remaining": strconv.Itoa(3 - i),
				}
				for k, v := range want {
					if got := res.Header.Get(k); got != v {
						t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
					}
				}
				reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
				if d := time.Until(time.Unix(reset, 0)); err != nil || d < time.Duration(20*i-2)*time.Second || d > time.Duration(20*i+1)*time.Second {
					t.Errorf("request %d: X-RateLimit-Reset %q is %v from now, want about %ds", i, res.Header.Get("X-RateLimit-Reset"), d, 20*i)
				}
				if res.Header.Get("Retry-After") != "" {
					t.Errorf("request %d: Retry-After on a 200", i)
				}
			}
			res := do(h, "192.0.2.1:1234")
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "rate limit exceeded") {
				t.Fatalf("4th request: %d %q, want 429", res.StatusCode, body)
			}
			if got := res.Header.Get("Retry-After"); got != "20" {
				t.Errorf("Retry-After = %q, want 20 (one token of 3/min)", got)
			}
			// On a denial t and X-RateLimit-Reset say what Retry-After says.
			if got := res.Header.Get("RateLimit"); got != `"api";r=0;t=20` {
				t.Errorf("RateLimit on a 429 = %q, want t=20, as Retry-After", got)
			}
			reset, err := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
			if d := time.Until(time.Unix(reset, 0)); err != nil || d < 18*time.Second || d > 21*time.Second {
				t.Errorf("X-RateLimit-Reset on a 429 is %v from now, want about 20s, as Retry-After", d)
			}
			// Another client has its own budget.
			if res := do(h, "192.0.2.2:1234"); res.StatusCode != http.StatusOK {
				t.Errorf("another IP: %d", res.StatusCode)
			}
		})
	}
}

func TestHeaderStyles(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerSecond(1))
	draft := []string{"RateLimit-Policy", "RateLimit"}
	x := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	cases := []struct {
		styles       httplimit.HeaderStyle
		sent, absent []string
	}{
		{httplimit.AllHeaders, append(draft, x...), nil},
		{httplimit.DraftHeaders, draft, x},
		{httplimit.XRateLimitHeaders, x, draft},
		{httplimit.NoHeaders, nil, append(draft, x...)},
	}
	for i, c := range cases {
		h := httplimit.Middleware(l, p, httplimit.WithHeaders(c.styles))(ok)
		remote := fmt.Sprintf("192.0.2.%d:1", i+1)
		for _, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
			res := do(h, remote)
			if res.StatusCode != status {
				t.Fatalf("styles %b: %d, want %d", c.styles, res.StatusCode, status)
			}
			for _, k := range c.sent {
				if res.Header.Get(k) == "" {
					t.Errorf("styles %b, %d: no %s", c.styles, status, k)
				}
			}
			for _, k := range c.absent {
				if res.Header.Get(k) != "" {
					t.Errorf("styles %b, %d: %s sent", c.styles, status, k)
				}
			}
			if (status == http.StatusTooManyRequests) != (res.Header.Get("Retry-After") != "") {
				t.Errorf("styles %b, %d: Retry-After %q", c.styles, status, res.Header.Get("Retry-After"))
			}
		}
	}
}

func TestMultiLimitPolicyHeaders(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerSecond(10), ratelease.PerMinute(2))
	h := httplimit.Middleware(l, p)(ok)
	res := do(h, "192.0.2.1:1")
	if got, want := res.Header.Get("RateLimit-Policy"), `"api-1s";q=10;w=1, "api-1m";q=2;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// The per-minute limit has the fewest units left: it decides.
	if got, want := res.Header.Get("RateLimit"), `"api-1m";r=1;t=30`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	if got := res.Header.Get("X-RateLimit-Limit"); got != "2" {
		t.Errorf("X-RateLimit-Limit = %q, want 2", got)
	}
}

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		headers []string
		want    string
	}{
		{"no proxy", nil, "192.0.2.1:5000", nil, "192.0.2.1"},
		{"headers ignored by default", nil, "192.0.2.1:5000",
			[]string{"X-Forwarded-For", "198.51.100.7", "X-Real-IP", "198.51.100.8"}, "192.0.2.1"},
		{"headers ignored from an untrusted peer", proxies, "192.0.2.1:5000",
			[]string{"X-Forwarded-For", "198.51.100.7"}, "192.0.2.1"},
		{"trusted proxy", proxies, "10.1.2.3:5000", []string{"X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"rightmost untrusted hop", proxies, "10.1.2.3:5000",
			[]string{"X-Forwarded-For", "203.0.113.9, 198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"several X-Forwarded-For lines", proxies, "10.1.2.3:5000",
			[]string{"X-Forwarded-For", "203.0.113.9", "X-Forwarded-For", "198.51.100.7"}, "198.51.100.7"},
		{"forged garbage left of the real hop", proxies, "10.1.2.3:5000",
			[]string{"X-Forwarded-For", "not-an-ip, 198.51.100.7"}, "198.51.100.7"},
		{"garbage as the last hop", proxies, "10.1.2.3:5000",
			[]string{"X-Forwarded-For", "198.51.100.7, garbage"}, "10.1.2.3"},
		{"only proxies", proxies, "10.1.2.3:5000", []string{"X-Forwarded-For", "10.0.0.1, 10.0.0.2"}, "10.0.0.1"},
		{"X-Real-IP", proxies, "10.1.2.3:5000", []string{"X-Real-IP", "198.51.100.8"}, "198.51.100.8"},
		{"X-Real-IP broken", proxies, "10.1.2.3:5000", []string{"X-Real-IP", "x"}, "10.1.2.3"},
		{"IPv6 by /64", nil, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"IPv6 zone", nil, "[fe80::1%eth0]:443", nil, "fe80::/64"},
		{"IPv4-mapped IPv6", nil, "[::ffff:192.0.2.1]:443", nil, "192.0.2.1"},
		{"IPv6 proxy", proxies, "[fd00::1]:443", []string{"X-Forwarded-For", "2001:db8::7"}, "2001:db8::/64"},
		{"not host:port", nil, "192.0.2.1", nil, "192.0.2.1"},
		{"not an IP", nil, "@", nil, "@"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = c.remote
		for i := 0; i+1 < len(c.headers); i += 2 {
			r.Header.Add(c.headers[i], c.headers[i+1])
		}
		if got := httplimit.ClientIP(c.trusted...)(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDimensions(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			perIP := newPolicy(t, "ip", ratelease.PerMinute(5))
			perKey := newPolicy(t, "key", ratelease.PerMinute(2))
			h := httplimit.Middleware(l, perIP,
				httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))(ok)

			// The API key's limit is the tighter: it decides, and its
			// denial ends the request.
			for i := 0; i < 2; i++ {
				res := do(h, "192.0.2.1:1", "X-API-Key", "alice")
				if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != "2" {
					t.Fatalf("request %d: %d, X-RateLimit-Limit %q", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
				}
				if got, want := res.Header.Get("RateLimit"), fmt.Sprintf(`"ip";r=%d;t=12, "key";r=%d;t=30`, 4-i, 1-i); got != want {
					t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
				}
			}
			res := do(h, "192.0.2.1:1", "X-API-Key", "alice")
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("X-RateLimit-Limit") != "2" {
				t.Fatalf("3rd request of alice: %d, X-RateLimit-Limit %q", res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
			}
			if got := res.Header.Get("RateLimit-Policy"); got != `"ip";q=5;w=60, "key";q=2;w=60` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			// Without an API key only the IP limit applies: 5 - 2 = 3 left,
			// the unit of alice's denied request refunded.
			for i := 0; i < 3; i++ {
				res := do(h, "192.0.2.1:1")
				if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != "5" {
					t.Fatalf("anonymous %d: %d, X-RateLimit-Limit %q", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
				}
				if got := res.Header.Get("RateLimit-Policy"); got != `"ip";q=5;w=60` {
					t.Errorf("anonymous %d: RateLimit-Policy %q", i, got)
				}
			}
			// Now the IP's limit denies even bob, who has his own key budget.
			if res := do(h, "192.0.2.1:1", "X-API-Key", "bob"); res.StatusCode != http.StatusTooManyRequests ||
				res.Header.Get("X-RateLimit-Limit") != "5" {
				t.Errorf("bob from a spent IP: %d, X-RateLimit-Limit %q", res.StatusCode, res.Header.Get("X-RateLimit-Limit"))
			}
			if res := do(h, "192.0.2.9:1", "X-API-Key", "bob"); res.StatusCode != http.StatusOK {
				t.Errorf("bob from elsewhere: %d", res.StatusCode)
			}
		})
	}
}

// A later dimension that cannot decide (here a cost above its capacity)
// ends the request with the error handler's answer, and what the earlier
// dimensions admitted for it is refunded.
func TestDimensionErrorRefunds(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			perIP := newPolicy(t, "ip", ratelease.PerMinute(10))
			small := newPolicy(t, "small", ratelease.PerMinute(2))
			h := httplimit.Middleware(l, perIP, httplimit.WithCost(func(*http.Request) int { return 3 }),
				httplimit.WithDimension(small, httplimit.Header("X-API-Key")))(ok)
			if res := do(h, "192.0.2.1:1", "X-API-Key", "alice"); res.StatusCode != http.StatusBadRequest {
				t.Fatalf("a cost of 3 against a capacity of 2: %d, want 400 (ErrExceedsCapacity)", res.StatusCode)
			}
			if res, err := l.Peek(context.Background(), perIP, "192.0.2.1"); err != nil || res.Remaining != 10 {
				t.Fatalf("the IP's limit after the failed request: %+v, %v; want all 10 left", res, err)
			}
		})
	}
}

func TestKeyFuncs(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "user", ratelease.PerMinute(1))
	user := func(r *http.Request) string { return r.URL.Query().Get("user") }
	h := httplimit.Middleware(l, p, httplimit.WithKey(user))(ok)
	get := func(q string) int {
		r := httptest.NewRequest(http.MethodGet, "/?"+q, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if get("user=a") != 200 || get("user=a") != 429 || get("user=b") != 200 {
		t.Error("a function of the request does not key the limit")
	}
	// An empty key: the policy does not apply, and no header is sent.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("RateLimit") != "" {
			t.Fatalf("no key %d: %d, RateLimit %q", i, w.Code, w.Header().Get("RateLimit"))
		}
	}
}

func TestCost(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			p := newPolicy(t, "graphql", ratelease.PerMinute(10))
			cost := func(r *http.Request) int { n, _ := strconv.Atoi(r.Header.Get("X-Cost")); return n }
			h := httplimit.Middleware(l, p, httplimit.WithCost(cost))(ok)
			for _, c := range []struct {
				cost   string
				status int
				left   string
			}{
				{"4", 200, "6"}, {"5", 200, "1"}, {"2", 429, "1"}, {"1", 200, "0"},
				{"0", 500, ""},  // a cost below 1 is a bug of the cost function
				{"11", 400, ""}, // no request of this cost can ever pass
			} {
				res := do(h, "192.0.2.1:1", "X-Cost", c.cost)
				if res.StatusCode != c.status || res.Header.Get("X-RateLimit-Remaining") != c.left {
					t.Errorf("cost %s: %d, remaining %q; want %d, %q", c.cost, res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), c.status, c.left)
				}
			}
		})
	}
}

func TestDeniedHandler(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(1))
	denied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := httplimit.ResultFrom(r.Context())
		if !ok || res.Allowed {
			t.Errorf("ResultFrom in the denied handler: %+v, %v", res, ok)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"retry_after_ms":%d}`, res.RetryAfter.Milliseconds())
	})
	h := httplimit.Middleware(l, p, httplimit.WithDeniedHandler(denied))(ok)
	do(h, "192.0.2.1:1")
	res := do(h, "192.0.2.1:1")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 429 || string(body) != `{"retry_after_ms":60000}` || res.Header.Get("Retry-After") != "60" {
		t.Errorf("%d %q, Retry-After %q", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
	if _, ok := httplimit.ResultFrom(context.Background()); ok {
		t.Error("ResultFrom without a denial")
	}
}

func TestErrors(t *testing.T) {
	mini := redistest.StartMini(t)
	client := redis.NewClient(&redis.Options{Addr: mini.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	closed, err := ratelease.New(client, ratelease.WithFailureMode(ratelease.FailClosed), ratelease.WithRedisTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closed.Close() })
	open, err := ratelease.New(client, ratelease.WithFailureMode(ratelease.FailOpen), ratelease.WithRedisTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Close() })
	p := newPolicy(t, "api", ratelease.PerMinute(100))
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)

	var gotErr error
	record := httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		gotErr = err
		httplimit.DefaultErrorHandler(w, r, err)
	})
	if res := do(httplimit.Middleware(nil, p, record)(ok), "192.0.2.1:1"); res.StatusCode != 500 || !errors.Is(gotErr, httplimit.ErrNoLimiter) {
		t.Errorf("nil limiter: %d, %v", res.StatusCode, gotErr)
	}
	if res := do(httplimit.Middleware(open, nil, record)(ok), "192.0.2.1:1"); res.StatusCode != 500 || !errors.Is(gotErr, ratelease.ErrInvalidPolicy) {
		t.Errorf("nil policy: %d, %v", res.StatusCode, gotErr)
	}
	byHeader := httplimit.Middleware(open, p, httplimit.WithKey(httplimit.Header("X-API-Key")), record)(ok)
	if res := do(byHeader, "192.0.2.1:1", "X-API-Key", long); res.StatusCode != 400 || !errors.Is(gotErr, ratelease.ErrInvalidKey) {
		t.Errorf("a key too long: %d, %v", res.StatusCode, gotErr)
	}

	// The client left: nothing is written.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	httplimit.Middleware(closed, p, record)(ok).ServeHTTP(w, r)
	if !errors.Is(gotErr, context.Canceled) || w.Body.Len() != 0 {
		t.Errorf("cancelled request: %v, body %q", gotErr, w.Body.String())
	}

	// Redis gone: FailClosed answers 503, FailOpen admits.
	mini.Close()
	if res := do(httplimit.Middleware(closed, p, record)(ok), "192.0.2.1:1"); res.StatusCode != 503 || !errors.Is(gotErr, ratelease.ErrUnavailable) {
		t.Errorf("FailClosed, Redis down: %d, %v", res.StatusCode, gotErr)
	}
	gotErr = nil
	if res := do(httplimit.Middleware(open, p, record)(ok), "192.0.2.1:1"); res.StatusCode != 200 || gotErr != nil {
		t.Errorf("FailOpen, Redis down: %d, %v", res.StatusCode, gotErr)
	}
	_ = closed.Close()
	if res := do(httplimit.Middleware(closed, p, record)(ok), "192.0.2.1:1"); res.StatusCode != 503 || !errors.Is(gotErr, ratelease.ErrClosed) {
		t.Errorf("closed limiter: %d, %v", res.StatusCode, gotErr)
	}
}

// TestRealServer runs the middleware in a real net/http server on loopback,
// with a real client, in lease mode on a real Redis.
func TestRealServer(t *testing.T) {
	client := redistest.Start(t).Client(t)
	// A generous timeout: on a loaded machine a call past the default
	// 100ms would be decided by the failure mode, which this test is not
	// about.
	l, err := ratelease.New(client, ratelease.WithRedisTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := newPolicy(t, "real-"+strconv.FormatInt(time.Now().UnixNano(), 36), ratelease.PerHour(20))
	srv := httptest.NewServer(httplimit.Middleware(l, p)(ok))
	defer srv.Close()
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	var okN, denied int
	for i := 0; i < 30; i++ {
		res, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		switch res.StatusCode {
		case 200:
			okN++
			if want := strconv.Itoa(20 - okN); res.Header.Get("X-RateLimit-Remaining") != want {
				t.Errorf("request %d: X-RateLimit-Remaining %q, want %s", i, res.Header.Get("X-RateLimit-Remaining"), want)
			}
		case 429:
			denied++
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 170 || ra > 180 {
				t.Errorf("request %d: Retry-After %q, want about 180 (one token of 20/h); %v", i, res.Header.Get("Retry-After"), res.Header)
			}
		default:
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	if okN != 20 || denied != 10 {
		t.Errorf("admitted %d, denied %d; want 20, 10", okN, denied)
	}
}

// TestDenialDecides: a dimension that denies decides, even when another
// has fewer units left (it admitted a weighted request down to 0).
func TestDenialDecides(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(4))
	perKey := newPolicy(t, "key", ratelease.PerMinute(5))
	h := httplimit.Middleware(l, perIP, httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")),
		httplimit.WithCost(func(*http.Request) int { return 2 }))(ok)
	for i, c := range []struct {
		remote string
		status int
		limit  string
	}{
		{"192.0.2.1:1", 200, "4"}, // ip 2 left, key 3
		{"192.0.2.2:1", 200, "5"}, // ip 2 left, key 1
		{"192.0.2.2:1", 429, "5"}, // ip admits down to 0, key (1 left) denies
	} {
		res := do(h, c.remote, "X-API-Key", "k")
		if res.StatusCode != c.status || res.Header.Get("X-RateLimit-Limit") != c.limit {
			t.Errorf("request %d: %d, X-RateLimit-Limit %q; want %d, %s", i, res.StatusCode, res.Header.Get("X-RateLimit-Limit"), c.status, c.limit)
		}
	}
	// The ip's 2 units of the denied request were refunded: another key
	// from that ip is admitted, down to 0.
	if res := do(h, "192.0.2.2:1", "X-API-Key", "other"); res.StatusCode != 200 || res.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after the refund: %d, X-RateLimit-Remaining %q", res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	}
}

// TestShadowDimension: a dimension in shadow mode never denies (no 429),
// though its headers say what it would decide, and its shadow admissions
// are not refunded when a later dimension denies: they charged nothing.
func TestShadowDimension(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(1))
	perKey := newPolicy(t, "key", ratelease.PerMinute(2))
	h := httplimit.Middleware(l, perIP.Shadow(), httplimit.WithKey(httplimit.Header("X-Ip")),
		httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))(ok)
	for i, c := range []struct {
		status    int
		remaining string
	}{
		{200, "0"}, // ip 0 left, key 1
		{200, "0"}, // ip shadow-denied (0 left), key 0
		{429, "0"}, // ip shadow-denied, key denies
	} {
		res := do(h, "192.0.2.1:1", "X-Ip", "ip1", "X-API-Key", "k")
		if res.StatusCode != c.status || res.Header.Get("X-RateLimit-Remaining") != c.remaining {
			t.Errorf("request %d: %d, X-RateLimit-Remaining %q; want %d, %s", i, res.StatusCode, res.Header.Get("X-RateLimit-Remaining"), c.status, c.remaining)
		}
	}
	if res, _ := l.Peek(context.Background(), perIP, "ip1"); res.Allowed || res.Remaining != 0 {
		t.Errorf("ip after the denial: %+v, want nothing refunded", res)
	}
	if st := l.Stats().Policies[perIP.Name()]; st.ShadowDenied != 2 {
		t.Errorf("ip's stats: %+v, want 2 shadow-denied", st)
	}
}

// A calendar quota beside a rate limit: its header names its unit, its
// window is a nominal day, and its denial waits for local midnight.
func TestCalendarQuotaHeaders(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact(), ratelease.WithClock(clock.NewManual(redistest.Epoch)))
	p := newPolicy(t, "api", ratelease.PerSecond(10), ratelease.PerCalendarDay(2, nil))
	h := httplimit.Middleware(l, p)(ok)
	res := do(h, "192.0.2.1:1")
	if got, want := res.Header.Get("RateLimit-Policy"), `"api-1s";q=10;w=1, "api-day";q=2;w=86400`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	do(h, "192.0.2.1:1")
	res = do(h, "192.0.2.1:1")
	// The Mini's clock stands at 22:00 UTC: two hours to midnight.
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "7200" {
		t.Errorf("third request: %d, Retry-After %q; want 429 until midnight, 7200s", res.StatusCode, res.Header.Get("Retry-After"))
	}
}

// InFlight holds a permit while the handler serves: a second request of
// the key while the first is served gets 429, and one after it is served.
func TestInFlight(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	c, err := ratelease.NewConcurrency("exports", 1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A request with the header Block waits for release.
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Block") != "" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	h := httplimit.InFlight(l, c)(slow)
	first := make(chan *http.Response)
	go func() { first <- do(h, "192.0.2.1:1", "Block", "1") }()
	<-entered
	res := do(h, "192.0.2.1:2")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "30" {
		t.Fatalf("a second request in flight: %d, Retry-After %q; want 429 and 30", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if res := do(h, "192.0.2.9:1"); res.StatusCode != http.StatusOK {
		t.Fatalf("another client: %d", res.StatusCode)
	}
	close(release)
	if res := <-first; res.StatusCode != http.StatusOK {
		t.Fatalf("the first: %d", res.StatusCode)
	}
	if res := do(h, "192.0.2.1:3"); res.StatusCode != http.StatusOK {
		t.Fatalf("after the first was served: %d, want its permit back", res.StatusCode)
	}
}

// InFlight's 429 tells a client to come back after about as long as its
// permits are held, not their TTL: requests held 1s and 3s make the next
// denial's Retry-After 2 (their average) with a TTL of 30s; holds longer
// than the TTL make it the TTL, when the permit held expires at the
// latest. Its body says what it is.
func TestInFlightRetryAfterFromHoldTimes(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := newLimiter(t, ratelease.WithExact(), ratelease.WithClock(clk))
	c, err := ratelease.NewConcurrency("jobs", 1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A request holds its permit for its header Hold's seconds of the
	// clock, or, with Block, until release.
	entered, release := make(chan struct{}), make(chan struct{})
	job := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Block") != "" {
			entered <- struct{}{}
			<-release
		}
		s, _ := strconv.Atoi(r.Header.Get("Hold"))
		clk.Advance(time.Duration(s) * time.Second)
	})
	for _, tc := range []struct {
		holds []string
		want  string
	}{
		{[]string{"1", "3"}, "2"},
		{[]string{"100"}, "30"},
	} {
		h := httplimit.InFlight(l, c)(job)
		for _, hold := range tc.holds {
			if res := do(h, "192.0.2.1:1", "Hold", hold); res.StatusCode != http.StatusOK {
				t.Fatalf("a job held %ss: %d", hold, res.StatusCode)
			}
		}
		done := make(chan struct{})
		go func() { do(h, "192.0.2.1:1", "Block", "1"); close(done) }()
		<-entered
		res := do(h, "192.0.2.1:2")
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != tc.want ||
			!strings.Contains(string(body), "too many requests in flight") {
			t.Errorf("after jobs held %v s: %d, Retry-After %q, body %q; want 429, %s, too many requests in flight",
				tc.holds, res.StatusCode, res.Header.Get("Retry-After"), body, tc.want)
		}
		release <- struct{}{}
		<-done
	}
}
