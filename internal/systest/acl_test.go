package systest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// The least-privilege ACL docs/operations.md gives is enough: a user made with it,
// word for word, decides every algorithm in exact and in lease mode, leases
// and gives units back, and is refused a key outside the prefix. It leaves
// out CONFIG GET, so WithEvents cannot warn of an evicting Redis; the
// doc says that +config|get, added, lets it.
func TestDocumentedACLSuffices(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var acl string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "ACL SETUSER ratelease ") {
			acl = line
		}
	}
	if acl == "" {
		t.Fatal("docs/operations.md gives no ACL SETUSER line")
	}
	// Every command a script calls is in it.
	scripts, err := filepath.Glob("../../remote/lua/*.lua")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("the scripts: %v, %v", scripts, err)
	}
	// call('CMD', ...) (the prelude's local redis.call), redis.call('CMD',
	// ...), and argument lists built for unpack: { 'CMD', ...
	call := regexp.MustCompile(`(?:\bcall\(|= \{ )'([A-Z]+)'`)
	found := 0
	for _, f := range scripts {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			found++
			if !strings.Contains(acl+" ", " +"+strings.ToLower(m[1])+" ") {
				t.Errorf("%s calls %s, which the documented ACL does not allow", f, m[1])
			}
		}
	}
	if found < 20 {
		t.Errorf("found only %d command calls in the scripts: the pattern misses them", found)
	}
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	args := []any{}
	for _, f := range strings.Fields(acl) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%s: %v", acl, err)
	}
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "ratelease", Password: "secret", ContextTimeoutEnabled: true})
	defer user.Close()
	if err := user.Set(ctx, "other:key", "x", 0).Err(); err == nil {
		t.Fatal("the ACL user wrote a key outside the prefix")
	}
	// An evicting Redis: the least-privilege user cannot read its
	// maxmemory-policy, so the Limiter says nothing of it (and counts no
	// error); given +config|get as well, it warns.
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []ratelease.Event
	observe := ratelease.WithEvents(func(ev ratelease.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	for _, exact := range []bool{true, false} {
		opts := []ratelease.Option{ratelease.WithFailureMode(ratelease.FailClosed), ratelease.WithRedisTimeout(2 * time.Second), observe}
		if exact {
			opts = append(opts, ratelease.WithExact())
		}
		l, err := ratelease.New(user, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, alg := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.FixedWindow, ratelease.SlidingWindowLog,
			ratelease.SlidingWindowCounter, ratelease.LeakyBucket} {
			p := policy(t, "acl", ratelease.Limit{Rate: 50, Period: time.Second, Algorithm: alg})
			for i := range 5 {
				if res, err := l.Allow(ctx, p, "k"); err != nil {
					t.Fatalf("exact=%v %v, decision %d: %v", exact, alg, i, err)
				} else if !res.Allowed && alg != ratelease.LeakyBucket {
					t.Fatalf("exact=%v %v, decision %d: denied", exact, alg, i)
				}
			}
		}
		cal := policy(t, "aclcal", ratelease.PerSecond(50), ratelease.PerCalendarDay(50, nil))
		for i := range 5 {
			if res, err := l.Allow(ctx, cal, "k"); err != nil || !res.Allowed {
				t.Fatalf("exact=%v a calendar quota, decision %d: %+v, %v", exact, i, res, err)
			}
		}
		// Permits: acquired (leased slots in lease mode), extended, released.
		c, err := ratelease.NewConcurrency("aclperm", 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			pm, res, err := l.AcquirePermit(ctx, c, "k")
			if err != nil || pm == nil {
				t.Fatalf("exact=%v permit %d: %+v, %v", exact, i, res, err)
			}
			if err := pm.Extend(ctx, 2*time.Minute); err != nil {
				t.Fatalf("exact=%v permit %d: Extend: %v", exact, i, err)
			}
			if err := pm.Release(ctx); err != nil {
				t.Fatalf("exact=%v permit %d: Release: %v", exact, i, err)
			}
		}
		if err := l.Close(); err != nil { // gives leased units and slots back
			t.Fatal(err)
		}
		if s := l.Stats(); s.Errors != 0 {
			t.Fatalf("exact=%v: %d Redis calls failed as the ACL user", exact, s.Errors)
		}
	}
	mu.Lock()
	if len(events) != 0 {
		t.Fatalf("events without +config|get: %+v; want none", events)
	}
	mu.Unlock()
	const configGet = "+config|get"
	if !strings.Contains(string(readme), "`"+configGet+"`") {
		t.Fatalf("docs/operations.md does not say that %s enables the eviction warning", configGet)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "ratelease", configGet).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := ratelease.New(user, observe)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Allow(ctx, policy(t, "acl", ratelease.PerSecond(5)), "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // waits for the reading
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 || !errors.Is(events[0].Err, ratelease.ErrEvictionPolicy) {
		t.Fatalf("events with %s: %+v; want the eviction warning", configGet, events)
	}
}
