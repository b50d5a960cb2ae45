package remote_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// realStore returns a Store on a fresh redis-server, and its client.
func realStore(t *testing.T) (*remote.Store, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	return remote.NewStore(c, "test"), c
}

// On a real server time is real: each algorithm admits its capacity at once,
// denies the next unit with a retry-after within one period (two for the
// sliding window counter), and admits it
// again after sleeping that long.
func TestRealRedisBurstDenyRefill(t *testing.T) {
	s, c := realStore(t)
	const P = time.Second
	for _, l := range []remote.Limit{tb(5, 5, P), lb(5, 5, P), win(remote.FixedWindow, 5, P),
		win(remote.SlidingWindowLog, 5, P), win(remote.SlidingWindowCounter, 5, P)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			p := mustPolicy(t, "p", l)
			want := int64(5)
			if l.Algorithm == remote.LeakyBucket {
				want = 1 // admits only what conforms now: one unit, then its spacing
			}
			var granted int64
			for i := 0; i < 5; i++ {
				granted += acquire(t, s, p, "k", 1, 1, false).Granted
			}
			if granted != want {
				t.Fatalf("granted %d of 5, want %d", granted, want)
			}
			d := acquire(t, s, p, "k", 1, 1, false)
			maxRetry := P
			if l.Algorithm == remote.SlidingWindowCounter {
				maxRetry = 2 * P // the rest of this window, then the full bucket's weight decays
			}
			if d.Granted != 0 || d.RetryAfter <= 0 || d.RetryAfter > maxRetry {
				t.Fatalf("after the burst: %+v, want a denial with 0 < retry-after <= %v", d, maxRetry)
			}
			if ttl := c.PTTL(context.Background(), p.Keys("test", "k")[0]).Val(); ttl <= 0 || ttl > 2*P {
				t.Fatalf("key TTL %v, want within two periods", ttl)
			}
			time.Sleep(d.RetryAfter)
			for deadline := time.Now().Add(P); ; time.Sleep(5 * time.Millisecond) {
				// The sleep ends at or after retry-after; a busy machine may
				// need a moment more for the reply to reflect it, never a period.
				if acquire(t, s, p, "k", 1, 1, false).Granted == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("still denied a period after retry-after")
				}
			}
		})
	}
}

// The seeds' boundary example on Redis's own clock: just before and just
// after a window boundary, a fixed window admits twice its limit, the token
// bucket and the sliding log do not.
func TestRealRedisWindowBoundary(t *testing.T) {
	s, c := realStore(t)
	const P = time.Second
	for _, tc := range []struct {
		limit  remote.Limit
		minAll int64
		maxAll int64
	}{
		{win(remote.FixedWindow, 10, P), 20, 20},
		// The burst, and the refill while the calls last (some 200ms
		// around the boundary; at most 10 per second of it, measured on
		// Redis's clock below).
		{tb(10, 10, P), 10, -1},
		{win(remote.SlidingWindowLog, 10, P), 10, 10},
	} {
		t.Run(tc.limit.Algorithm.String(), func(t *testing.T) {
			p := mustPolicy(t, "p", tc.limit)
			redisNow := func() time.Time {
				now, err := c.Time(context.Background()).Result()
				if err != nil {
					t.Fatal(err)
				}
				return now
			}
			// Wait until 150ms before a boundary of Redis time; should
			// this machine oversleep past 100ms before it, the next one.
			var start time.Time
			for tries := 0; ; tries++ {
				rt := redisNow()
				boundary := rt.Truncate(P).Add(P)
				if boundary.Sub(rt) < 150*time.Millisecond {
					boundary = boundary.Add(P)
				}
				time.Sleep(boundary.Add(-150 * time.Millisecond).Sub(rt))
				if start = redisNow(); boundary.Sub(start) >= 100*time.Millisecond {
					break
				}
				if tries == 5 {
					t.Fatalf("woke up %v before a boundary of Redis time, five times over; want 100ms before", boundary.Sub(start))
				}
			}
			total := acquire(t, s, p, "k", 1, 10, false).Granted
			time.Sleep(200 * time.Millisecond)
			for i := 0; i < 10; i++ {
				total += acquire(t, s, p, "k", 1, 1, false).Granted
			}
			if tc.maxAll < 0 { // the bucket's: Burst + Rate·T, T on Redis's clock
				tc.maxAll = 10 + int64(10*redisNow().Sub(start).Seconds())
			}
			if total < tc.minAll || total > tc.maxAll {
				t.Fatalf("admitted %d around the boundary, want %d..%d", total, tc.minAll, tc.maxAll)
			}
		})
	}
}

func TestRealRedisMultiLimitAllOrNothing(t *testing.T) {
	s, c := realStore(t)
	ctx := context.Background()
	p := mustPolicy(t, "api", tb(10, 10, time.Second), win(remote.FixedWindow, 100, time.Minute), win(remote.SlidingWindowLog, 5, time.Hour))
	keys := p.Keys("test", "user")
	if d := acquire(t, s, p, "user", 5, 5, false); d.Granted != 5 || d.Decider != 2 {
		t.Fatalf("%+v", d)
	}
	tat, count, logged := c.Get(ctx, keys[0]).Val(), c.HGet(ctx, keys[1], "c").Val(), c.ZCard(ctx, keys[2]).Val()
	for i := 0; i < 3; i++ {
		if d := acquire(t, s, p, "user", 1, 1, false); d.Granted != 0 || d.Decider != 2 {
			t.Fatalf("denial %d: %+v, want decided by the hour limit", i, d)
		}
	}
	if c.Get(ctx, keys[0]).Val() != tat || c.HGet(ctx, keys[1], "c").Val() != count || c.ZCard(ctx, keys[2]).Val() != logged {
		t.Fatal("a denial by the hour limit charged another limit")
	}
	if count != "5" || logged != 5 {
		t.Fatalf("minute count %s, hour log %d: want 5 and 5", count, logged)
	}
}

// 50 goroutines race for one key with a limit of 100 in a period far longer
// than the test: exactly 100 are admitted, whatever the interleaving.
func TestRealRedisConcurrentExactlyTheLimit(t *testing.T) {
	s, _ := realStore(t)
	const P = 240 * time.Hour
	for _, l := range []remote.Limit{tb(100, 100, P), lb(100, 100, P), win(remote.FixedWindow, 100, P),
		win(remote.SlidingWindowLog, 100, P), win(remote.SlidingWindowCounter, 100, P)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			p := mustPolicy(t, "p", l)
			reserve := l.Algorithm == remote.LeakyBucket // queue: 100 slots
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 50; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 4; i++ {
						d, err := s.Acquire(context.Background(), remote.Request{Policy: p, Key: "hot", Min: 1, Max: 1, Reserve: reserve})
						if err != nil {
							t.Error(err) // not Fatal: this is not the test's goroutine
							return
						}
						admitted.Add(d.Granted)
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 100 {
				t.Fatalf("admitted %d of 200 attempts, want exactly 100", got)
			}
		})
	}
}

// After SCRIPT FLUSH (or a failover to a server without the script) the next
// call loads the script again: EVALSHA's NOSCRIPT falls back to EVAL.
func TestRealRedisNoScriptHeals(t *testing.T) {
	s, c := realStore(t)
	p := mustPolicy(t, "p", tb(10, 10, time.Second))
	acquire(t, s, p, "k", 1, 1, false)
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	d := acquire(t, s, p, "k", 1, 1, false)
	if d.Granted != 1 {
		t.Fatalf("after SCRIPT FLUSH: %+v", d)
	}
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	refund(t, s, p, "k", 2, d.At)
	if d := acquire(t, s, p, "k", 1, 100, false); d.Granted != 10 {
		t.Fatalf("after the refund: granted %d, want a full bucket", d.Granted)
	}
}

// Millisecond periods give millisecond TTLs, and Redis may expire a key
// while a script runs: no script may fail for it. (The log once read its
// key back after writing it, and failed here about once per thousand calls.)
func TestRealRedisMillisecondPeriods(t *testing.T) {
	s, _ := realStore(t)
	for _, l := range []remote.Limit{tb(1000, 1000, ms), lb(1000, 1000, ms), win(remote.FixedWindow, 1000, ms),
		win(remote.SlidingWindowLog, 1000, ms), win(remote.SlidingWindowCounter, 1000, ms)} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			p := mustPolicy(t, "p", l)
			var wg sync.WaitGroup
			for g := 0; g < 2; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 2500; i++ {
						_, err := s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1, Max: 1 + int64(i%3)})
						if err != nil {
							t.Errorf("call %d: %v", i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// The fair share on a real server (whose Lua is not the fake's): members
// whose demand fitted (buckets not kept) beside members held to shares,
// joining and asking again, are answered without a script error.
func TestRealRedisMembersMixed(t *testing.T) {
	s, _ := realStore(t)
	p := mustPolicy(t, "p", tb(3000, 3000, time.Second))
	ask := func(member string, demand int64) remote.Decision {
		t.Helper()
		d, err := s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1, Max: 2000,
			Member: member, Demand: demand, Horizon: 750 * time.Millisecond})
		if err != nil {
			t.Fatalf("member %s: %v", member, err)
		}
		return d
	}
	ask("a", 10) // fits: its bucket is not kept
	ask("b", 10)
	for range 5 {
		ask("c", 6000) // the demand exceeds the rate: shares
		ask("d", 6000)
		ask("a", 10)
	}
	if d := ask("b", 10); d.Members != 4 {
		t.Fatalf("%+v: want 4 members", d)
	}
}

// MaxmemoryPolicies reads a server's policy as CONFIG GET says it (Redis's
// default noeviction, then what CONFIG SET made it), every shard's of a
// Ring by address, and returns Redis's own refusal as a redis.Error: from
// a user whose ACL lacks +config|get, and from miniredis, which has no
// CONFIG.
func TestRealRedisMaxmemoryPolicies(t *testing.T) {
	store, c := realStore(t)
	ctx := context.Background()
	if got, err := store.MaxmemoryPolicies(ctx, ""); err != nil || len(got) != 1 || got[""] != "noeviction" {
		t.Fatalf("a fresh server: %v, %v; want noeviction", got, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := store.MaxmemoryPolicies(ctx, ""); err != nil || got[""] != "volatile-lru" {
		t.Fatalf("after CONFIG SET: %v, %v; want volatile-lru", got, err)
	}

	if err := c.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: c.Options().Addr, Username: "limited", Password: "pw"})
	defer limited.Close()
	var rerr redis.Error
	if got, err := remote.NewStore(limited, "test").MaxmemoryPolicies(ctx, ""); !errors.As(err, &rerr) || len(got) != 0 {
		t.Fatalf("without +config|get: %v, %v; want Redis's refusal", got, err)
	}
	mini := redistest.StartMini(t)
	if got, err := remote.NewStore(mini.Client(t), "test").MaxmemoryPolicies(ctx, ""); !errors.As(err, &rerr) || len(got) != 0 {
		t.Fatalf("miniredis: %v, %v; want Redis's refusal", got, err)
	}

	a, b := redistest.Start(t), redistest.Start(t)
	if err := b.Client(t).ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	defer ring.Close()
	got, err := remote.NewStore(ring, "test").MaxmemoryPolicies(ctx, "")
	if err != nil || len(got) != 2 || got[a.Addr] != "noeviction" || got[b.Addr] != "allkeys-lfu" {
		t.Fatalf("a Ring: %v, %v; want each shard's by address", got, err)
	}
}
