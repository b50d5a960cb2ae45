package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ping(c *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Pause makes the server answer nothing; Resume brings it back; Kill ends
// it; Restart brings up a new, empty server on the same address.
func TestServerFaults(t *testing.T) {
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause(t)
	if err := ping(c); err == nil {
		t.Fatal("a paused server answered")
	}
	s.Resume(t)
	if err := ping(c); err != nil {
		// the timed-out connection is dropped; the next one works
		if err := ping(c); err != nil {
			t.Fatalf("after Resume: %v", err)
		}
	}
	s.Kill()
	if err := ping(c); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart(t)
	if err := ping(c); err != nil {
		if err := ping(c); err != nil {
			t.Fatalf("after Restart: %v", err)
		}
	}
	if n, _ := c.Exists(context.Background(), "k").Result(); n != 0 {
		t.Fatal("a restarted server kept its data")
	}
}

// The proxy delays, drops and cuts.
func TestProxyFaults(t *testing.T) {
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	if err := ping(c); err != nil {
		t.Fatal(err)
	}
	p.SetDelay(300 * time.Millisecond)
	if err := ping(c); err == nil {
		t.Fatal("a reply delayed 300ms beat a 200ms deadline")
	}
	p.SetDelay(0)
	p.SetDrop(true)
	if err := ping(c); err == nil {
		t.Fatal("a dropping proxy let a reply through")
	}
	p.SetDrop(false)
	p.Cut()
	for i := 0; i < 3; i++ { // the first tries may use a cut connection
		if err := ping(c); err == nil {
			return
		}
	}
	t.Fatal("no reply after Cut and reconnecting")
}

// A cluster of three masters serves all slots, each master some of them,
// and a cluster client reaches every key.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	cc := c.Client(t, nil)
	ctx := context.Background()
	seen := map[int]bool{}
	for i := 0; i < 30; i++ {
		key := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		seen[c.Master(t, key)] = true
	}
	if len(seen) != 3 {
		t.Fatalf("30 keys landed on masters %v, want all 3", seen)
	}
}

// A Sentinel replaces a killed primary with its replica, and a failover
// client follows it.
func TestSentinel(t *testing.T) {
	s := redistest.StartSentinel(t, "rt")
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: []string{s.Addr}})
	defer c.Close()
	ctx := context.Background()
	if got := s.PrimaryAddr(t); got != s.Primary.Addr {
		t.Fatalf("primary %s, want %s", got, s.Primary.Addr)
	}
	if err := c.Set(ctx, "k", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Primary.Kill()
	deadline := time.Now().Add(15 * time.Second)
	for s.PrimaryAddr(t) != s.Replica.Addr {
		if time.Now().After(deadline) {
			t.Fatal("no failover within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		err := c.Set(ctx, "k", 2, 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover client did not reach the new primary: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaterFill meets the smallest demands in full and shares the rest
// equally; demands that fit are met whole.
func TestWaterFill(t *testing.T) {
	got := redistest.WaterFill(2000, []float64{1000, 200, 2400, 400})
	want := []float64{700, 200, 700, 400}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("WaterFill = %v, want %v", got, want)
		}
	}
	if got := redistest.WaterFill(100, []float64{10, 20}); got[0] != 10 || got[1] != 20 {
		t.Fatalf("WaterFill under the capacity = %v", got)
	}
}
