package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

// StartCluster starts n redis-server processes with cluster mode on and
// joins them into one cluster (see LaunchCluster), returning once every
// node reports cluster_state:ok. Every node is killed, by PID, when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := LaunchCluster(lookPath(t, "redis-server"), t.TempDir(), n)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(c.Kill)
	return c
}

// LaunchCluster is StartCluster for programs without a testing.TB (a
// measuring tool): it runs n redis-server processes (bin) with cluster
// mode on, each with a directory of its own under dir, and joins them as
// `redis-cli --cluster create` would, with no replicas: the slots split
// evenly in ranges (one master takes them all), a config epoch each, every
// node met by the first. It returns once every node reports
// cluster_state:ok. The caller stops it with Kill.
func LaunchCluster(bin, dir string, n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("redistest: a cluster of %d masters", n)
	}
	c := &Cluster{}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"}
	for i := 0; i < n; i++ {
		node := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if err := os.MkdirAll(node, 0o700); err != nil {
			c.Kill()
			return nil, err
		}
		m, err := Launch(bin, node, args...)
		if err != nil {
			c.Kill()
			return nil, err
		}
		c.Masters = append(c.Masters, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.join(ctx); err != nil {
		c.Kill()
		return nil, err
	}
	for _, m := range c.Masters {
		if err := waitClusterOK(ctx, m.Addr, n); err != nil {
			c.Kill()
			return nil, fmt.Errorf("redistest: cluster node %s: %w", m.Addr, err)
		}
	}
	return c, nil
}

// join gives each master its range of the slots and a config epoch of its
// own, and has the first meet the others.
func (c *Cluster) join(ctx context.Context) error {
	const slots = 16384
	n := len(c.Masters)
	for i, m := range c.Masters {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr, MaxRetries: -1})
		err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		if err == nil {
			err = cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", i*slots/n, (i+1)*slots/n-1).Err()
		}
		if err == nil && i > 0 {
			host, port, _ := net.SplitHostPort(m.Addr)
			first := redis.NewClient(&redis.Options{Addr: c.Masters[0].Addr, MaxRetries: -1})
			err = first.Do(ctx, "CLUSTER", "MEET", host, port).Err()
			_ = first.Close()
		}
		_ = cl.Close()
		if err != nil {
			return fmt.Errorf("redistest: joining cluster node %s: %w", m.Addr, err)
		}
	}
	return nil
}

// Kill kills every master (SIGKILL, by PID) and waits until each is gone.
func (c *Cluster) Kill() {
	for _, m := range c.Masters {
		m.Kill()
	}
}

// waitClusterOK waits until the node at addr reports cluster_state:ok,
// knows all n masters and knows an owner for every slot.
func waitClusterOK(ctx context.Context, addr string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var last string
	for ctx.Err() == nil {
		info, err := c.ClusterInfo(ctx).Result()
		// Every slot assigned as well as ok: with full coverage not
		// required, a node says ok before gossip has told it the others'
		// slots, and a client that took the slots from it would miss a
		// master (a library loaded into every master it knows of would
		// be missing from that one).
		if err == nil && strings.Contains(info, "cluster_state:ok") &&
			strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) &&
			strings.Contains(info, "cluster_slots_assigned:16384") {
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
