package frameworks_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

// echo takes httplimit's middleware through its own adapter:
// e.Use(echo.WrapMiddleware(mw)). Every client IP gets 2 requests a
// minute; the third is a 429 with Retry-After.
func Example_echo() {
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

	e := echo.New()
	e.Use(echo.WrapMiddleware(mw))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	srv := httptest.NewServer(e)
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

// A group of echo routes limited per API key (and the routes outside the
// group not at all), with X-RateLimit headers only.
func Example_echoGroup() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	mr.SetTime(time.Unix(1_700_000_000, 0))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, _ := ratelease.New(client)
	defer limiter.Close()
	perKey, _ := ratelease.NewPolicy("per-key", ratelease.PerSecond(10), ratelease.PerHour(1000))
	mw, err := httplimit.New(limiter, perKey,
		httplimit.WithKey(httplimit.Header("X-API-Key")),
		httplimit.WithHeaders(httplimit.XRateLimitHeaders))
	if err != nil {
		panic(err)
	}

	e := echo.New()
	api := e.Group("/api", echo.WrapMiddleware(mw))
	api.GET("/items", func(c echo.Context) error { return c.JSON(http.StatusOK, []string{"a", "b"}) })
	e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })

	srv := httptest.NewServer(e)
	defer srv.Close()
	for _, path := range []string{"/api/items", "/api/items", "/health"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("X-API-Key", "alice")
		res, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Printf("%s %d limit=%q remaining=%q\n", path, res.StatusCode,
			res.Header.Get("X-RateLimit-Limit"), res.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/items 200 limit="10" remaining="9"
	// /api/items 200 limit="10" remaining="8"
	// /health 204 limit="" remaining=""
}
