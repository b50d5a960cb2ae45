package remote_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

func TestZZSim(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip()
	}
	jit, _ := strconv.Atoi(os.Getenv("JIT"))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, burst := range []int64{200, 2000} {
		f := newFake(t)
		demands := []float64{200, 400, 1000, 2400}
		p := mustPolicy(t, "p", tb(2000, burst, time.Second))
		type member struct {
			next    time.Duration
			held    float64
			granted int64
			asks    int
		}
		horizon := 1125 * ms
		ms := make([]member, len(demands))
		const step, runFor = time.Millisecond, 4 * time.Second
		for now, turn := time.Duration(0), 0; now < runFor; now, turn = now+step, turn+1 {
			for j := range ms {
				i := (turn + j) % len(ms)
				m := &ms[i]
				m.held = max(0, m.held-demands[i]*step.Seconds())
				if m.held >= demands[i]*0.0006 || now < m.next {
					continue
				}
				d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1,
					Max: int64(demands[i] * horizon.Seconds()), Member: string(rune('a' + i)), Demand: int64(demands[i]), Horizon: horizon})
				if err != nil {
					t.Fatal(err)
				}
				m.asks++
				m.held += float64(d.Granted)
				m.granted += d.Granted
				m.next = now + d.RetryAfter + d.Next + time.Duration(rng.IntN(jit+1))*step
			}
			f.Advance(step)
		}
		var total int64
		asks := 0
		held := 0.0
		for _, m := range ms {
			total += m.granted
			asks += m.asks
			held += m.held
		}
		bound := float64(burst) + 2000*runFor.Seconds()
		t.Logf("burst %d: granted %d (%v) acc %.3f used %.3f, asks %d = %.4f per decision", burst, total, ms, float64(total)/bound, (float64(total)-held)/bound, asks, float64(asks)/16000)
	}
}
