package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/extra/grpclimit"
)

// recorder is a denied handler that records each denial and answers as
// the default does.
type recorder struct {
	mu      sync.Mutex
	denials []grpclimit.Denial
}

func (r *recorder) handler() grpclimit.Option {
	return grpclimit.WithDeniedHandler(func(ctx context.Context, d grpclimit.Denial) error {
		r.mu.Lock()
		r.denials = append(r.denials, d)
		r.mu.Unlock()
		return grpclimit.DefaultDeniedHandler(ctx, d)
	})
}

// last returns the last denial recorded.
func (r *recorder) last(t *testing.T) grpclimit.Denial {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.denials) == 0 {
		t.Fatal("no denial recorded")
	}
	return r.denials[len(r.denials)-1]
}

// errRecorder is an error handler that records the last error and
// answers as the default does. (The server's goroutines write it: a mutex
// orders that before the test reads it.)
type errRecorder struct {
	mu  sync.Mutex
	err error
}

func (r *errRecorder) handler() grpclimit.Option {
	return grpclimit.WithErrorHandler(func(ctx context.Context, c grpclimit.Call, err error) error {
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		return grpclimit.DefaultErrorHandler(ctx, c, err)
	})
}

func (r *errRecorder) last() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// details returns the RetryInfo and QuotaFailure of err's status.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		case error:
			t.Fatalf("a detail does not decode: %v", d)
		}
	}
	if ri == nil || qf == nil {
		t.Fatalf("%v: RetryInfo %v, QuotaFailure %v; want both", err, ri, qf)
	}
	return ri, qf
}

// withMD is an outgoing context carrying metadata (name, value, …).
func withMD(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// TestUnaryDenial: three calls of 3/min pass with the rate-limit fields in
// their header metadata; the fourth is ResourceExhausted with a RetryInfo
// whose delay is the denying Result's RetryAfter, a QuotaFailure, and the
// fields of a denial.
func TestUnaryDenial(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			p := newPolicy(t, "api", ratelease.PerMinute(3))
			var rec recorder
			lim := newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.Metadata("X-API-Key")), rec.handler())
			s := serve(t, lim.ServerOptions())
			ctx := withMD(ctxFor(t), "x-api-key", "alice")
			for i := 1; i <= 3; i++ {
				var hdr, tr metadata.MD
				if _, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr)); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if len(tr) != 0 {
					t.Errorf("call %d: trailer %v, want the fields in the header only", i, tr)
				}
				want := map[string]string{
					"ratelimit-policy": `"api";q=3;w=60`,
					// t: until the next unit comes back, 20s at 3/min.
					"ratelimit":             fmt.Sprintf(`"api";r=%d;t=20`, 3-i),
					"x-ratelimit-limit":     "3",
					"x-ratelimit-remaining": strconv.Itoa(3 - i),
				}
				for k, v := range want {
					if got := hdr.Get(k); len(got) != 1 || got[0] != v {
						t.Errorf("call %d: %s = %q, want %q", i, k, got, v)
					}
				}
				reset, err := strconv.ParseInt(first(hdr, "x-ratelimit-reset"), 10, 64)
				if d := time.Until(time.Unix(reset, 0)); err != nil || d < time.Duration(20*i-2)*time.Second || d > time.Duration(20*i+1)*time.Second {
					t.Errorf("call %d: x-ratelimit-reset %q is %v from now, want about %ds", i, first(hdr, "x-ratelimit-reset"), d, 20*i)
				}
				if hdr.Get("retry-after") != nil {
					t.Errorf("call %d: retry-after on an admitted call", i)
				}
			}
			var hdr, trailer metadata.MD
			_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trailer))
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("4th call: %v, want ResourceExhausted", err)
			}
			if len(hdr) != 0 {
				t.Errorf("denial: header %v, want none (a Trailers-Only response)", hdr)
			}
			d := rec.last(t)
			res := d.Result
			if res.Allowed || res.RetryAfter <= 19*time.Second || res.RetryAfter > 20*time.Second {
				t.Fatalf("the denying Result: %+v, want a denial with RetryAfter about 20s (one token of 3/min)", res)
			}
			if d.FullMethod != healthpb.Health_Check_FullMethodName || d.Policy != p || d.Key != "alice" || d.LimitName != "api" || d.Request == nil {
				t.Errorf("Denial %+v", d)
			}
			ri, qf := details(t, err)
			if got := ri.GetRetryDelay().AsDuration(); got != res.RetryAfter {
				t.Errorf("RetryInfo delay %v, want the Result's RetryAfter %v", got, res.RetryAfter)
			}
			if got, ok := grpclimit.RetryDelay(err); !ok || got != res.RetryAfter {
				t.Errorf("RetryDelay: %v %v, want %v", got, ok, res.RetryAfter)
			}
			v := qf.GetViolations()
			if len(v) != 1 || v[0].GetSubject() != "api" || v[0].GetQuotaId() != "api" || v[0].GetQuotaValue() != 3 ||
				v[0].GetDescription() != "rate limit exceeded: 3 req/min (burst 3)" {
				t.Errorf("QuotaFailure %v", qf)
			}
			if strings.Contains(qf.String(), "alice") || strings.Contains(err.Error(), "alice") {
				t.Errorf("the key is in the status: %v, %v", err, qf)
			}
			// On a denial, in the trailer, t and x-ratelimit-reset say what
			// retry-after says.
			for k, v := range map[string]string{
				"retry-after":           "20",
				"ratelimit":             `"api";r=0;t=20`,
				"ratelimit-policy":      `"api";q=3;w=60`,
				"x-ratelimit-limit":     "3",
				"x-ratelimit-remaining": "0",
			} {
				if got := first(trailer, k); got != v {
					t.Errorf("denial: %s = %q, want %q", k, got, v)
				}
			}
			reset, perr := strconv.ParseInt(first(trailer, "x-ratelimit-reset"), 10, 64)
			if d := time.Until(time.Unix(reset, 0)); perr != nil || d < 18*time.Second || d > 21*time.Second {
				t.Errorf("x-ratelimit-reset on a denial is %v from now, want about 20s", d)
			}
			if got, want := first(trailer, "grpc-retry-pushback-ms"), strconv.FormatInt(int64((res.RetryAfter+time.Millisecond-1)/time.Millisecond), 10); got != want {
				t.Errorf("grpc-retry-pushback-ms %q, want %q", got, want)
			}
			// Another key has its own budget.
			if _, err := s.health.Check(withMD(ctxFor(t), "x-api-key", "bob"), &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("another key: %v", err)
			}
			// No key: the policy does not apply, and no field is sent.
			for i := 0; i < 4; i++ {
				var hdr metadata.MD
				if _, err := s.health.Check(ctxFor(t), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil || hdr.Get("ratelimit") != nil {
					t.Fatalf("no key, call %d: %v, ratelimit %q", i, err, hdr.Get("ratelimit"))
				}
			}
		})
	}
}

// first returns md's first value of k, or "".
func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// TestStream: a stream is decided when it opens, with the fields in its
// header metadata, and its denial is the status that Recv returns.
func TestStream(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "watch", ratelease.PerMinute(1))
	var rec recorder
	s := serve(t, newInterceptor(t, l, p, rec.handler()).ServerOptions())

	ctx, cancel := context.WithCancel(ctxFor(t))
	w, err := s.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("admitted stream: %v, %v", res, err)
	}
	hdr, err := w.Header()
	if err != nil || first(hdr, "ratelimit") != `"watch";r=0;t=60` || first(hdr, "ratelimit-policy") != `"watch";q=1;w=60` {
		t.Errorf("admitted stream's header: %v, %v", hdr, err)
	}
	cancel()

	w, err = s.health.Watch(ctxFor(t), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Recv()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2nd stream: %v, want ResourceExhausted", err)
	}
	d := rec.last(t)
	if d.FullMethod != healthpb.Health_Watch_FullMethodName || d.Request != nil || d.Key != "127.0.0.1" {
		t.Errorf("the stream's Denial: %+v", d)
	}
	if ri, _ := details(t, err); ri.GetRetryDelay().AsDuration() != d.Result.RetryAfter || d.Result.RetryAfter <= 59*time.Second {
		t.Errorf("RetryInfo %v, the Result's RetryAfter %v", ri.GetRetryDelay().AsDuration(), d.Result.RetryAfter)
	}
	if tr := w.Trailer(); first(tr, "retry-after") != "60" || first(tr, "ratelimit") != `"watch";r=0;t=60` || first(tr, "grpc-retry-pushback-ms") == "" {
		t.Errorf("denied stream's trailer: %v", tr)
	}
	if hdr, err := w.Header(); len(hdr) != 0 {
		t.Errorf("denied stream's header: %v, %v; want none", hdr, err)
	}
	// Unary calls and streams share the client's budget.
	if _, err := s.health.Check(ctxFor(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a unary call after the stream: %v", err)
	}
}

// TestMethods: a method's own policy, then its service's, then New's;
// exempt methods are not limited and get no fields.
func TestMethods(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	def := newPolicy(t, "default", ratelease.PerMinute(1))
	check := newPolicy(t, "check", ratelease.PerMinute(3))
	svc := newPolicy(t, "health", ratelease.PerMinute(2))
	lim := newInterceptor(t, l, def,
		grpclimit.WithMethod(healthpb.Health_Check_FullMethodName, check),
		grpclimit.WithMethod("/grpc.health.v1.Health/*", svc),
		grpclimit.WithExempt(healthpb.Health_List_FullMethodName))
	s := serve(t, lim.ServerOptions())
	ctx := ctxFor(t)
	// Each call returns its error and its header metadata. (A stream's
	// come from the stream: its grpc.Header option may be written after
	// the stream ends.)
	type caller func() (metadata.MD, error)
	count := func(name string, call caller) (admitted int, policy string) {
		for i := 0; i < 5; i++ {
			hdr, err := call()
			switch status.Code(err) {
			case codes.OK:
				admitted++
			case codes.ResourceExhausted:
			default:
				t.Fatalf("%s: %v", name, err)
			}
			policy = first(hdr, "ratelimit-policy")
		}
		return admitted, policy
	}
	for _, c := range []struct {
		name   string
		call   caller
		want   int
		policy string
	}{
		{"Check", func() (metadata.MD, error) {
			var hdr, tr metadata.MD
			_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr))
			return metadata.Join(hdr, tr), err
		}, 3, `"check";q=3;w=60`},
		{"Watch", func() (metadata.MD, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := s.health.Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return nil, err
			}
			_, err = w.Recv()
			hdr, _ := w.Header()
			return metadata.Join(hdr, w.Trailer()), err
		}, 2, `"health";q=2;w=60`},
		{"List", func() (metadata.MD, error) {
			var hdr, tr metadata.MD
			_, err := s.health.List(ctx, &healthpb.HealthListRequest{}, grpc.Header(&hdr), grpc.Trailer(&tr))
			return metadata.Join(hdr, tr), err
		}, 5, ""},
		{"Echo", func() (metadata.MD, error) {
			var hdr, tr metadata.MD
			err := s.call(ctx, grpc.Header(&hdr), grpc.Trailer(&tr))
			return metadata.Join(hdr, tr), err
		}, 1, `"default";q=1;w=60`},
	} {
		if got, policy := count(c.name, c.call); got != c.want || policy != c.policy {
			t.Errorf("%s: %d of 5 admitted under %q, want %d under %q", c.name, got, policy, c.want, c.policy)
		}
	}
}

// TestDimensions: every dimension must admit; a denial by a later one
// refunds the earlier ones, and the most restrictive fills x-ratelimit.
func TestDimensions(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			perIP := newPolicy(t, "ip", ratelease.PerMinute(5))
			perKey := newPolicy(t, "key", ratelease.PerMinute(2))
			lim := newInterceptor(t, l, perIP, grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key")))
			s := serve(t, lim.ServerOptions())
			call := func(kv ...string) (metadata.MD, error) {
				var hdr, tr metadata.MD
				err := s.call(withMD(ctxFor(t), kv...), grpc.Header(&hdr), grpc.Trailer(&tr))
				return metadata.Join(hdr, tr), err
			}
			// The API key's limit is the tighter: it decides, and its
			// denial ends the call.
			for i := 0; i < 2; i++ {
				hdr, err := call("x-api-key", "alice")
				if err != nil || first(hdr, "x-ratelimit-limit") != "2" {
					t.Fatalf("call %d: %v, x-ratelimit-limit %q", i, err, first(hdr, "x-ratelimit-limit"))
				}
				if got, want := first(hdr, "ratelimit"), fmt.Sprintf(`"ip";r=%d;t=12, "key";r=%d;t=30`, 4-i, 1-i); got != want {
					t.Errorf("call %d: ratelimit %q, want %q", i, got, want)
				}
			}
			hdr, err := call("x-api-key", "alice")
			if status.Code(err) != codes.ResourceExhausted || first(hdr, "x-ratelimit-limit") != "2" {
				t.Fatalf("3rd call of alice: %v, x-ratelimit-limit %q", err, first(hdr, "x-ratelimit-limit"))
			}
			if _, qf := details(t, err); qf.GetViolations()[0].GetSubject() != "key" {
				t.Errorf("QuotaFailure %v, want the key policy's", qf)
			}
			if got := first(hdr, "ratelimit-policy"); got != `"ip";q=5;w=60, "key";q=2;w=60` {
				t.Errorf("ratelimit-policy %q", got)
			}
			// Without an API key only the IP limit applies: 5 - 2 = 3 left,
			// the unit of alice's denied call refunded.
			for i := 0; i < 3; i++ {
				hdr, err := call()
				if err != nil || first(hdr, "x-ratelimit-limit") != "5" || first(hdr, "ratelimit-policy") != `"ip";q=5;w=60` {
					t.Fatalf("anonymous %d: %v, %v", i, err, hdr)
				}
			}
			// Now the IP's limit denies even bob, who has his own key budget.
			if hdr, err := call("x-api-key", "bob"); status.Code(err) != codes.ResourceExhausted || first(hdr, "x-ratelimit-limit") != "5" {
				t.Errorf("bob from a spent IP: %v, x-ratelimit-limit %q", err, first(hdr, "x-ratelimit-limit"))
			}
			if s.echo.calls.Load() != 5 {
				t.Errorf("the handler ran %d times, want 5", s.echo.calls.Load())
			}
		})
	}
}

// TestDenialRefundsEarlier: the units an earlier dimension charged for a
// call that a later one denies come back, whatever the dimensions' order.
func TestDenialRefundsEarlier(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(4))
	perKey := newPolicy(t, "key", ratelease.PerMinute(5))
	lim := newInterceptor(t, l, perIP, grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key")),
		grpclimit.WithCost(func(context.Context, grpclimit.Call) int { return 2 }))
	s := serve(t, lim.ServerOptions())
	ctx := withMD(ctxFor(t), "x-api-key", "k")
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if err := s.call(ctx); status.Code(err) != want { // ip 2 left, key 3; ip 0, key 1; ip (0) denies
			t.Fatalf("call %d: %v, want %v", i, err, want)
		}
	}
	if res, _ := l.Peek(context.Background(), perKey, "k"); res.Remaining != 1 {
		t.Errorf("key after the denial: %d left, want 1 (nothing charged)", res.Remaining)
	}
	// Key denies after ip admitted: ip's units come back.
	l2 := newLimiter(t, ratelease.WithExact())
	lim2 := newInterceptor(t, l2, perKey, grpclimit.WithKey(grpclimit.Metadata("x-api-key")),
		grpclimit.WithDimension(perIP, nil), grpclimit.WithCost(func(context.Context, grpclimit.Call) int { return 2 }))
	s2 := serve(t, lim2.ServerOptions())
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if err := s2.call(withMD(ctxFor(t), "x-api-key", "k"+strconv.Itoa(i/2))); status.Code(err) != want {
			t.Fatalf("second interceptor, call %d: %v, want %v", i, err, want)
		}
	}
	if res, _ := l2.Peek(context.Background(), perKey, "k1"); res.Remaining != 5 {
		t.Errorf("k1 after the ip's denial: %d left, want 5 (its 2 units refunded)", res.Remaining)
	}
}

func TestCost(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l := newLimiter(t, m.opts...)
			p := newPolicy(t, "batch", ratelease.PerMinute(10))
			// The cost is in the request: the health check's service name.
			cost := func(_ context.Context, c grpclimit.Call) int {
				n, _ := strconv.Atoi(c.Request.(*healthpb.HealthCheckRequest).GetService())
				return n
			}
			s := serve(t, newInterceptor(t, l, p, grpclimit.WithCost(cost)).ServerOptions())
			for _, c := range []struct {
				cost string
				code codes.Code
				left string
			}{
				{"4", codes.OK, "6"}, {"5", codes.OK, "1"}, {"2", codes.ResourceExhausted, "1"}, {"1", codes.OK, "0"},
				{"0", codes.Internal, ""},         // a cost below 1 is a bug of the cost function
				{"11", codes.InvalidArgument, ""}, // no call of this cost can ever pass
			} {
				var hdr, tr metadata.MD
				_, err := s.health.Check(ctxFor(t), &healthpb.HealthCheckRequest{Service: c.cost}, grpc.Header(&hdr), grpc.Trailer(&tr))
				hdr = metadata.Join(hdr, tr)
				if status.Code(err) != c.code || first(hdr, "x-ratelimit-remaining") != c.left {
					t.Errorf("cost %s: %v, remaining %q; want %v, %q", c.cost, err, first(hdr, "x-ratelimit-remaining"), c.code, c.left)
				}
			}
		})
	}
}

// TestKeyFuncs: keys from metadata, the peer (and proxies' metadata from
// trusted peers only), the method, or any function of the call.
func TestKeyFuncs(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "one", ratelease.PerMinute(1))
	ok := func(err error) bool { return err == nil }
	denied := func(err error) bool { return status.Code(err) == codes.ResourceExhausted }

	// Behind a trusted proxy (all of loopback), x-forwarded-for names the client.
	s := serve(t, newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.ClientIP(netip.MustParsePrefix("127.0.0.0/8")))).ServerOptions())
	xff := func(v string) error { return s.call(withMD(ctxFor(t), "x-forwarded-for", v)) }
	if !ok(xff("198.51.100.1")) || !denied(xff("10.0.0.1, 198.51.100.1")) || !ok(xff("198.51.100.2")) {
		t.Error("ClientIP from a trusted proxy does not key by x-forwarded-for")
	}
	// An untrusted peer's x-forwarded-for is ignored: the peer decides.
	p2 := newPolicy(t, "two", ratelease.PerMinute(1))
	s = serve(t, newInterceptor(t, l, p2).ServerOptions())
	if !ok(xff("198.51.100.1")) || !denied(xff("198.51.100.2")) {
		t.Error("ClientIP without trusted proxies reads x-forwarded-for")
	}
	// One budget per method.
	p3 := newPolicy(t, "three", ratelease.PerMinute(1))
	s = serve(t, newInterceptor(t, l, p3, grpclimit.WithKey(grpclimit.FullMethod())).ServerOptions())
	ctx := ctxFor(t)
	if !ok(s.call(ctx)) || !denied(s.call(ctx)) {
		t.Error("FullMethod: Echo is not limited")
	}
	if _, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{}); !ok(err) {
		t.Errorf("FullMethod: Check shares Echo's budget: %v", err)
	}
	// Any function: the key in the request.
	p4 := newPolicy(t, "four", ratelease.PerMinute(1))
	byService := func(_ context.Context, c grpclimit.Call) string {
		if r, ok := c.Request.(*healthpb.HealthCheckRequest); ok {
			return r.GetService()
		}
		return ""
	}
	s = serve(t, newInterceptor(t, l, p4, grpclimit.WithKey(byService)).ServerOptions())
	check := func(svc string) error {
		_, err := s.health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		return err
	}
	if !ok(check("1")) || !denied(check("1")) || !ok(check("2")) || !ok(check("")) || !ok(check("")) {
		t.Error("a function of the request does not key the limit")
	}
}

// TestClientIP covers the peer kinds and proxy metadata without a server.
func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		peer net.Addr
		md   []string
		want string
	}{
		{tcp("192.0.2.1:5"), nil, "192.0.2.1"},
		{tcp("[2001:db8:1:2:3:4:5:6]:5"), nil, "2001:db8:1:2::/64"},
		{tcp("[::ffff:192.0.2.1]:5"), nil, "192.0.2.1"},
		{tcp("192.0.2.1:5"), []string{"x-forwarded-for", "198.51.100.1"}, "192.0.2.1"}, // untrusted peer
		{tcp("10.1.1.1:5"), []string{"x-forwarded-for", "198.51.100.1, 10.2.2.2"}, "198.51.100.1"},
		{tcp("10.1.1.1:5"), []string{"x-forwarded-for", "203.0.113.9, 198.51.100.1"}, "198.51.100.1"}, // the forged hop is left of it
		{tcp("10.1.1.1:5"), []string{"x-forwarded-for", "garbage, 198.51.100.1"}, "198.51.100.1"},
		{tcp("10.1.1.1:5"), []string{"x-forwarded-for", "10.3.3.3"}, "10.3.3.3"}, // only proxies: the leftmost
		{tcp("10.1.1.1:5"), []string{"x-real-ip", "198.51.100.7"}, "198.51.100.7"},
		{tcp("10.1.1.1:5"), []string{"x-real-ip", "nope"}, "10.1.1.1"},
		{&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, nil, "/run/app.sock"},
		{nil, nil, ""},
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(c.md...))
		if c.peer != nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: c.peer})
		}
		if got := grpclimit.ClientIP(trusted...)(ctx, grpclimit.Call{}); got != c.want {
			t.Errorf("peer %v, metadata %v: %q, want %q", c.peer, c.md, got, c.want)
		}
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1", "x-api-key", "k2"))
	if got := grpclimit.Metadata("X-Api-Key")(ctx, grpclimit.Call{}); got != "k1" {
		t.Errorf("Metadata: %q, want the first value", got)
	}
	if got := grpclimit.Metadata("x-other")(ctx, grpclimit.Call{}); got != "" {
		t.Errorf("Metadata of a missing key: %q", got)
	}
}

// TestShadowDimension: a dimension in shadow mode never denies, though its
// fields say what it would decide, and its shadow admissions are not
// refunded when a later dimension denies: they charged nothing.
func TestShadowDimension(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	perIP := newPolicy(t, "ip", ratelease.PerMinute(1))
	perKey := newPolicy(t, "key", ratelease.PerMinute(2))
	lim := newInterceptor(t, l, perIP.Shadow(), grpclimit.WithDimension(perKey, grpclimit.Metadata("x-api-key")))
	s := serve(t, lim.ServerOptions())
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		var hdr, tr metadata.MD
		err := s.call(withMD(ctxFor(t), "x-api-key", "k"), grpc.Header(&hdr), grpc.Trailer(&tr))
		if hdr = metadata.Join(hdr, tr); status.Code(err) != want || first(hdr, "x-ratelimit-remaining") != "0" {
			t.Errorf("call %d: %v, x-ratelimit-remaining %q; want %v, 0", i, err, first(hdr, "x-ratelimit-remaining"), want)
		}
	}
	if res, _ := l.Peek(context.Background(), perIP, "127.0.0.1"); res.Allowed || res.Remaining != 0 {
		t.Errorf("ip after the denial: %+v, want nothing refunded", res)
	}
	if st := l.Stats().Policies[perIP.Name()]; st.ShadowDenied != 2 {
		t.Errorf("ip's stats: %+v, want 2 shadow-denied", st)
	}
}

// TestBlocked: a blocked key is denied with the block's time left.
func TestBlocked(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(100))
	if err := l.Block(context.Background(), p, "127.0.0.1", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	s := serve(t, newInterceptor(t, l, p).ServerOptions())
	err := s.call(ctxFor(t))
	ri, qf := details(t, err)
	if status.Code(err) != codes.ResourceExhausted || ri.GetRetryDelay().AsDuration() != 90*time.Second || qf.GetViolations()[0].GetDescription() != "blocked" {
		t.Errorf("blocked: %v, %v, %v", err, ri, qf)
	}
}

func TestNewErrors(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(3))
	for _, c := range []struct {
		name string
		l    *ratelease.Limiter
		p    *ratelease.Policy
		opts []grpclimit.Option
		want error
	}{
		{"nil limiter", nil, p, nil, grpclimit.ErrNoLimiter},
		{"nil policy", l, nil, nil, grpclimit.ErrNoPolicy},
		{"nil dimension", l, p, []grpclimit.Option{grpclimit.WithDimension(nil, nil)}, grpclimit.ErrNoPolicy},
		{"nil method policy", l, p, []grpclimit.Option{grpclimit.WithMethod("/a.B/C", nil)}, grpclimit.ErrNoPolicy},
		{"method without a slash", l, p, []grpclimit.Option{grpclimit.WithMethod("a.B/C", p)}, grpclimit.ErrInvalidOption},
		{"method without a method", l, p, []grpclimit.Option{grpclimit.WithMethod("/a.B/", p)}, grpclimit.ErrInvalidOption},
		{"method without a service", l, p, []grpclimit.Option{grpclimit.WithMethod("//C", p)}, grpclimit.ErrInvalidOption},
		{"method of three parts", l, p, []grpclimit.Option{grpclimit.WithMethod("/a/B/C", p)}, grpclimit.ErrInvalidOption},
		{"empty method", l, p, []grpclimit.Option{grpclimit.WithMethod("", p)}, grpclimit.ErrInvalidOption},
		{"method twice", l, p, []grpclimit.Option{grpclimit.WithMethod("/a.B/C", p), grpclimit.WithMethod("/a.B/C", p)}, grpclimit.ErrInvalidOption},
		{"service twice", l, p, []grpclimit.Option{grpclimit.WithMethod("/a.B/*", p), grpclimit.WithMethod("/a.B/*", p)}, grpclimit.ErrInvalidOption},
		{"method exempt too", l, p, []grpclimit.Option{grpclimit.WithExempt("/a.B/C"), grpclimit.WithMethod("/a.B/C", p)}, grpclimit.ErrInvalidOption},
		{"bad exempt", l, p, []grpclimit.Option{grpclimit.WithExempt("C")}, grpclimit.ErrInvalidOption},
		{"nil denied handler", l, p, []grpclimit.Option{grpclimit.WithDeniedHandler(nil)}, grpclimit.ErrInvalidOption},
		{"nil error handler", l, p, []grpclimit.Option{grpclimit.WithErrorHandler(nil)}, grpclimit.ErrInvalidOption},
		{"unknown header style", l, p, []grpclimit.Option{grpclimit.WithHeaders(1 << 5)}, grpclimit.ErrInvalidOption},
	} {
		if i, err := grpclimit.New(c.l, c.p, c.opts...); !errors.Is(err, c.want) || i != nil {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := grpclimit.New(l, p, grpclimit.WithMethod("/a.B/C", p), grpclimit.WithMethod("/a.B/*", p), nil,
		grpclimit.WithExempt("/a.D/*"), grpclimit.WithHeaders(grpclimit.NoHeaders), grpclimit.WithKey(nil)); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestErrors: limiter errors become status codes through the error
// handler, and the handler may let a call through.
func TestErrors(t *testing.T) {
	l := newLimiter(t, ratelease.WithExact())
	p := newPolicy(t, "api", ratelease.PerMinute(100))
	long := strings.Repeat("k", ratelease.MaxKeyLen+1)
	var errs errRecorder
	record := errs.handler()
	s := serve(t, newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.Metadata("x-api-key")), record).ServerOptions())
	if err := s.call(withMD(ctxFor(t), "x-api-key", long)); status.Code(err) != codes.InvalidArgument || !errors.Is(errs.last(), ratelease.ErrInvalidKey) {
		t.Errorf("a key too long: %v, %v", err, errs.last())
	}
	// An error in a later dimension refunds the earlier ones: the call
	// did not happen.
	one := newPolicy(t, "one", ratelease.PerMinute(1))
	s = serve(t, newInterceptor(t, l, one, grpclimit.WithDimension(p, grpclimit.Metadata("x-api-key"))).ServerOptions())
	if err := s.call(withMD(ctxFor(t), "x-api-key", long)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a key too long in the second dimension: %v", err)
	}
	if err := s.call(ctxFor(t)); err != nil {
		t.Errorf("the first dimension's unit was not refunded after the error: %v", err)
	}
	// A handler that returns nil lets the call through, undecided.
	through := grpclimit.WithErrorHandler(func(context.Context, grpclimit.Call, error) error { return nil })
	s = serve(t, newInterceptor(t, l, p, grpclimit.WithKey(grpclimit.Metadata("x-api-key")), through).ServerOptions())
	if err := s.call(withMD(ctxFor(t), "x-api-key", long)); err != nil || s.echo.calls.Load() != 1 {
		t.Errorf("an error handler returning nil: %v, handler ran %d times", err, s.echo.calls.Load())
	}
	// A closed Limiter: Unavailable.
	_ = l.Close()
	s = serve(t, newInterceptor(t, l, p, record).ServerOptions())
	if err := s.call(ctxFor(t)); status.Code(err) != codes.Unavailable || !errors.Is(errs.last(), ratelease.ErrClosed) {
		t.Errorf("closed Limiter: %v, %v", err, errs.last())
	}
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", ratelease.ErrUnavailable), codes.Unavailable},
		{ratelease.ErrExceedsCapacity, codes.InvalidArgument},
		{ratelease.ErrInvalidN, codes.Internal},
	} {
		if err := grpclimit.DefaultErrorHandler(context.Background(), grpclimit.Call{FullMethod: "/a.B/C"}, c.err); status.Code(err) != c.want {
			t.Errorf("DefaultErrorHandler(%v): %v, want %v", c.err, err, c.want)
		}
	}
}

// deadAddr returns a loopback address where nothing listens: a port that
// was just free.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// TestFailClosed: with Redis unreachable a FailClosed Limiter's calls get
// codes.Unavailable (and the handler never runs); a FailOpen one admits.
func TestFailClosed(t *testing.T) {
	addr := deadAddr(t)
	p := newPolicy(t, "api", ratelease.PerMinute(100))
	for _, c := range []struct {
		mode ratelease.FailureMode
		want codes.Code
	}{
		{ratelease.FailClosed, codes.Unavailable},
		{ratelease.FailOpen, codes.OK},
	} {
		l := limiterOn(t, addr, ratelease.WithFailureMode(c.mode), ratelease.WithRedisTimeout(200*time.Millisecond))
		var errs errRecorder
		record := errs.handler()
		s := serve(t, newInterceptor(t, l, p, record).ServerOptions())
		for i := 0; i < 3; i++ {
			err := s.call(ctxFor(t))
			if status.Code(err) != c.want {
				t.Fatalf("mode %v, call %d: %v, want %v", c.mode, i, err, c.want)
			}
			if c.want == codes.Unavailable && (!errors.Is(errs.last(), ratelease.ErrUnavailable) || strings.Contains(err.Error(), addr)) {
				t.Errorf("FailClosed: the limiter's error %v, the call's %v (want ErrUnavailable, and no Redis address told)", errs.last(), err)
			}
		}
		want := int64(0)
		if c.want == codes.OK {
			want = 3
		}
		if s.echo.calls.Load() != want {
			t.Errorf("mode %v: the handler ran %d times, want %d", c.mode, s.echo.calls.Load(), want)
		}
	}
}
