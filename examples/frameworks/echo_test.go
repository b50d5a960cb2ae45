package frameworks_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/ratelease/ratelease"
)

// e.Use(echo.WrapMiddleware(mw)): 200, 200, 429 with Retry-After and the
// headers. An echo middleware before it sees the 429 in c.Response(); the
// middleware and handler after it run for the admitted requests only.
func TestEcho(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l, _ := newLimiter(t, m.opts...)
			var statuses []int
			var after, served int
			e := echo.New()
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error {
					err := next(c)
					statuses = append(statuses, c.Response().Status)
					return err
				}
			})
			e.Use(echo.WrapMiddleware(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2))))
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error { after++; return next(c) }
			})
			e.GET("/hello", func(c echo.Context) error {
				served++
				return c.String(http.StatusOK, "hello")
			})
			checkLimited(t, e, "/hello", "hello")
			if after != 3 || served != 3 { // 2, and 1 for the other client
				t.Errorf("the middleware after ran %d times and the handler %d, want 3 and 3", after, served)
			}
			if want := []int{200, 200, 429, 200}; !slices.Equal(statuses, want) {
				t.Errorf("the middleware before saw %v, want %v", statuses, want)
			}
		})
	}
}

// A handler's error goes through the adapter to echo's error handler, and
// its response keeps the rate-limit headers.
func TestEchoHandlerError(t *testing.T) {
	l, _ := newLimiter(t)
	e := echo.New()
	e.Use(echo.WrapMiddleware(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2))))
	e.GET("/teapot", func(echo.Context) error { return echo.NewHTTPError(http.StatusTeapot, "short and stout") })
	w := do(e, "/teapot", "192.0.2.1:1234")
	if w.Code != http.StatusTeapot {
		t.Fatalf("status %d, want 418", w.Code)
	}
	if w.Header().Get("X-RateLimit-Remaining") != "1" || w.Header().Get("RateLimit") == "" {
		t.Errorf("headers %v", w.Header())
	}
}

// A group limits its routes only.
func TestEchoGroup(t *testing.T) {
	l, _ := newLimiter(t)
	e := echo.New()
	api := e.Group("/api", echo.WrapMiddleware(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2))))
	api.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })
	e.GET("/health", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	checkLimited(t, e, "/api/hello", "hello")
	for range 3 {
		w := do(e, "/health", "192.0.2.1:1234")
		if w.Code != http.StatusNoContent || w.Header().Get("RateLimit") != "" {
			t.Fatalf("/health: status %d, headers %v", w.Code, w.Header())
		}
	}
}
