package remote

import (
	"context"
	"fmt"
	"math"
	"sort"
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
	const calls = 5000
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
		usec, n := redistest.ScriptStats(t, c)
		if n < calls {
			t.Fatalf("INFO commandstats counts %v calls of EVALSHA and FCALL, want %d", n, calls)
		}
		return usec / n
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
	}{{"FCALL", s}, {"EVALSHA", scripted}} {
		parts = append(parts, part{"acquire.lua, a lease with a member, " + st.how, func(i int) error {
			_, err := st.s.Acquire(ctx, Request{Policy: p, Key: key(i), Min: 1, Max: 1, Member: "m", Demand: 1, Horizon: time.Second})
			return err
		}}, part{"bucket.lua, an exact decision, " + st.how, func(i int) error {
			_, err := st.s.Acquire(ctx, Request{Policy: p, Key: key(i), Min: 1, Max: 1})
			return err
		}})
	}
	mask := uint8(1 << TokenBucket)
	for _, sp := range []struct{ name, src string }{
		{"nothing (return 1)", "return 1"},
		{"TIME", "local t = redis.call('TIME') return 1"},
		{"TIME, PTTL of the block", "local t = redis.call('TIME') local b = redis.call('PTTL', KEYS[#KEYS]) return 1"},
		{"TIME, GET, SET PX (a GCRA's commands)", "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1:2:3', 'PX', 60000) return 1"},
		{"definitions: prelude (TIME), gcra, tokenbucket", definitions(mask) + read("now.lua") + "return 1"},
		{"definitions, with members and fairshare", definitions(mask) + read("members.lua", "fairshare.lua", "now.lua") + "return 1"},
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
	// Rounds, every part once in each: a machine that slows down for a
	// while slows every part alike. The median round is reported.
	const rounds = 7
	got := make([][]float64, len(parts))
	for r := 0; r < rounds; r++ {
		for i, pt := range parts {
			got[i] = append(got[i], perCall(pt.call))
		}
	}
	t.Logf("%-60s %8s", "script", "µs/call")
	for i, pt := range parts {
		sort.Float64s(got[i])
		t.Logf("%-60s %8.2f", pt.name, got[i][rounds/2])
	}
}
