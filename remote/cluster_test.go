package remote_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// On a real 3-master cluster, every limit of a key lands in one slot
// whatever the key holds (braces, binary bytes, a long name), as CLUSTER
// KEYSLOT says, so a multi-limit script never meets CROSSSLOT; and the keys
// spread over every master.
func TestClusterKeysShareASlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t, nil)
	ctx := context.Background()
	p, err := remote.NewPolicy("multi", []remote.Limit{
		{Algorithm: remote.TokenBucket, Rate: 10, Period: time.Second, Burst: 10},
		{Algorithm: remote.FixedWindow, Rate: 100, Period: time.Minute, Burst: 100},
		{Algorithm: remote.SlidingWindowCounter, Rate: 1000, Period: time.Hour, Burst: 1000},
		{Algorithm: remote.SlidingWindowLog, Rate: 50, Period: time.Minute, Burst: 50},
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{
		"plain", "{user}", "}{", "{", "}", "a{b}c", "{}x", "{{}}", "\x00\xff{\x01}\n",
		"ünïcödé", strings.Repeat("l", remote.MaxKeyLen), strings.Repeat("{", 100),
	}
	for i := 0; i < 30; i++ {
		keys = append(keys, "user:"+strings.Repeat("x", i))
	}
	store := remote.NewStore(cc, "rl")
	masters := map[int]bool{}
	for _, key := range keys {
		rks := p.Keys("rl", key)
		var slot int64 = -1
		for _, rk := range rks {
			s, err := cc.ClusterKeySlot(ctx, rk).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && s != slot {
				t.Fatalf("key %q: limit keys in slots %d and %d: %q", key, slot, s, rks)
			}
			slot = s
		}
		d, err := store.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: 1, Max: 1})
		if err != nil || d.Granted != 1 {
			t.Fatalf("key %q: Acquire on the cluster: %+v, %v", key, d, err)
		}
		// A permit of a concurrency limit of the same name, on its own key.
		if r, err := store.Permit(ctx, remote.PermitCall{Name: "multi", Key: key, ID: "p1", Op: remote.PermitAcquire, Limit: 1, TTL: time.Second}); err != nil || !r.Done {
			t.Fatalf("key %q: a permit on the cluster: %+v, %v", key, r, err)
		}
		// A charge past the limits (an operator script) on the same slot.
		if d, err := store.Charge(ctx, p, key, p.MaxCapacity()+1); err != nil || d.Debt < 2 {
			t.Fatalf("key %q: Charge on the cluster: %+v, %v", key, d, err)
		}
		masters[cl.Master(t, rks[0])] = true
	}
	if len(masters) != 3 {
		t.Fatalf("%d keys' state landed on masters %v, want all 3", len(keys), masters)
	}
	// MaxmemoryPolicies reads the master a node names, and no other.
	addr := cl.Masters[1].Addr
	if got, err := store.MaxmemoryPolicies(ctx, addr); err != nil || len(got) != 1 || got[addr] != "noeviction" {
		t.Fatalf("MaxmemoryPolicies(%s) = %v, %v; want that master's noeviction", addr, got, err)
	}
	if got, err := store.MaxmemoryPolicies(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf(`MaxmemoryPolicies("") = %v, %v; want no server`, got, err)
	}
}
