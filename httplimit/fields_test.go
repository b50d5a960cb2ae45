package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// TestFieldsAreTheHeaders: HeaderStyle.Fields, given the decisions the
// middleware made, has the values of the headers the middleware sent, in
// every style, on admissions and denials, with two dimensions.
func TestFieldsAreTheHeaders(t *testing.T) {
	for _, style := range []httplimit.HeaderStyle{httplimit.AllHeaders, httplimit.DraftHeaders, httplimit.XRateLimitHeaders, httplimit.NoHeaders} {
		l := newLimiter(t, ratelease.WithExact())
		perIP := newPolicy(t, "ip", ratelease.PerMinute(3))
		perKey := newPolicy(t, "key", ratelease.PerSecond(5), ratelease.PerMinute(2))
		h := httplimit.Middleware(l, perIP, httplimit.WithHeaders(style),
			httplimit.WithDimension(perKey, httplimit.Header("X-API-Key")))(ok)
		ip, _ := httplimit.NewDimension(perIP)
		key, _ := httplimit.NewDimension(perKey)
		// A twin of the middleware's Limiter, on a Redis of its own, decides
		// the same requests for the Fields.
		twin := newLimiter(t, ratelease.WithExact())
		for i := 0; i < 4; i++ { // the third and fourth are denied by the key's minute limit
			res := do(h, "192.0.2.1:1", "X-API-Key", "alice")
			now := time.Now()
			var ds []httplimit.Decision
			for _, d := range []httplimit.Decision{{Dimension: ip, Key: "192.0.2.1"}, {Dimension: key, Key: "alice"}} {
				r, err := twin.Allow(context.Background(), d.Dimension.Policy(), d.Key)
				if err != nil {
					t.Fatal(err)
				}
				d.Result = r
				ds = append(ds, d)
				if !r.Allowed {
					httplimit.Refund(context.Background(), twin, ds[:len(ds)-1], 1)
					break
				}
			}
			f := style.Fields([]*httplimit.Dimension{ip, key}, ds, now)
			for _, c := range []struct{ name, got string }{
				{"RateLimit-Policy", f.Policy}, {"RateLimit", f.RateLimit},
				{"X-RateLimit-Limit", f.Limit}, {"X-RateLimit-Remaining", f.Remaining},
				{"Retry-After", f.RetryAfter},
			} {
				if want := res.Header.Get(c.name); c.got != want {
					t.Errorf("styles %b, request %d: %s %q, the middleware's %q", style, i, c.name, c.got, want)
				}
			}
			// Reset counts from each one's reading of the clock, the
			// middleware's first.
			if style&httplimit.XRateLimitHeaders != 0 {
				got, err1 := strconv.ParseInt(f.Reset, 10, 64)
				want, err2 := strconv.ParseInt(res.Header.Get("X-RateLimit-Reset"), 10, 64)
				if err1 != nil || err2 != nil || got < want || got > want+1 {
					t.Errorf("styles %b, request %d: X-RateLimit-Reset %q, the middleware's %q", style, i, f.Reset, res.Header.Get("X-RateLimit-Reset"))
				}
			} else if f.Reset != "" {
				t.Errorf("styles %b, request %d: X-RateLimit-Reset %q", style, i, f.Reset)
			}
			if (res.StatusCode == http.StatusTooManyRequests) != (f.RetryAfter != "") || (i >= 2) != (f.RetryAfter != "") {
				t.Errorf("styles %b, request %d: %d, Retry-After %q", style, i, res.StatusCode, f.RetryAfter)
			}
		}
	}
}

// TestFieldsValues checks the values of the fields against the styles'
// docs, at a fixed time: a policy of three limits, two of one period, and
// a second dimension that applies but was not decided.
func TestFieldsValues(t *testing.T) {
	p := newPolicy(t, "api", ratelease.PerSecond(10), ratelease.PerMinute(100),
		ratelease.Limit{Rate: 30, Period: time.Minute, Algorithm: ratelease.FixedWindow})
	d, err := httplimit.NewDimension(p)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := httplimit.NewDimension(newPolicy(t, `o"1\é`, ratelease.PerHour(5)))
	limits := p.Limits()
	for i, want := range []string{"api-1s", "api-1m", "api-1m-2"} {
		if got := d.LimitName(limits[i]); got != want {
			t.Errorf("LimitName(%v) = %q, want %q", limits[i], got, want)
		}
	}
	if got := d.LimitName(ratelease.PerHour(1)); got != "api-1s" {
		t.Errorf("LimitName of a limit not of the policy: %q, want the first's", got)
	}
	if d.Policy() != p {
		t.Error("Policy is not the policy described")
	}
	now := time.Unix(1_700_000_000, 0)
	applying := []*httplimit.Dimension{d, other}
	policy := `"api-1s";q=10;w=1, "api-1m";q=100;w=60, "api-1m-2";q=30;w=60, "o\"1\\__";q=5;w=3600`
	for _, c := range []struct {
		name  string
		style httplimit.HeaderStyle
		res   ratelease.Result
		want  httplimit.Fields
	}{
		{"a bucket: 2 units missing, one back every 600ms", httplimit.AllHeaders,
			ratelease.Result{Allowed: true, Limit: limits[1], Remaining: 98, ResetAfter: 1200 * time.Millisecond},
			httplimit.Fields{Policy: policy, RateLimit: `"api-1m";r=98;t=1`,
				Limit: "100", Remaining: "98", Reset: "1700000002"}},
		{"a fixed window: its end", httplimit.DraftHeaders,
			ratelease.Result{Allowed: true, Limit: limits[2], Remaining: 28, ResetAfter: 40 * time.Second},
			httplimit.Fields{Policy: policy, RateLimit: `"api-1m-2";r=28;t=40`}},
		{"full", httplimit.DraftHeaders,
			ratelease.Result{Allowed: true, Limit: limits[0], Remaining: 10},
			httplimit.Fields{Policy: policy, RateLimit: `"api-1s";r=10;t=0`}},
		{"a denial: Retry-After rounded up", httplimit.XRateLimitHeaders,
			ratelease.Result{Limit: limits[0], RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Second},
			httplimit.Fields{Limit: "10", Remaining: "0", Reset: "1700000002", RetryAfter: "2"}},
		{"a denial without styles", httplimit.NoHeaders,
			ratelease.Result{Limit: limits[0], RetryAfter: time.Millisecond},
			httplimit.Fields{RetryAfter: "1"}},
	} {
		f := c.style.Fields(applying, []httplimit.Decision{{Dimension: d, Key: "k", Result: c.res}}, now)
		if f != c.want {
			t.Errorf("%s:\n%+v\nwant %+v", c.name, f, c.want)
		}
	}
}

// Bad input to the exported parts never panics: a nil policy is
// ErrNoPolicy, nil and zero Dimensions have empty names, no decisions
// have no fields, a nil Limiter refunds nothing.
func TestFieldsBadInput(t *testing.T) {
	if d, err := httplimit.NewDimension(nil); !errors.Is(err, httplimit.ErrNoPolicy) || d != nil {
		t.Errorf("NewDimension(nil): %v, %v", d, err)
	}
	var nilDim *httplimit.Dimension
	if nilDim.Policy() != nil || nilDim.LimitName(ratelease.PerSecond(1)) != "" ||
		new(httplimit.Dimension).LimitName(ratelease.PerSecond(1)) != "" {
		t.Error("a nil or zero Dimension has a policy or a name")
	}
	if f := httplimit.AllHeaders.Fields(nil, nil, time.Now()); f != (httplimit.Fields{}) {
		t.Errorf("no decision: %+v", f)
	}
	deny := ratelease.Result{RetryAfter: time.Second}
	f := httplimit.AllHeaders.Fields([]*httplimit.Dimension{nil, {}}, []httplimit.Decision{{Result: deny}}, time.Unix(0, 0))
	if f.Policy != ", " || f.RateLimit != ";r=0;t=1" || f.Limit != "" || f.RetryAfter != "1" {
		t.Errorf("nil and zero Dimensions: %+v", f)
	}
	if d := httplimit.Tightest(nil); d != (httplimit.Decision{}) {
		t.Errorf("Tightest(nil) = %+v", d)
	}
	httplimit.Refund(context.Background(), nil, []httplimit.Decision{{Result: ratelease.Result{Allowed: true}}}, 1)
	l := newLimiter(t, ratelease.WithExact())
	httplimit.Refund(context.Background(), l, []httplimit.Decision{{Result: ratelease.Result{Allowed: true}}}, 1) // no policy
}

// TestTightest: a denial decides, or else the fewest units left, the first
// of equals.
func TestTightest(t *testing.T) {
	a, b, c := httplimit.Decision{Key: "a"}, httplimit.Decision{Key: "b"}, httplimit.Decision{Key: "c"}
	a.Result = ratelease.Result{Allowed: true, Remaining: 5}
	b.Result = ratelease.Result{Allowed: true, Remaining: 2}
	c.Result = ratelease.Result{Allowed: true, Remaining: 2}
	if got := httplimit.Tightest([]httplimit.Decision{a, b, c}).Key; got != "b" {
		t.Errorf("fewest left: %s, want b", got)
	}
	c.Result = ratelease.Result{Remaining: 9}
	if got := httplimit.Tightest([]httplimit.Decision{a, b, c}).Key; got != "c" {
		t.Errorf("a denial: %s, want c", got)
	}
}

// TestClientAddr: the headers are read only from a trusted peer, through
// the function given, by name; addresses are normalized.
func TestClientAddr(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	headers := map[string][]string{"x-forwarded-for": {"198.51.100.7"}, "x-real-ip": {"198.51.100.8"}}
	var asked []string
	header := func(name string) []string {
		asked = append(asked, name)
		return headers[strings.ToLower(name)]
	}
	for _, c := range []struct {
		peer    string
		trusted []netip.Prefix
		want    string
		asked   string
	}{
		{"192.0.2.1", nil, "192.0.2.1", ""},
		{"10.0.0.1", nil, "10.0.0.1", ""},
		{"192.0.2.1", proxies, "192.0.2.1", ""},
		{"10.0.0.1", proxies, "198.51.100.7", "X-Forwarded-For"},
		{"::ffff:10.0.0.1", proxies, "198.51.100.7", "X-Forwarded-For"}, // mapped: the proxy's IPv4
		{"fe80::1%eth0", nil, "fe80::1", ""},
	} {
		asked = nil
		if got := httplimit.ClientAddr(netip.MustParseAddr(c.peer), header, c.trusted...); got.String() != c.want ||
			strings.Join(asked, ",") != c.asked {
			t.Errorf("peer %s, trusted %v: %v, asked %q; want %s, asked %q", c.peer, c.trusted, got, asked, c.want, c.asked)
		}
	}
	delete(headers, "x-forwarded-for")
	asked = nil
	if got := httplimit.ClientAddr(netip.MustParseAddr("10.0.0.1"), header, proxies...); got.String() != "198.51.100.8" ||
		strings.Join(asked, ",") != "X-Forwarded-For,X-Real-IP" {
		t.Errorf("X-Real-IP: %v, asked %q", got, asked)
	}
	if got := httplimit.ClientAddr(netip.Addr{}, header, proxies...); got.IsValid() {
		t.Errorf("the zero peer: %v", got)
	}
	for addr, want := range map[string]string{
		"192.0.2.1": "192.0.2.1", "::ffff:192.0.2.1": "192.0.2.1",
		"2001:db8:1:2:3::4": "2001:db8:1:2::/64", "fe80::1%eth0": "fe80::/64",
	} {
		if got := httplimit.IPKey(netip.MustParseAddr(addr)); got != want {
			t.Errorf("IPKey(%s) = %q, want %q", addr, got, want)
		}
	}
	if got := httplimit.IPKey(netip.Addr{}); got != "" {
		t.Errorf("IPKey of the zero Addr: %q", got)
	}
}

// FuzzClientAddr: whatever the headers say, ClientAddr returns the peer or
// an address of the headers, and the peer when it is not trusted.
func FuzzClientAddr(f *testing.F) {
	f.Add("10.0.0.1", "198.51.100.7, 10.0.0.2", "198.51.100.8")
	f.Add("192.0.2.1", "garbage", "")
	f.Add("10.9.9.9", " , ,,", "::ffff:10.0.0.1")
	f.Add("::ffff:10.0.0.1", "fe80::1%eth0, 10.1.1.1", "x")
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	f.Fuzz(func(t *testing.T, peer, xff, xrealip string) {
		p, err := netip.ParseAddr(peer)
		if err != nil {
			return
		}
		header := func(name string) []string {
			switch name {
			case "X-Forwarded-For":
				if xff != "" {
					return []string{xff}
				}
			case "X-Real-IP":
				return []string{xrealip}
			}
			return nil
		}
		got := httplimit.ClientAddr(p, header, proxies...)
		if got.Zone() != "" || got.Is4In6() {
			t.Errorf("peer %s: %v is not normalized", peer, got)
		}
		norm := p.WithZone("").Unmap()
		trusted := false
		for _, pr := range proxies {
			trusted = trusted || pr.Contains(norm)
		}
		candidates := map[netip.Addr]bool{norm: true}
		if trusted {
			for _, s := range append(strings.Split(xff, ","), xrealip) {
				if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
					candidates[a.WithZone("").Unmap()] = true
				}
			}
		}
		if !candidates[got] {
			t.Errorf("peer %s (trusted: %v), X-Forwarded-For %q, X-Real-IP %q: %v, neither the peer nor of the headers", peer, trusted, xff, xrealip, got)
		}
		if key := httplimit.IPKey(got); key == "" {
			t.Errorf("%v has no key", got)
		}
	})
}
