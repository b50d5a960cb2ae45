package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Epoch is aligned to the hour, so windows of a second, a minute and an
// hour all start at it: a good start for a Mini's clock.
var Epoch = time.Unix(1_699_999_200, 0)

// Mini is an in-memory Redis (miniredis) whose clock moves only when the
// test says so: Advance drives both TIME inside Lua and key expiry.
type Mini struct {
	*miniredis.Miniredis
	now time.Time
}

// StartMini starts a Mini at Epoch; it is closed when t ends.
func StartMini(t testing.TB) *Mini {
	t.Helper()
	m := &Mini{Miniredis: miniredis.RunT(t), now: Epoch}
	m.SetTime(m.now)
	return m
}

// Now returns the Mini's current time.
func (m *Mini) Now() time.Time { return m.now }

// Advance moves the Mini's time forward by d: TIME in Lua and key expiry.
func (m *Mini) Advance(d time.Duration) {
	m.now = m.now.Add(d)
	m.SetTime(m.now)
	m.FastForward(d)
}

// Client returns a go-redis client for m, closed when t ends.
func (m *Mini) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
