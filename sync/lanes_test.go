package sync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// With a Redis Cluster, a master's lane lives while it has requests: once
// idle it is dropped, so that masters a resharding or a failover left
// behind are not kept for ever.
func TestIdleLanesAreDropped(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t, &redis.ClusterOptions{ContextTimeoutEnabled: true})
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 5 * time.Second})
	l, err := New(d, clock.System{}, Config{Min: 1, Max: 1, Refresh: time.Second,
		TTL: time.Hour, LowWater: 0.25, MaxKeys: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, err := remote.NewPolicy("lanes", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	tab := l.NewTable(p, nil)
	lease := func(key string) {
		t.Helper()
		if _, _, err := l.Lease(context.Background(), tab.GetOrCreate(key), 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 30; i++ { // keys on every master
		lease(fmt.Sprint("k", i))
	}
	// Then one key at a time: at each flush the other masters' lanes are
	// idle (their sender may take a moment to see its queue empty).
	for i := 0; i < 5; i++ {
		time.Sleep(20 * time.Millisecond)
		lease("one")
	}
	l.Close() // nothing held to refund (leases of 1); the batcher has stopped: its lanes can be read
	if n := len(l.batcher.lanes); n > 1 {
		t.Fatalf("%d lanes after leases of one master's keys only, want at most that master's", n)
	}
}
