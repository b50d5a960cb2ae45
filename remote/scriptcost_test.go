package remote

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// BenchmarkScriptCost is where an exact decision's Redis CPU goes, part by
// part, for a one-limit token bucket: redis-µs/call is FCALL's or
// EVALSHA's usec_per_call from INFO commandstats (reset after a warm-up)
// over the ops, one call each, of the acquire script and of scripts that do
// only a part of its work with the same keys and arguments: nothing (the
// floor of a script call), TIME, TIME and the block's PTTL, TIME and the
// GET and SET a GCRA needs, and the assembled definitions alone (prelude,
// gcra.lua, tokenbucket.lua, with and without members.lua and
// fairshare.lua), which Redis runs anew on every call. Run it with
//
//	go test -run '^$' -bench '^BenchmarkScriptCost$' -count 7 ./remote
//
// and take the median of each part (benchstat does).
func BenchmarkScriptCost(b *testing.B) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redistest.BenchAddr(b)})
	defer c.Close()
	s := NewStore(c, "cost")
	p, err := NewPolicy("api", []Limit{{Algorithm: TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}})
	if err != nil {
		b.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprint("k", i%100) }
	type part struct {
		name string
		call func(i int) error
	}
	// The same calls as scripts (EVALSHA), as on a server without
	// functions.
	scripted := NewStore(c, "cost")
	scripted.scriptsUntil.Store(math.MaxInt64)
	var parts []part
	for _, st := range []struct {
		how string
		s   *Store
	}{{"fcall", s}, {"evalsha", scripted}} {
		parts = append(parts, part{"acquire-member-" + st.how, func(i int) error {
			_, err := st.s.Acquire(ctx, Request{Policy: p, Key: key(i), Min: 1, Max: 1, Member: "m", Demand: 1, Horizon: time.Second})
			return err
		}}, part{"bucket-exact-" + st.how, func(i int) error {
			_, err := st.s.Acquire(ctx, Request{Policy: p, Key: key(i), Min: 1, Max: 1})
			return err
		}})
	}
	mask := uint8(1 << TokenBucket)
	for _, sp := range []struct{ name, src string }{
		{"nothing", "return 1"},
		{"time", "local t = redis.call('TIME') return 1"},
		{"time-pttl", "local t = redis.call('TIME') local b = redis.call('PTTL', KEYS[#KEYS]) return 1"},
		{"time-get-set", "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1:2:3', 'PX', 60000) return 1"},
		{"definitions", definitions(mask) + read("now.lua") + "return 1"},
		{"definitions-members-fairshare", definitions(mask) + read("members.lua", "fairshare.lua", "now.lua") + "return 1"},
	} {
		sc := redis.NewScript(sp.src)
		args := s.args(Request{Policy: p, Key: "k", Min: 1, Max: 1}, 0)
		parts = append(parts, part{sp.name, func(i int) error {
			err := sc.Run(ctx, c, p.keys(s.prefix, key(i), false, true), args...).Err()
			if err == redis.Nil {
				err = nil
			}
			return err
		}})
	}
	for _, pt := range parts {
		b.Run("part="+pt.name, func(b *testing.B) {
			for i := range 1000 {
				if err := pt.call(i); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				if err := pt.call(i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			usec, n := redistest.ScriptStats(b, c)
			if n < float64(b.N) {
				b.Fatalf("INFO commandstats counts %v calls of EVALSHA and FCALL, want %d", n, b.N)
			}
			b.ReportMetric(usec/n, "redis-µs/call")
		})
	}
}
