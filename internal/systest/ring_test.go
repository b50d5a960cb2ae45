package systest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// A Ring of three independent servers (go-redis's consistent hashing):
// keys spread over all of them, and each key's limit holds exactly, across
// two Limiters, in exact and in lease mode.
func TestRing(t *testing.T) {
	addrs := map[string]string{}
	var servers []*redistest.Server
	for i := 0; i < 3; i++ {
		s := redistest.Start(t)
		servers = append(servers, s)
		addrs[fmt.Sprintf("shard%d", i)] = s.Addr
	}
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			name := fmt.Sprintf("ring%v", exact)
			p := policy(t, name, ratelease.Limit{Rate: 50, Period: 240 * time.Hour, Algorithm: ratelease.FixedWindow},
				ratelease.Limit{Rate: 100, Period: 240 * time.Hour})
			opts := []ratelease.Option{ratelease.WithRedisTimeout(2 * time.Second)}
			if exact {
				opts = append(opts, ratelease.WithExact())
			}
			ins := newInstances(t, 2, func() redis.UniversalClient {
				ring := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = ring.Close() })
				return ring
			}, opts...)
			const keys = 30
			admitted := make([]atomic.Int64, keys)
			var wg sync.WaitGroup
			for _, in := range ins {
				for g := 0; g < 4; g++ {
					wg.Go(func() {
						for i := 0; i < keys*80; i++ {
							k := i % keys
							res, err := in.l.Allow(context.Background(), p, fmt.Sprintf("user%d", k))
							if err != nil {
								t.Error(err)
								return
							}
							if res.Allowed {
								admitted[k].Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			closeAll(ins) // refunds what is left of the leases
			for k := range admitted {
				if n := admitted[k].Load(); n != 50 {
					t.Errorf("user%d: %d admitted, want exactly 50 (the fixed window)", k, n)
				}
			}
			for i, s := range servers {
				n, err := s.Client(t).Eval(context.Background(),
					`local n = 0
					for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
						if string.sub(k, -4) ~= '}:m2' then n = n + 1 end -- not a members hash
					end
					return n`, nil, "*{"+name+":*").Int()
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					t.Errorf("shard %d holds no key of the policy: keys did not spread", i)
				}
				if n%2 != 0 { // both limits of a key on one shard (the hash tag)
					t.Errorf("shard %d holds %d Redis keys: a key's two limits are split", i, n)
				}
				t.Logf("shard %d: %d Redis keys", i, n)
			}
		})
	}
}
