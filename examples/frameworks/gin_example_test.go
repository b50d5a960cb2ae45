package frameworks_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/examples/frameworks"
	"github.com/ratelease/ratelease/httplimit"
)

// gin takes httplimit's middleware through frameworks.Gin, a small
// adapter to copy: router.Use(frameworks.Gin(mw)). Every client IP gets 2
// requests a minute; the third is a 429 with Retry-After, and the request
// is aborted: the handlers after the middleware do not run.
func ExampleGin() {
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

	gin.SetMode(gin.ReleaseMode) // no debug lines on stdout
	router := gin.New()
	router.Use(frameworks.Gin(mw))
	router.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	srv := httptest.NewServer(router)
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
