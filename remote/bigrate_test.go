package remote_test

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// The largest rates, bursts and periods the scripts accept, against an
// exact model in rational numbers: every request of a random load (random
// gaps down to a microsecond, random sizes up to the capacity) is granted
// or denied as the model says, and the room the script reports is the
// model's. Rates of 10^9 units per second (bytes per second) included.
func TestLargestRatesAgainstExactModel(t *testing.T) {
	const second = time.Second
	for _, c := range []struct {
		name string
		l    remote.Limit
	}{
		{"token bucket 10^9/s", tb(1_000_000_000, 1_000_000_000, second)},
		{"token bucket 10^9/s, burst 10^6", tb(1_000_000_000, 1_000_000, second)},
		{"token bucket at 2^53: 2.5M/h, burst 2.5M", tb(2_500_000, 2_500_000, time.Hour)},
		{"token bucket, a rate that divides nothing: 999,999,937/s", tb(999_999_937, 123_456_789, second)},
		{"fixed window 10^9/s", win(remote.FixedWindow, 1_000_000_000, second)},
		{"sliding window counter 10^9/s", win(remote.SlidingWindowCounter, 1_000_000_000, second)},
		{"leaky bucket 10^9/s", lb(1_000_000_000, 1_000_000_000, second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t)
			p := mustPolicy(t, "p", c.l)
			m := newModel(c.l, f.Now().UnixMicro())
			rng := rand.New(rand.NewPCG(7, 7))
			var granted int
			for i := 0; i < 400; i++ {
				// Gaps from 1µs to a fifth of the period, on a log scale.
				gap := int64(1) << rng.IntN(max(1, bitsOf(int64(c.l.Period/time.Microsecond)/5)))
				gap += rng.Int64N(gap)
				f.Advance(time.Duration(gap) * time.Microsecond)
				m.advance(f.Now().UnixMicro())
				n := 1 + rng.Int64N(remote.LimitCapacity(c.l))
				if rng.IntN(3) == 0 {
					n = 1 + rng.Int64N(min(remote.LimitCapacity(c.l), 1000))
				}
				d := acquire(t, f.s, p, "k", n, n, false)
				want := m.admit(n)
				if (d.Granted == n) != want {
					t.Fatalf("request %d of %d units at +%dµs: granted %d, the model says %v (model room %s)",
						i, n, f.Now().UnixMicro()-m.start, d.Granted, want, m.room().FloatString(3))
				}
				if d.Granted > 0 {
					granted++
				}
				if room := m.room(); d.Remaining != floor(room) {
					t.Fatalf("request %d: Remaining %d, the model's room %s", i, d.Remaining, room.FloatString(3))
				}
			}
			if granted < 10 || granted > 390 {
				t.Fatalf("%d of 400 granted: the load does not exercise the limit", granted)
			}
		})
	}
}

// model is an exact model of one limit, in rational numbers.
type model struct {
	l     remote.Limit
	start int64
	now   int64    // µs
	level *big.Rat // bucket: units in it; leaky: units queued
	w     int64    // window index
	c, p  int64    // window counts: current and previous
}

func newModel(l remote.Limit, now int64) *model {
	m := &model{l: l, start: now, now: now, level: new(big.Rat)}
	if l.Algorithm == remote.TokenBucket {
		m.level.SetInt64(l.Burst)
	}
	m.w = now / m.period()
	return m
}

func (m *model) period() int64 { return int64(m.l.Period / time.Microsecond) }

// advance moves the model to now: refill or drain, or the windows on.
func (m *model) advance(now int64) {
	dt := big.NewRat((now-m.now)*m.l.Rate, m.period())
	m.now = now
	switch m.l.Algorithm {
	case remote.TokenBucket:
		m.level.Add(m.level, dt)
		if b := new(big.Rat).SetInt64(m.l.Burst); m.level.Cmp(b) > 0 {
			m.level = b
		}
	case remote.LeakyBucket:
		m.level.Sub(m.level, dt)
		if m.level.Sign() < 0 {
			m.level.SetInt64(0)
		}
	default:
		w := now / m.period()
		switch {
		case w == m.w+1:
			m.p, m.c = m.c, 0
		case w > m.w+1:
			m.p, m.c = 0, 0
		}
		m.w = w
	}
}

// room is what the limit could grant now.
func (m *model) room() *big.Rat {
	switch m.l.Algorithm {
	case remote.TokenBucket:
		return new(big.Rat).Set(m.level)
	case remote.LeakyBucket: // admits only into an empty queue
		if m.level.Sign() > 0 {
			return new(big.Rat)
		}
		return new(big.Rat).SetInt64(m.l.Burst)
	case remote.FixedWindow:
		return new(big.Rat).SetInt64(m.l.Rate - m.c)
	}
	// Sliding window counter: rate - c - ceil(p · (period - elapsed) / period).
	e := m.now - m.w*m.period()
	weighted := ceil(big.NewRat(m.p*(m.period()-e), m.period()))
	return new(big.Rat).SetInt64(max(0, m.l.Rate-m.c-weighted))
}

// admit grants n units if the limit has room for them.
func (m *model) admit(n int64) bool {
	if m.room().Cmp(new(big.Rat).SetInt64(n)) < 0 {
		return false
	}
	switch m.l.Algorithm {
	case remote.TokenBucket:
		m.level.Sub(m.level, new(big.Rat).SetInt64(n))
	case remote.LeakyBucket:
		m.level.Add(m.level, new(big.Rat).SetInt64(n))
	default:
		m.c += n
	}
	return true
}

func floor(r *big.Rat) int64 {
	return new(big.Int).Div(r.Num(), r.Denom()).Int64() // Euclidean: floor for a positive denominator
}

func ceil(r *big.Rat) int64 { return -floor(new(big.Rat).Neg(r)) }

func bitsOf(x int64) int {
	n := 0
	for ; x > 0; x >>= 1 {
		n++
	}
	return n
}
