package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
)

// step is the simulation's resolution: demand is drawn, and time moves,
// one millisecond at a time.
const step = time.Millisecond

// scenario is what every configuration of a sweep runs: a token bucket of
// Rate per Period with Burst, Instances sharing it, and their demand.
type scenario struct {
	Rate      int
	Period    time.Duration
	Burst     int
	Instances int
	Profile   string  // steady, bursty or skewed
	Load      float64 // the instances' demand together, ÷ the rate
	Duration  time.Duration
	Seed      uint64
}

// profiles are the demand profiles, each described for -help.
var profiles = map[string]string{
	"steady": "every instance asks for the same, evenly",
	"bursty": "every instance asks in bursts of 100ms at 5× its average, one burst every 500ms, at its own phase",
	"skewed": "one instance asks for half of the demand, the others share the other half",
}

// demand returns the requests each instance asks for in each step: a
// fixed, seeded draw, so that every configuration sees the same demand.
func (s scenario) demand() [][]int {
	steps := int(s.Duration / step)
	perStep := s.Load * float64(s.Rate) * float64(step) / float64(s.Period) // all instances
	shares := make([]float64, s.Instances)
	for i := range shares {
		shares[i] = 1 / float64(s.Instances)
		if s.Profile == "skewed" && s.Instances > 1 {
			shares[i] = 0.5 / float64(s.Instances-1)
			if i == 0 {
				shares[i] = 0.5
			}
		}
	}
	rng := rand.New(rand.NewPCG(s.Seed, 1))
	const burstLen, cycle = 100, 500 // ms, bursty
	out := make([][]int, steps)
	phases := make([]int, s.Instances)
	for i := range phases {
		phases[i] = rng.IntN(cycle)
	}
	for ms := range out {
		out[ms] = make([]int, s.Instances)
		for i, sh := range shares {
			mean := perStep * sh
			if s.Profile == "bursty" {
				mean = 0
				if (ms+phases[i])%cycle < burstLen {
					mean = perStep * sh * cycle / burstLen
				}
			}
			n := int(mean)
			if rng.Float64() < mean-float64(n) {
				n++
			}
			out[ms][i] = n
		}
	}
	return out
}

// exact is what an exact token bucket would admit of demand, in each step:
// the reference for what leasing gives up.
func (s scenario) exact(demand [][]int) []int {
	refill := float64(s.Rate) * float64(step) / float64(s.Period)
	tokens := float64(s.Burst)
	out := make([]int, len(demand))
	for ms, asks := range demand {
		if ms > 0 {
			tokens = math.Min(float64(s.Burst), tokens+refill)
		}
		for _, n := range asks {
			for r := 0; r < n; r++ {
				if tokens >= 1 {
					tokens--
					out[ms]++
				}
			}
		}
	}
	return out
}

// result is what one configuration did with the scenario.
type result struct {
	Lease ratelease.LeaseConfig
	// CallsPerSec is the Redis round trips per second, all instances.
	CallsPerSec float64
	// Overshoot is the most any window admitted past Burst + Rate·w, in
	// units, over the windows checked; OvershootBound is Rate·TTL, what the
	// guarantee allows.
	Overshoot, OvershootBound float64
	// Stranded is the units leased that lapsed unused.
	Stranded uint64
	// Served is admitted ÷ what an exact token bucket admits of the same
	// demand.
	Served float64
	// P99 is the 99th percentile of a decision's wall time.
	P99 time.Duration
	// MeanLease is the units per lease.
	MeanLease float64
}

// backend is the Redis a run uses, and the clock that moves with it.
type backend interface {
	// client returns a new client for a Limiter.
	client() *redis.Client
	// clock is the Limiters' clock.
	clock() clock.Clock
	// advance moves time on by one step: simulated, or slept.
	advance()
	close()
}

// run puts the scenario's demand through cfg, one Limiter per instance on
// b, one step at a time.
func run(s scenario, lc ratelease.LeaseConfig, b backend, demand [][]int, exact []int, prefix string) (result, error) {
	res := result{Lease: lc}
	var ls []*ratelease.Limiter
	var clients []*redis.Client
	defer func() { // the Limiters first: they refund through their clients
		for _, l := range ls {
			_ = l.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for i := 0; i < s.Instances; i++ {
		c := b.client()
		clients = append(clients, c)
		l, err := ratelease.New(c, ratelease.WithLease(lc), ratelease.WithClock(b.clock()),
			ratelease.WithKeyPrefix(prefix), ratelease.WithRedisTimeout(time.Second))
		if err != nil {
			return res, err
		}
		ls = append(ls, l)
	}
	p, err := ratelease.NewPolicy("leasetune", ratelease.Limit{Rate: s.Rate, Period: s.Period, Burst: s.Burst})
	if err != nil {
		return res, err
	}
	ctx := context.Background()
	admitted := make([]int, len(demand))
	latencies := make([]time.Duration, 0, 1024)
	for ms, asks := range demand {
		for i, n := range asks {
			for r := 0; r < n; r++ {
				start := time.Now()
				d, err := ls[i].Allow(ctx, p, "key")
				latencies = append(latencies, time.Since(start))
				if err != nil {
					return res, fmt.Errorf("instance %d at %v: %w", i, time.Duration(ms)*step, err)
				}
				if d.Allowed {
					admitted[ms]++
				}
			}
		}
		b.advance()
	}
	var calls, leases, leased uint64
	for _, l := range ls {
		st := l.Stats()
		calls += st.RoundTrips
		leases += st.Leases
		leased += st.UnitsLeased
		res.Stranded += st.UnitsExpired
	}
	secs := s.Duration.Seconds()
	res.CallsPerSec = float64(calls) / secs
	res.MeanLease = float64(leased) / float64(max(leases, 1))
	res.OvershootBound = float64(s.Rate) * lc.TTL.Seconds() / s.Period.Seconds()
	res.Overshoot = overshoot(s, admitted)
	res.Served = float64(sum(admitted)) / float64(max(sum(exact), 1))
	if len(latencies) > 0 {
		slices.Sort(latencies)
		res.P99 = latencies[(len(latencies)-1)*99/100]
	}
	return res, nil
}

// overshoot is the most any window of the run admitted past
// Burst + Rate·w, over windows from one step to twice the period.
func overshoot(s scenario, admitted []int) float64 {
	worst := math.Inf(-1)
	for _, w := range []time.Duration{step, 10 * step, 100 * step, s.Period / 2, s.Period, 2 * s.Period} {
		n := int(w / step)
		if n < 1 || n > len(admitted) {
			continue
		}
		most, in := 0, 0
		for ms, a := range admitted { // windows of n steps ending at ms
			in += a
			if ms >= n {
				in -= admitted[ms-n]
			}
			most = max(most, in)
		}
		// A window of n steps spans (n-1) steps of refill.
		bound := float64(s.Burst) + float64(s.Rate)*float64(n-1)*float64(step)/float64(s.Period)
		worst = max(worst, float64(most)-bound)
	}
	return worst
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// simulated is embedded miniredis on simulated time: Redis's TIME, key
// expiry and the Limiters' clock move together, a step at a time.
type simulated struct {
	mr  *miniredis.Miniredis
	clk *clock.Manual
	now time.Time
}

func newSimulated() (*simulated, error) {
	mr, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	start := time.Unix(1_699_999_200, 0) // on the hour
	mr.SetTime(start)
	return &simulated{mr: mr, clk: clock.NewManual(start), now: start}, nil
}

func (s *simulated) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.mr.Addr(), ContextTimeoutEnabled: true})
}
func (s *simulated) clock() clock.Clock { return s.clk }
func (s *simulated) advance() {
	s.now = s.now.Add(step)
	s.mr.SetTime(s.now)
	s.mr.FastForward(step)
	s.clk.Advance(step)
}
func (s *simulated) close() { s.mr.Close() }

// live is a Redis the user named, on real time: each step is slept to its
// end (so a run lasts its whole duration).
type live struct {
	addr string
	next time.Time
}

func (r *live) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.addr, ContextTimeoutEnabled: true})
}
func (r *live) clock() clock.Clock { return clock.System{} }
func (r *live) advance() {
	if r.next.IsZero() {
		r.next = time.Now()
	}
	r.next = r.next.Add(step)
	time.Sleep(time.Until(r.next))
}
func (r *live) close() {}
