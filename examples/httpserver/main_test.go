package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The plans and the IP limit hold as the doc comment says.
func TestPlans(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.SetTime(time.Unix(1_700_000_000, 0)) // a clock that stands still: nothing refills
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	limiter, err := ratelease.New(client, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer limiter.Close()
	h, err := newHandler(limiter)
	if err != nil {
		t.Fatal(err)
	}
	get := func(ip, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/hello", nil)
		r.RemoteAddr = ip + ":1000"
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	want := func(w *httptest.ResponseRecorder, status int, limit string) {
		t.Helper()
		if w.Code != status || w.Header().Get("X-RateLimit-Limit") != limit {
			t.Fatalf("%d, X-RateLimit-Limit %q; want %d, %s (%s)", w.Code, w.Header().Get("X-RateLimit-Limit"), status, limit, w.Body)
		}
	}
	want(get("192.0.2.1", "free-alice"), 200, "2")
	want(get("192.0.2.1", "free-alice"), 200, "2")
	w := get("192.0.2.1", "free-alice")
	want(w, 429, "2")
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["retry_after_ms"] != 500.0 {
		t.Fatalf("429 body %s, %v", w.Body, err)
	}
	// pro-bob from another IP: 20/s, but the IP's 5/s binds first.
	for i := 0; i < 5; i++ {
		want(get("192.0.2.2", "pro-bob"), 200, "5")
	}
	want(get("192.0.2.2", "pro-bob"), 429, "5")
	// Anonymous: the IP's limit only.
	want(get("192.0.2.3", ""), 200, "5")
}

// The server starts, answers, and stops with its context.
func TestRunServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, addr, "") }()
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	var res *http.Response
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if res, err = hc.Get("http://" + addr + "/hello"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("RateLimit") == "" {
		t.Errorf("%d, RateLimit %q", res.StatusCode, res.Header.Get("RateLimit"))
	}
	vars, err := hc.Get("http://" + addr + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]json.RawMessage
	err = json.NewDecoder(vars.Body).Decode(&v)
	vars.Body.Close()
	if err != nil || len(v["ratelease"]) == 0 {
		t.Errorf("no ratelease in /debug/vars: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
