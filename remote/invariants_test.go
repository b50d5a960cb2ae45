package remote_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

type grant struct {
	at time.Duration // since t0
	n  int64
}

// randomLoad drives one key with random gaps and random partial requests and
// returns what was granted, when.
func randomLoad(t *testing.T, l remote.Limit, seed uint64, steps int) []grant {
	f := newFake(t)
	p := mustPolicy(t, "p", l)
	rng := rand.New(rand.NewPCG(seed, seed))
	var log []grant
	for i := 0; i < steps; i++ {
		f.Advance(time.Duration(rng.Int64N(int64(l.Period / 3))))
		lo := 1 + rng.Int64N(remote.LimitCapacity(l))
		hi := lo + rng.Int64N(remote.LimitCapacity(l))
		if d := acquire(t, f.s, p, "k", lo, hi, false); d.Granted > 0 {
			if d.Granted < lo || d.Granted > hi {
				t.Fatalf("granted %d outside [%d, %d]", d.Granted, lo, hi)
			}
			log = append(log, grant{f.Now().Sub(t0), d.Granted})
		}
	}
	if len(log) < steps/10 {
		t.Fatalf("only %d grants in %d steps: the load does not exercise the limit", len(log), steps)
	}
	return log
}

func TestInvariantsUnderRandomLoad(t *testing.T) {
	P := time.Second
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run("token bucket: any span w admits at most burst + rate·w", func(t *testing.T) {
			l := tb(7, 4, P)
			log := randomLoad(t, l, seed, 300)
			for i := range log {
				var sum int64
				for j := i; j < len(log); j++ {
					sum += log[j].n
					w := int64(log[j].at - log[i].at)
					if sum*int64(P) > l.Burst*int64(P)+l.Rate*w {
						t.Fatalf("%d units in %v > %d + %d·w", sum, time.Duration(w), l.Burst, l.Rate)
					}
				}
			}
		})
		t.Run("fixed window: each window admits at most rate", func(t *testing.T) {
			l := win(remote.FixedWindow, 9, P)
			per := map[int64]int64{}
			for _, g := range randomLoad(t, l, seed, 300) {
				w := int64(g.at / P)
				if per[w] += g.n; per[w] > l.Rate {
					t.Fatalf("window %d admitted %d > %d", w, per[w], l.Rate)
				}
			}
		})
		t.Run("sliding window log: every period admits at most rate", func(t *testing.T) {
			l := win(remote.SlidingWindowLog, 9, P)
			log := randomLoad(t, l, seed, 300)
			for j := range log {
				var sum int64
				for i := j; i >= 0 && log[i].at > log[j].at-P; i-- {
					sum += log[i].n
				}
				if sum > l.Rate {
					t.Fatalf("%d units in the period ending %v > %d", sum, log[j].at, l.Rate)
				}
			}
		})
		t.Run("sliding window counter: the estimate never exceeds rate", func(t *testing.T) {
			l := win(remote.SlidingWindowCounter, 9, P)
			per := map[int64]int64{}
			for _, g := range randomLoad(t, l, seed, 300) {
				w := int64(g.at / P)
				per[w] += g.n
				e := int64(g.at - time.Duration(w)*P)
				weight := (per[w-1]*(int64(P)-e) + int64(P) - 1) / int64(P) // ceil
				if per[w]+weight > l.Rate {
					t.Fatalf("at %v: %d + weight %d > %d", g.at, per[w], weight, l.Rate)
				}
			}
		})
		t.Run("leaky bucket: grants spaced by their cost", func(t *testing.T) {
			l := lb(7, 4, P)
			log := randomLoad(t, l, seed, 300)
			for i := 1; i < len(log); i++ {
				cost := time.Duration((log[i-1].n*int64(P) + l.Rate - 1) / l.Rate)
				if gap := log[i].at - log[i-1].at; gap < cost {
					t.Fatalf("grants at %v and %v: gap %v < cost %v of %d units", log[i-1].at, log[i].at, gap, cost, log[i-1].n)
				}
			}
		})
	}
}

// Under saturating demand a token bucket admits exactly burst + rate·T, even
// when rate does not divide the period: no rounding drift either way.
func TestTokenBucketNoDrift(t *testing.T) {
	for _, l := range []remote.Limit{tb(3, 3, time.Second), tb(7, 2, time.Second), tb(1000, 10, time.Minute)} {
		f := newFake(t)
		p := mustPolicy(t, "p", l)
		var admitted int64
		const steps = 1000
		// Ask often enough that the bucket never overflows: saturating demand.
		step := time.Duration(l.Period.Microseconds()*l.Burst/l.Rate/2) * time.Microsecond
		for i := 0; i <= steps; i++ {
			admitted += acquire(t, f.s, p, "k", 1, l.Burst, false).Granted
			if i < steps {
				f.Advance(step)
			}
		}
		T := time.Duration(steps) * step
		want := l.Burst + l.Rate*T.Microseconds()/l.Period.Microseconds()
		if admitted != want {
			t.Errorf("%d/%v burst %d over %v: admitted %d, want exactly %d", l.Rate, l.Period, l.Burst, T, admitted, want)
		}
	}
}
