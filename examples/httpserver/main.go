// Command httpserver is a small JSON API behind ratelease's HTTP middleware,
// with two plans and a limit for anonymous clients:
//
//   - free API keys ("free-…"): 2 requests a second and 100 an hour;
//   - pro API keys ("pro-…"): 20 a second and 10,000 an hour;
//   - every client IP: 5 a second, with or without a key.
//
// Run it from the repository root (embedded in-memory Redis unless -redis is
// given), then call it from another terminal:
//
//	go run ./examples/httpserver
//	go run ./examples/httpserver -redis 127.0.0.1:6379 -addr 127.0.0.1:8080
//
//	# the IP limit alone (5/s): the sixth request within a second is a 429
//	for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code} ' localhost:8080/hello; done; echo
//	# a second later, the free plan (2/s): the third request is a 429
//	sleep 1; for i in 1 2 3; do curl -s -o /dev/null -w '%{http_code} ' -H 'X-API-Key: free-alice' localhost:8080/hello; done; echo
//	# a second later, the pro plan (20/s) with the headers: the IP limit
//	# (5/s) is the tightest, so X-RateLimit-* show it; RateLimit shows both
//	sleep 1; curl -i -H 'X-API-Key: pro-bob' localhost:8080/hello
//	# the limiter's Stats, through expvar
//	curl -s localhost:8080/debug/vars | grep -A3 '"ratelease"'
//
// Each response carries RateLimit-Policy, RateLimit and X-RateLimit-*; a
// 429 carries Retry-After. It stops on SIGINT (Ctrl-C) or SIGTERM
// (`kill PID`, with the PID it prints), finishing the requests in flight.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/httplimit"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on")
	redisAddr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded in-memory Redis")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr, redisAddr string) error {
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := ratelease.New(client)
	if err != nil {
		return err
	}
	defer limiter.Close()
	// The limiter's counters at /debug/vars (expvar registers that path on
	// http.DefaultServeMux; the API below has a mux of its own).
	publishStats(limiter)

	handler, err := newHandler(limiter)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/debug/vars", expvar.Handler())
	mux.Handle("/", handler)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("serving on http://%s (Redis %s), pid %d; stop with Ctrl-C or kill %d", addr, redisAddr, os.Getpid(), os.Getpid())
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// statsOf is the Limiter whose Stats /debug/vars shows. A program with one
// Limiter publishes it once, in one line:
//
//	expvar.Publish("ratelease", expvar.Func(func() any { return limiter.Stats() }))
//
// expvar's names are global to the process and may be published only once,
// and run may run more than once (its tests do): it publishes the variable
// once, and each run points it at its own Limiter.
var (
	statsOf   atomic.Pointer[ratelease.Limiter]
	published sync.Once
)

func publishStats(l *ratelease.Limiter) {
	statsOf.Store(l)
	published.Do(func() {
		expvar.Publish("ratelease", expvar.Func(func() any { return statsOf.Load().Stats() }))
	})
}

// newHandler returns the API with its limits: one dimension per plan, keyed
// by the API key only when the key belongs to the plan, and one per IP.
func newHandler(limiter *ratelease.Limiter) (http.Handler, error) {
	perIP, err := ratelease.NewPolicy("ip", ratelease.PerSecond(5))
	if err != nil {
		return nil, err
	}
	free, err := ratelease.NewPolicy("free", ratelease.PerSecond(2), ratelease.PerHour(100))
	if err != nil {
		return nil, err
	}
	pro, err := ratelease.NewPolicy("pro", ratelease.PerSecond(20), ratelease.PerHour(10_000))
	if err != nil {
		return nil, err
	}
	mw := httplimit.Middleware(limiter, perIP,
		httplimit.WithDimension(free, planKey("free-")),
		httplimit.WithDimension(pro, planKey("pro-")),
		httplimit.WithDeniedHandler(http.HandlerFunc(denied)))

	api := http.NewServeMux()
	api.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{"hello": "world", "key": r.Header.Get("X-API-Key")})
	})
	return mw(api), nil
}

// planKey keys a request by its API key when the key starts with prefix,
// and leaves it out of that plan's limits otherwise.
func planKey(prefix string) httplimit.KeyFunc {
	return func(r *http.Request) string {
		if k := r.Header.Get("X-API-Key"); strings.HasPrefix(k, prefix) {
			return k
		}
		return ""
	}
}

// denied answers 429 in JSON, with the limit that denied.
func denied(w http.ResponseWriter, r *http.Request) {
	res, _ := httplimit.ResultFrom(r.Context())
	reply(w, http.StatusTooManyRequests, map[string]any{
		"error":          "rate limit exceeded",
		"limit":          res.Limit.String(),
		"retry_after_ms": res.RetryAfter.Milliseconds(),
	})
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
