package ratelease_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A Limiter dropped without Close does not keep its goroutines: once it is
// collected, its engine is closed (runtime.AddCleanup), and the goroutines
// of 20 such Limiters go away.
func TestDroppedLimiterStops(t *testing.T) {
	mr := redistest.StartMini(t)
	client := mr.Client(t)
	p := policy(t, "dropped", ratelease.PerSecond(100))
	before := runtime.NumGoroutine()
	func() {
		for range 20 {
			l, err := ratelease.New(client)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Allow(context.Background(), p, "k"); err != nil { // a lease, a batcher at work
				t.Fatal(err)
			}
		}
	}()
	during := runtime.NumGoroutine()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Fatalf("goroutines: %d before, %d with 20 Limiters, %d after dropping them: they were not stopped", before, during, after)
	} else {
		t.Logf("goroutines: %d before, %d with 20 Limiters, %d after dropping them", before, during, after)
	}
}
