package httplimit_test

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// sfItem is one member of a Structured Field list (RFC 9651) of strings
// with parameters: `"name";key=integer;...`.
type sfItem struct {
	name   string
	params map[string]string
}

// sfList parses a list of such items as the draft's fields are: members
// separated by ",", optional whitespace around them; a string in double
// quotes with \" and \\ escapes; parameters of lowercase keys and
// non-negative integers. It fails t on anything else.
func sfList(t *testing.T, field, v string) []sfItem {
	t.Helper()
	item := regexp.MustCompile(`^"((?:[^"\\\x00-\x1f\x7f]|\\["\\])*)"((?:;[a-z*][a-z0-9_.*-]*=[0-9]{1,15})*)$`)
	var items []sfItem
	for _, m := range strings.Split(v, ",") {
		m = strings.Trim(m, " \t")
		g := item.FindStringSubmatch(m)
		if g == nil {
			t.Fatalf("%s: %q is not a Structured Field string with integer parameters, in %q", field, m, v)
		}
		it := sfItem{name: g[1], params: map[string]string{}}
		for _, p := range strings.Split(g[2], ";")[1:] {
			k, val, _ := strings.Cut(p, "=")
			if _, dup := it.params[k]; dup {
				t.Fatalf("%s: parameter %s twice in %q", field, k, m)
			}
			it.params[k] = val
		}
		items = append(items, it)
	}
	return items
}

// The parser takes the draft's own examples (draft-ietf-httpapi-
// ratelimit-headers-11, section 5) and the fields the middleware sends,
// 200s and 429s alike; on a 429 t agrees with Retry-After, and
// RateLimit-Policy names the same policies on every response to a client.
func TestDraftHeadersSyntax(t *testing.T) {
	for _, ex := range []struct{ field, v string }{
		{"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`},
		{"RateLimit", `"default";r=50;t=30`},
		{"RateLimit-Policy", `"default";q=100;w=10`},
	} {
		sfList(t, ex.field, ex.v)
	}
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(2))
	perKey := newPolicy(t, "key", ratelease.PerMinute(5), ratelease.PerHour(50))
	h := httplimit.Middleware(l, perIP, httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))(ok)
	var policies []string
	for i := 0; i < 3; i++ { // the third is denied by the first dimension, the IP
		res := do(h, "192.0.2.1:1", "X-API-Key", "alice")
		policy := res.Header.Get("RateLimit-Policy")
		ps := sfList(t, "RateLimit-Policy", policy)
		rs := sfList(t, "RateLimit", res.Header.Get("RateLimit"))
		for _, p := range ps {
			if p.params["q"] == "" || p.params["w"] == "" {
				t.Errorf("request %d: RateLimit-Policy member %+v without q and w", i, p)
			}
		}
		for _, r := range rs {
			if r.params["r"] == "" || r.params["t"] == "" {
				t.Errorf("request %d: RateLimit member %+v without r and t", i, r)
			}
		}
		policies = append(policies, policy)
		if res.StatusCode == http.StatusTooManyRequests {
			if len(rs) != 1 || rs[0].params["t"] != res.Header.Get("Retry-After") {
				t.Errorf("the 429: RateLimit %q, Retry-After %q: t must be Retry-After", res.Header.Get("RateLimit"), res.Header.Get("Retry-After"))
			}
		} else if i == 2 {
			t.Fatalf("request 3: %d, want 429", res.StatusCode)
		}
	}
	if policies[0] != policies[2] || !strings.Contains(policies[2], `"key-1h";q=50;w=3600`) {
		t.Errorf("RateLimit-Policy changed between responses: %q", policies)
	}
}

// New reports a middleware that cannot work where it is built; Middleware
// hands the same error to the error handler, and a cost below 1 names
// WithCost.
func TestNewErrors(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(3))
	for _, c := range []struct {
		name string
		l    *ratelease.Limiter
		p    *ratelease.Policy
		opts []httplimit.Option
		want error
	}{
		{"nil limiter", nil, p, nil, httplimit.ErrNoLimiter},
		{"nil policy", l, nil, nil, httplimit.ErrNoPolicy},
		{"nil dimension", l, p, []httplimit.Option{httplimit.WithDimension(nil, nil)}, httplimit.ErrNoPolicy},
	} {
		if mw, err := httplimit.New(c.l, c.p, c.opts...); !errors.Is(err, c.want) || mw != nil {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	mw, err := httplimit.New(l, p)
	if err != nil || mw == nil {
		t.Fatalf("New: %v", err)
	}
	if res := do(mw(ok), "192.0.2.1:1"); res.StatusCode != http.StatusOK {
		t.Errorf("New's middleware: %d", res.StatusCode)
	}
	var got error
	record := httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) { got = err })
	zero := httplimit.WithCost(func(*http.Request) int { return 0 })
	do(httplimit.Middleware(l, p, zero, record)(ok), "192.0.2.1:1")
	if !errors.Is(got, ratelease.ErrInvalidN) || !strings.Contains(got.Error(), "WithCost") {
		t.Errorf("a cost of 0: %v, want ErrInvalidN naming WithCost", got)
	}
}
