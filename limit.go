package ratelease

import (
	"strconv"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// Algorithm is how a Limit counts. The zero value is TokenBucket.
type Algorithm int

const (
	// TokenBucket: a bucket of Burst units refilled at Rate per Period.
	// Allows bursts up to Burst; over any span T admits at most
	// Burst + Rate·T/Period. One integer of state per key (GCRA).
	TokenBucket Algorithm = iota
	// FixedWindow: at most Rate units in each window of length Period,
	// aligned to the Unix epoch. Cheapest; admits up to 2·Rate across a
	// window boundary.
	FixedWindow
	// SlidingWindowLog: at most Rate units in every span of length Period,
	// exactly. Keeps one entry per admitted unit: memory grows with Rate.
	SlidingWindowLog
	// SlidingWindowCounter: the two-window weighted estimate of a sliding
	// window; two counters per key, close to the log's accuracy.
	SlidingWindowCounter
	// LeakyBucket: output smoothed to exactly Rate per Period. Allow admits
	// only when the queue is empty; Wait queues up to Burst units and
	// sleeps until its slot.
	LeakyBucket
)

// String returns the algorithm's name, such as "token bucket".
func (a Algorithm) String() string {
	if a < 0 || a > LeakyBucket {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return remote.Algorithm(a).String()
}

// MarshalText makes the algorithm a word in JSON and logs, as String says
// it.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Limit is one rate limit: Rate events per Period. Its zero value is not a
// valid limit; PerSecond, PerMinute and PerHour make the common ones.
type Limit struct {
	// Rate is the number of events allowed per Period; > 0.
	Rate int
	// Period is the length of time Rate applies to; > 0, at least a
	// millisecond, and a whole number of microseconds. Rate·Period and
	// Burst·Period in µs must stay below 2^53 (10^9 per second is fine);
	// a SlidingWindowLog, which keeps one entry per unit, takes at most one
	// unit per microsecond.
	Period time.Duration
	// Burst is the bucket capacity of TokenBucket (the most admitted at
	// once) and the queue length of LeakyBucket; 0 means Rate. The window
	// algorithms have no burst of their own: Burst must be 0 or Rate.
	Burst int
	// Algorithm is how the limit counts; the zero value is TokenBucket.
	Algorithm Algorithm
}

// PerSecond returns a token bucket of rate events per second, burst rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }

// PerMinute returns a token bucket of rate events per minute, burst rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }

// PerHour returns a token bucket of rate events per hour, burst rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// String formats the limit as "10 req/s (burst 10)", "100 req/min (fixed
// window)" or "5 req/s (leaky bucket, queue 10)".
func (l Limit) String() string { return tier.LimitName(l.resolved()) }

// resolved returns l with Burst filled in, as the scripts see it.
func (l Limit) resolved() remote.Limit {
	r := remote.Limit{Algorithm: remote.Algorithm(l.Algorithm), Rate: int64(l.Rate), Period: l.Period, Burst: int64(l.Burst)}
	if l.Burst == 0 {
		r.Burst = r.Rate
	}
	return r
}
