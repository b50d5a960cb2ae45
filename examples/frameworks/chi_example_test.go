package frameworks_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// chi takes httplimit's middleware as it is: r.Use(mw). Every client IP
// gets 2 requests a minute; the third is a 429 with Retry-After.
func Example_chi() {
	mr, _ := miniredis.Run() // your Redis instead
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0)) // a clock that stands still: the output is the same every run
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	perIP, _ := ratelease.NewPolicy("per-ip", ratelease.PerMinute(2))
	mw, err := httplimit.New(limiter, perIP)
	if err != nil {
		panic(err) // a nil Limiter or policy
	}

	r := chi.NewRouter()
	r.Use(mw)
	r.Get("/hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello\n") })

	srv := httptest.NewServer(r)
	defer srv.Close()
	for range 3 {
		res, err := srv.Client().Get(srv.URL + "/hello")
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Print(res.StatusCode, " RateLimit: ", res.Header.Get("RateLimit"))
		if after := res.Header.Get("Retry-After"); after != "" {
			fmt.Print(" Retry-After: ", after)
		}
		fmt.Println()
	}
	// Output:
	// 200 RateLimit: "per-ip";r=1;t=30
	// 200 RateLimit: "per-ip";r=0;t=30
	// 429 RateLimit: "per-ip";r=0;t=30 Retry-After: 30
}

// chi's r.With runs middleware after routing, so a key function can read
// the route's URL parameters: here each tenant gets 1 report a minute,
// whoever asks for it, and the other routes are not limited by it.
func Example_chiRoute() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	reports, _ := ratelease.NewPolicy("reports", ratelease.PerMinute(1))
	perTenant, err := httplimit.New(limiter, reports,
		httplimit.WithKey(func(r *http.Request) string { return chi.URLParam(r, "tenant") }))
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.With(perTenant).Get("/tenants/{tenant}/report", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "report\n")
	})
	r.Get("/tenants/{tenant}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "tenant\n") })

	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, path := range []string{"/tenants/acme/report", "/tenants/acme/report", "/tenants/globex/report", "/tenants/acme"} {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(path, res.StatusCode, res.Header.Get("RateLimit-Policy"))
	}
	// Output:
	// /tenants/acme/report 200 "reports";q=1;w=60
	// /tenants/acme/report 429 "reports";q=1;w=60
	// /tenants/globex/report 200 "reports";q=1;w=60
	// /tenants/acme 200
}
