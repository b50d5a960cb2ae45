package remote

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/internal/redistest"
)

// TestScriptCost is a measurement, not a check: where an exact decision's
// Redis CPU goes, part by part, for a one-limit token bucket: EVALSHA
// usec_per_call from INFO commandstats (reset before each part) for the
// acquire script, and for scripts that do only a part of its work with the
// same keys and arguments: nothing (the floor of a script call), TIME,
// TIME and the block's PTTL, TIME and the GET and SET a GCRA needs, and
// the assembled definitions alone (prelude, gcra.lua, tokenbucket.lua, with
// and without members.lua and fairshare.lua), which Redis runs anew on
// every call. Run it with
//
//	RATELEASE_MEASURE=1 go test -run TestScriptCost -v ./remote
func TestScriptCost(t *testing.T) {
	redistest.Measure(t)
	ctx := context.Background()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s := NewStore(c, "cost")
	p, err := NewPolicy("api", []Limit{{Algorithm: TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	const calls = 20000
	perCall := func(f func(i int) error) float64 {
		for i := 0; i < 1000; i++ {
			if err := f(i); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < calls; i++ {
			if err := f(i); err != nil {
				t.Fatal(err)
			}
		}
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if stats, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
				for _, kv := range strings.Split(stats, ",") {
					if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
						f, err := strconv.ParseFloat(v, 64)
						if err != nil {
							t.Fatal(err)
						}
						return f
					}
				}
			}
		}
		t.Fatal("INFO commandstats has no evalsha")
		return 0
	}
	key := func(i int) string { return fmt.Sprint("k", i%100) }
	t.Logf("%-60s %8s", "script", "µs/call")
	t.Logf("%-60s %8.2f", "acquire.lua, exact (the whole decision)", perCall(func(i int) error {
		_, err := s.Acquire(ctx, Request{Policy: p, Key: key(i), Min: 1, Max: 1})
		return err
	}))
	mask := uint8(1 << TokenBucket)
	for _, part := range []struct{ name, src string }{
		{"nothing (return 1)", "return 1"},
		{"TIME", "local t = redis.call('TIME') return 1"},
		{"TIME, PTTL of the block", "local t = redis.call('TIME') local b = redis.call('PTTL', KEYS[#KEYS]) return 1"},
		{"TIME, GET, SET PX (a GCRA's commands)", "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1:2:3', 'PX', 60000) return 1"},
		{"definitions: prelude (TIME), gcra, tokenbucket", assemble(mask) + "\nreturn 1"},
		{"definitions, with members and fairshare", assemble(mask, "members.lua", "fairshare.lua") + "\nreturn 1"},
	} {
		sc := redis.NewScript(part.src)
		args := acquireArgs(Request{Policy: p, Key: "k", Min: 1, Max: 1})
		t.Logf("%-60s %8.2f", part.name, perCall(func(i int) error {
			err := sc.Run(ctx, c, p.keys(s.prefix, key(i), false, true), args...).Err()
			if err == redis.Nil {
				err = nil
			}
			return err
		}))
	}
}
