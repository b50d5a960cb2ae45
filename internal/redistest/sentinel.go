package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a primary with one replica, watched by one Redis Sentinel
// (quorum 1), each a Server of its own on a free loopback port, made by
// StartSentinel. A go-redis failover client finds the primary through
// Sentinel.Addr under Name.
type Sentinel struct {
	Name                      string
	Primary, Replica, Watcher *Server
	// Addr is the Sentinel's address, for redis.FailoverOptions.SentinelAddrs.
	Addr string
}

// StartSentinel starts a primary, a replica of it and a Sentinel that
// monitors the primary as name, with a down-after of 500 ms, so that a dead
// primary is replaced by its replica within about two seconds. It returns
// once the replica is in sync and the Sentinel knows it. Every process is
// killed, by PID, when t ends.
func StartSentinel(t testing.TB, name string) *Sentinel {
	t.Helper()
	bin := lookPath(t, "redis-server")
	noDelay := []string{"--repl-diskless-sync-delay", "0"} // sync a replica at once, not after 5 s
	primary := startWith(t, noDelay...)
	replica := startWith(t, append(noDelay, "--replicaof", "127.0.0.1", fmt.Sprint(primary.port))...)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // a Sentinel rewrites its config file
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
			"sentinel down-after-milliseconds %[1]s 500\n"+
			"sentinel failover-timeout %[1]s 5000\n", name, primary.port)), 0o600); err != nil {
		t.Fatal(err)
	}
	watcher, err := launch(bin, dir, conf, []string{"--sentinel"})
	if err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	t.Cleanup(watcher.stop)
	s := &Sentinel{Name: name, Primary: primary, Replica: replica, Watcher: watcher, Addr: watcher.Addr}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := replica.Client(t)
	wc := redis.NewSentinelClient(&redis.Options{Addr: watcher.Addr, MaxRetries: -1})
	defer wc.Close()
	for {
		info, _ := rc.Info(ctx, "replication").Result()
		replicas, _ := wc.Replicas(ctx, name).Result()
		if strings.Contains(info, "master_link_status:up") && len(replicas) > 0 {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("redistest: the replica did not sync, or the sentinel did not find it: %q, %v", info, replicas)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PrimaryAddr is the address the Sentinel gives for the primary now.
func (s *Sentinel) PrimaryAddr(t testing.TB) string {
	t.Helper()
	wc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer wc.Close()
	hp, err := wc.GetMasterAddrByName(context.Background(), s.Name).Result()
	if err != nil {
		t.Fatalf("redistest: sentinel get-master-addr-by-name: %v", err)
	}
	return strings.Join(hp, ":")
}
