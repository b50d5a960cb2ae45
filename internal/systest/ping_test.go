package systest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// Ping: nil while Redis answers, ErrUnavailable with the cause when it is
// gone (though New succeeded), ErrClosed after Close; with a Cluster it
// asks every master.
func TestPing(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	l, err := ratelease.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(ctx); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	_ = l.Close()
	if err := l.Ping(ctx); !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}

	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer gone.Close()
	l, err = ratelease.New(gone, ratelease.WithRedisTimeout(time.Second))
	if err != nil {
		t.Fatalf("New with Redis gone: %v; it must succeed", err)
	}
	defer l.Close()
	if err := l.Ping(ctx); !errors.Is(err, ratelease.ErrUnavailable) {
		t.Fatalf("Ping with Redis gone: %v, want ErrUnavailable", err)
	} else {
		t.Logf("Ping with Redis gone: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Ping(cancelled); err != context.Canceled {
		t.Fatalf("Ping with a cancelled context: %v, want context.Canceled", err)
	}

	cl := redistest.StartCluster(t, 3)
	lc, err := ratelease.New(cl.Client(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if err := lc.Ping(ctx); err != nil {
		t.Fatalf("Ping a Cluster: %v", err)
	}
}
