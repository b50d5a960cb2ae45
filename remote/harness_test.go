package remote_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = redistest.Epoch

// fake is a Store on a miniredis whose time moves only when the test says so.
type fake struct {
	*redistest.Mini
	s *remote.Store
}

func newFake(t *testing.T) *fake {
	t.Helper()
	m := redistest.StartMini(t)
	return &fake{Mini: m, s: remote.NewStore(m.Client(t), "test")}
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
