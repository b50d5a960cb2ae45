package frameworks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/examples/frameworks"
	"github.com/ratelease/ratelease/httplimit"
)

// router.Use(frameworks.Gin(mw)): 200, 200, 429 with Retry-After and the
// headers. The gin middleware before it sees the 429 and the abort; the
// middleware and handler after it run for the admitted requests only.
func TestGin(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			l, _ := newLimiter(t, m.opts...)
			var statuses []int
			var aborted []bool
			var after, served int
			router := gin.New()
			router.Use(func(c *gin.Context) {
				c.Next()
				statuses = append(statuses, c.Writer.Status())
				aborted = append(aborted, c.IsAborted())
			})
			router.Use(frameworks.Gin(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2))))
			router.Use(func(*gin.Context) { after++ })
			router.GET("/hello", func(c *gin.Context) {
				served++
				c.String(http.StatusOK, "hello")
			})
			checkLimited(t, router, "/hello", "hello")
			if after != 3 || served != 3 { // 2, and 1 for the other client
				t.Errorf("the middleware after ran %d times and the handler %d, want 3 and 3", after, served)
			}
			if want := []int{200, 200, 429, 200}; !slices.Equal(statuses, want) {
				t.Errorf("the middleware before saw statuses %v, want %v", statuses, want)
			}
			if want := []bool{false, false, true, false}; !slices.Equal(aborted, want) {
				t.Errorf("the middleware before saw aborted %v, want %v", aborted, want)
			}
		})
	}
}

type ctxKey struct{}

// The adapter with middleware other than httplimit's: what the middleware
// does before next reaches the rest of the chain (a header, a new
// request), what it does after next comes after the rest of the chain,
// and a middleware that answers by itself aborts the chain.
func TestGinAdapter(t *testing.T) {
	var trace []string
	mw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "" {
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			w.Header().Set("X-Before", "yes")
			trace = append(trace, "before")
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, "from mw")))
			trace = append(trace, "after")
		})
	}
	router := gin.New()
	var aborted bool
	router.Use(func(c *gin.Context) { c.Next(); aborted = c.IsAborted() })
	router.Use(frameworks.Gin(mw))
	router.GET("/", func(c *gin.Context) {
		v, _ := c.Request.Context().Value(ctxKey{}).(string)
		trace = append(trace, "handler "+v)
		c.String(http.StatusOK, "ok")
	})

	w := do(router, "/", "192.0.2.1:1", "Authorization", "Bearer x")
	if w.Code != http.StatusOK || w.Body.String() != "ok" || w.Header().Get("X-Before") != "yes" || aborted {
		t.Errorf("admitted: status %d, body %q, headers %v, aborted %v", w.Code, w.Body, w.Header(), aborted)
	}
	if want := []string{"before", "handler from mw", "after"}; !slices.Equal(trace, want) {
		t.Errorf("trace %q, want %q", trace, want)
	}

	trace = nil
	w = do(router, "/", "192.0.2.1:1")
	if w.Code != http.StatusUnauthorized || w.Body.String() != "who are you?\n" || !aborted {
		t.Errorf("refused: status %d, body %q, aborted %v", w.Code, w.Body, aborted)
	}
	if len(trace) != 0 {
		t.Errorf("refused: the chain ran: %q", trace)
	}
}

// A denied handler's response, with the deciding Result, comes through
// gin whole, Retry-After included.
func TestGinDeniedHandler(t *testing.T) {
	l, _ := newLimiter(t)
	mw := newMiddleware(t, l, "per-ip", ratelease.PerMinute(1),
		httplimit.WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, _ := httplimit.ResultFrom(r.Context())
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(map[string]any{"retry_after_s": res.RetryAfter.Seconds()})
		})))
	router := gin.New()
	router.Use(frameworks.Gin(mw))
	router.GET("/", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) })

	if w := do(router, "/", "192.0.2.1:1"); w.Code != http.StatusOK || w.Body.String() != `{"ok":true}` {
		t.Fatalf("first: status %d, body %q", w.Code, w.Body)
	}
	w := do(router, "/", "192.0.2.1:1")
	var body struct {
		RetryAfter float64 `json:"retry_after_s"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("second: status %d, body %q: %v", w.Code, w.Body, err)
	}
	if w.Code != http.StatusTooManyRequests || body.RetryAfter != 60 || w.Header().Get("Retry-After") != "60" ||
		w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("second: status %d, body %q, headers %v", w.Code, w.Body, w.Header())
	}
}

// With FailClosed and Redis gone, the middleware answers 503 by itself
// and gin's chain is aborted.
func TestGinUnavailable(t *testing.T) {
	l, mr := newLimiter(t, ratelease.WithExact(), ratelease.WithFailureMode(ratelease.FailClosed))
	var errs []error
	mw := newMiddleware(t, l, "per-ip", ratelease.PerMinute(2),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			errs = append(errs, err)
			httplimit.DefaultErrorHandler(w, r, err)
		}))
	served := 0
	router := gin.New()
	router.Use(frameworks.Gin(mw))
	router.GET("/", func(*gin.Context) { served++ })
	mr.Close()
	w := do(router, "/", "192.0.2.1:1")
	if w.Code != http.StatusServiceUnavailable || served != 0 {
		t.Errorf("status %d, handler ran %d times; want 503 and 0", w.Code, served)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ratelease.ErrUnavailable) {
		t.Errorf("errors %v, want one ErrUnavailable", errs)
	}
}

// A group limits its routes only.
func TestGinGroup(t *testing.T) {
	l, _ := newLimiter(t)
	router := gin.New()
	api := router.Group("/api", frameworks.Gin(newMiddleware(t, l, "per-ip", ratelease.PerMinute(2))))
	api.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	router.GET("/health", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	checkLimited(t, router, "/api/hello", "hello")
	for range 3 {
		w := do(router, "/health", "192.0.2.1:1234")
		if w.Code != http.StatusNoContent || w.Header().Get("RateLimit") != "" {
			t.Fatalf("/health: status %d, headers %v", w.Code, w.Header())
		}
	}
}
