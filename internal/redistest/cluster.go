package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters only (no replicas), each a Server
// of its own on a free loopback port, made by StartCluster.
type Cluster struct {
	Masters []*Server
}

// StartCluster starts n redis-server processes with cluster mode on, joins
// them with `redis-cli --cluster create` (the slots split evenly, no
// replicas), and returns once every node reports cluster_state:ok. Every
// node is killed, by PID, when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	cli := lookPath(t, "redis-cli")
	c := &Cluster{}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"}
	for i := 0; i < n; i++ {
		c.Masters = append(c.Masters, startWith(t, args...))
	}
	create := []string{"--cluster", "create"}
	for _, m := range c.Masters {
		create = append(create, m.Addr)
	}
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, m := range c.Masters {
		if err := waitClusterOK(ctx, m.Addr, n); err != nil {
			t.Fatalf("redistest: cluster node %s: %v", m.Addr, err)
		}
	}
	return c
}

// waitClusterOK waits until the node at addr reports cluster_state:ok and
// knows all n masters.
func waitClusterOK(ctx context.Context, addr string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var last string
	for ctx.Err() == nil {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
			return nil
		}
		last = fmt.Sprint(info, err)
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ok within the time allowed: %s", last)
}

// Addrs returns the masters' addresses.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, m := range c.Masters {
		addrs = append(addrs, m.Addr)
	}
	return addrs
}

// Client returns a cluster client, closed when t ends; opts may be nil.
func (c *Cluster) Client(t testing.TB, opts *redis.ClusterOptions) *redis.ClusterClient {
	if opts == nil {
		opts = &redis.ClusterOptions{}
	}
	opts.Addrs = c.Addrs()
	cc := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Master returns the index in Masters of the master that serves key's
// slot: the one node that answers a command on key without MOVED.
func (c *Cluster) Master(t testing.TB, key string) int {
	t.Helper()
	ctx := context.Background()
	for i, m := range c.Masters {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1})
		err := cl.Do(ctx, "EXISTS", key).Err()
		_ = cl.Close()
		if err == nil {
			return i
		}
	}
	t.Fatalf("redistest: no master serves %q", key)
	return -1
}

// MoveSlot migrates slot, with its keys, from master from to master to
// (indexes in Masters), the way redis-cli --cluster reshard does: IMPORTING
// and MIGRATING (clients get ASK meanwhile), MIGRATE of the keys, then the
// slot's new owner told to every master (clients get MOVED after).
func (c *Cluster) MoveSlot(t testing.TB, slot int64, from, to int) {
	t.Helper()
	ctx := context.Background()
	client := func(i int) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: c.Masters[i].Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	src, dst := client(from), client(to)
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("redistest: moving slot %d: %v", slot, err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	host, port, _ := strings.Cut(c.Masters[to].Addr, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	for i := range c.Masters {
		must(client(i).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
}
