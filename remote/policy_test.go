package remote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/remote"
)

func TestLimitValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		l    remote.Limit
		ok   bool
	}{
		{"token bucket", tb(10, 20, time.Second), true},
		{"window", win(remote.FixedWindow, 100, time.Minute), true},
		{"one per microsecond", tb(1000, 1000, time.Millisecond), true},
		{"unknown algorithm", remote.Limit{Algorithm: 9, Rate: 1, Burst: 1, Period: time.Second}, false},
		{"zero rate", tb(0, 1, time.Second), false},
		{"negative rate", tb(-1, 1, time.Second), false},
		{"zero period", tb(1, 1, 0), false},
		{"sub-millisecond period", tb(1, 1, 999*time.Microsecond), false},
		{"fractional microseconds", tb(1, 1, time.Second+time.Nanosecond), false},
		{"bytes per second: 10^9/s", tb(1_000_000_000, 1_000_000_000, time.Second), true},
		{"10^9/s in every algorithm but the log", win(remote.SlidingWindowCounter, 1_000_000_000, time.Second), true},
		{"a log of more than one per microsecond", win(remote.SlidingWindowLog, 1001, time.Millisecond), false},
		{"zero burst", tb(1, 0, time.Second), false},
		{"window burst differs from rate", remote.Limit{Algorithm: remote.SlidingWindowLog, Rate: 5, Burst: 6, Period: time.Second}, false},
		{"rate × period reaches 2^53", win(remote.FixedWindow, 1<<30, 1<<23*time.Second), false},
		{"burst × period reaches 2^53", tb(1, 1<<40, 1<<14*time.Second), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := remote.ValidateLimit(c.l)
			if c.ok && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !c.ok && !errors.Is(err, remote.ErrInvalidLimit) {
				t.Fatalf("Validate() = %v, want ErrLimit", err)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	ok := tb(1, 1, time.Second)
	for _, c := range []struct {
		name   string
		policy string
		limits []remote.Limit
		want   error
	}{
		{"empty name", "", []remote.Limit{ok}, remote.ErrInvalidPolicy},
		{"colon in name", "a:b", []remote.Limit{ok}, remote.ErrInvalidPolicy},
		{"brace in name", "a{b", []remote.Limit{ok}, remote.ErrInvalidPolicy},
		{"space in name", "a b", []remote.Limit{ok}, remote.ErrInvalidPolicy},
		{"long name", strings.Repeat("n", remote.MaxNameLen+1), []remote.Limit{ok}, remote.ErrInvalidPolicy},
		{"no limits", "p", nil, remote.ErrInvalidLimit},
		{"too many limits", "p", make([]remote.Limit, remote.MaxLimits+1), remote.ErrInvalidLimit},
		{"bad limit", "p", []remote.Limit{ok, tb(0, 1, time.Second)}, remote.ErrInvalidLimit},
		{"same algorithm and period twice", "p", []remote.Limit{ok, tb(5, 9, time.Second)}, remote.ErrInvalidLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := remote.NewPolicy(c.policy, c.limits); !errors.Is(err, c.want) {
				t.Fatalf("NewPolicy: %v, want %v", err, c.want)
			}
		})
	}
	p, err := remote.NewPolicy("p", []remote.Limit{tb(10, 20, time.Second), win(remote.FixedWindow, 15, time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Capacity() != 15 {
		t.Fatalf("Capacity() = %d, want the smallest capacity 15", p.Capacity())
	}
	if p.Rate() != 0.25 {
		t.Fatalf("Rate() = %v, want the smallest rate, 15/min = 0.25/s", p.Rate())
	}
}

func TestKeysLayout(t *testing.T) {
	p := mustPolicy(t, "api", tb(10, 10, time.Second), win(remote.FixedWindow, 100, time.Minute))
	got := p.Keys("rl", "user:42")
	want := []string{"rl:{api:user:42}:tb:1000000", "rl:{api:user:42}:fw:60000000"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Keys = %q, want %q", got, want)
	}
}

// hashTag returns what Redis Cluster hashes for key: the text between the
// first '{' and the first '}' after it, when not empty; else the whole key.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

func checkKeys(t *testing.T, p *remote.Policy, key string) []string {
	keys := p.Keys("pre", key)
	for _, k := range keys[1:] {
		if hashTag(k) != hashTag(keys[0]) {
			t.Fatalf("key %q: limits hash differently: %q vs %q", key, hashTag(k), hashTag(keys[0]))
		}
	}
	return keys
}

func TestKeysWithBracesShareASlotAndNeverCollide(t *testing.T) {
	p := mustPolicy(t, "p", tb(10, 10, time.Second), win(remote.SlidingWindowLog, 5, time.Minute), lb(1, 1, time.Hour))
	seen := map[string]string{}
	for _, key := range []string{"a", "}", "{", "{}", "}{", "a}b", "a}:tb:1000000", "x}:tb:1000000}:tb:1000000",
		"\x00\xff", strings.Repeat("}", 50), "{a}", "p:a", ""} {
		for _, k := range checkKeys(t, p, key) {
			if other, dup := seen[k]; dup {
				t.Fatalf("keys %q and %q share the Redis key %q", other, key, k)
			}
			seen[k] = key
		}
	}
}

// FuzzKeys: every limit of one key shares a hash slot, and two different
// (policy, key) pairs never share a Redis key.
func FuzzKeys(f *testing.F) {
	f.Add("a", "b", "c", "d")
	f.Add("p", "x}:tb:1000000", "p", "x")
	f.Add("p", "}", "q", "}")
	limits := []remote.Limit{tb(10, 10, time.Second), win(remote.FixedWindow, 5, time.Second), win(remote.SlidingWindowLog, 5, time.Minute)}
	f.Fuzz(func(t *testing.T, name1, key1, name2, key2 string) {
		p1, err1 := remote.NewPolicy(name1, limits)
		p2, err2 := remote.NewPolicy(name2, limits[1:])
		if err1 != nil || err2 != nil {
			return
		}
		k1, k2 := checkKeys(t, p1, key1), checkKeys(t, p2, key2)
		if name1 == name2 && key1 == key2 {
			return
		}
		for _, a := range k1 {
			for _, b := range k2 {
				if a == b {
					t.Fatalf("(%q, %q) and (%q, %q) share the Redis key %q", name1, key1, name2, key2, a)
				}
			}
		}
	})
}

func TestHonoursDeadlines(t *testing.T) {
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"client without", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"cluster without", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"ring without", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
		{"universal, one address", redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		// -1: no timeout of the client's own, the context's deadline
		// stands; -2: no deadline set on the connection at all.
		{"client, no read timeout of its own", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"client, no read deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"client, no write deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"cluster, no read deadlines", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"ring, no read timeout of its own", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"ring, no write deadlines", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"ring, no read deadlines", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
	} {
		if got := remote.HonoursDeadlines(c.client); got != c.want {
			t.Errorf("%s: HonoursDeadlines = %v, want %v", c.name, got, c.want)
		}
		_ = c.client.Close()
	}
}

func TestPolicyUses(t *testing.T) {
	p := mustPolicy(t, "p", tb(1, 1, time.Second), win(remote.SlidingWindowLog, 5, time.Minute))
	for a, want := range map[remote.Algorithm]bool{remote.TokenBucket: true, remote.SlidingWindowLog: true,
		remote.FixedWindow: false, remote.SlidingWindowCounter: false, remote.LeakyBucket: false} {
		if p.Uses(a) != want {
			t.Errorf("Uses(%v) = %v, want %v", a, p.Uses(a), want)
		}
	}
}
