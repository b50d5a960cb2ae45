package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is aligned to the hour, so windows of 1s, 1m and 1h all start at t0.
var t0 = time.Unix(1_699_999_200, 0)

// fake is a miniredis whose time moves only when the test says so.
type fake struct {
	mr  *miniredis.Miniredis
	now time.Time
	s   *remote.Store
}

func newFake(t *testing.T) *fake {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(t0)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return &fake{mr: mr, now: t0, s: remote.NewStore(c, "test")}
}

// advance moves both of miniredis's clocks: TIME inside Lua and key expiry.
func (f *fake) advance(d time.Duration) {
	f.now = f.now.Add(d)
	f.mr.SetTime(f.now)
	f.mr.FastForward(d)
}

func mustPolicy(t testing.TB, name string, limits ...remote.Limit) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy(name, limits)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t testing.TB, s *remote.Store, p *remote.Policy, key string, min, max int64, reserve bool) remote.Decision {
	t.Helper()
	d, err := s.Acquire(context.Background(), remote.Request{Policy: p, Key: key, Min: min, Max: max, Reserve: reserve})
	if err != nil {
		t.Fatalf("Acquire(%q, %d..%d): %v", key, min, max, err)
	}
	return d
}

func refund(t testing.TB, s *remote.Store, p *remote.Policy, key string, units, at int64) {
	t.Helper()
	if err := s.Refund(context.Background(), p, key, units, at); err != nil {
		t.Fatalf("Refund(%q, %d): %v", key, units, err)
	}
}

func tb(rate, burst int64, period time.Duration) remote.Limit {
	return remote.Limit{Algorithm: remote.TokenBucket, Rate: rate, Burst: burst, Period: period}
}

func lb(rate, burst int64, period time.Duration) remote.Limit {
	return remote.Limit{Algorithm: remote.LeakyBucket, Rate: rate, Burst: burst, Period: period}
}

func win(a remote.Algorithm, rate int64, period time.Duration) remote.Limit {
	return remote.Limit{Algorithm: a, Rate: rate, Burst: rate, Period: period}
}
