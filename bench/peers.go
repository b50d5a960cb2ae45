package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/ratelease/ratelease"
)

// Limit is the limit every peer enforces: Rate per second with a bucket of
// Burst, shared by Instances processes. Prefix keeps one run's Redis keys
// apart from another's.
type Limit struct {
	Rate, Burst, Instances int
	Prefix                 string
}

// Instance is one process's limiter.
type Instance interface {
	// Allow decides one request for key.
	Allow(ctx context.Context, key string) (bool, error)
	// Close releases what the instance holds (ratelease returns its
	// leased units); it does not close the client.
	Close() error
}

// Peer is one limiter under test.
type Peer struct {
	// Name is the benchmark's impl= value.
	Name string
	// Global says whether the limit holds across instances.
	Global bool
	// New makes one instance of the peer on client c.
	New func(c redis.UniversalClient, l Limit) (Instance, error)
	// Limits is the number of limits each decision checks: 0 is one.
	Limits int
}

// Peers returns the limiters compared: ratelease's lease mode with its
// defaults first (DefaultLeaseConfig: no bound on a lease's size), then
// redis_rate, the baseline of the goals.
func Peers() []Peer {
	return []Peer{
		{Name: "ratelease-lease", Global: true, New: newRatelease()},
		{Name: "redis_rate", Global: true, New: newRedisRate},
		{Name: "ratelease-exact", Global: true, New: newRatelease(ratelease.WithExact())},
		{Name: "ulule-limiter", Global: true, New: newUlule},
		{Name: "x-time-rate", Global: false, New: newLocal},
	}
}

// ExactAlgorithms returns ratelease in exact mode with each algorithm, one
// peer each, named ratelease-exact/<algorithm>, for the report's table by
// algorithm: a limit of the given rate per second (with its burst for
// the buckets), but a sliding window log's of the same rate over a
// millisecond (a thousandth of it per millisecond), so that its log, an
// entry per unit admitted in a period, stays as long as a real limit's.
// The names have no spaces: a benchmark line's name ends at the first.
// Last, a policy of three token buckets.
func ExactAlgorithms() []Peer {
	var peers []Peer
	for _, a := range []ratelease.Algorithm{ratelease.TokenBucket, ratelease.LeakyBucket, ratelease.FixedWindow,
		ratelease.SlidingWindowCounter, ratelease.SlidingWindowLog} {
		peers = append(peers, Peer{Name: "ratelease-exact/" + strings.ReplaceAll(a.String(), " ", "-"), Global: true,
			New: rateleaseWith(func(lim Limit) []ratelease.Limit {
				limit := ratelease.Limit{Algorithm: a, Rate: lim.Rate, Period: time.Second}
				switch a {
				case ratelease.TokenBucket, ratelease.LeakyBucket:
					limit.Burst = lim.Burst
				case ratelease.SlidingWindowLog:
					limit = ratelease.Limit{Algorithm: a, Rate: max(1, lim.Rate/1000), Period: time.Millisecond}
				}
				return []ratelease.Limit{limit}
			}, ratelease.WithExact())})
	}
	// A policy of three token buckets (a second's, a minute's and an
	// hour's, all far above the demand), which one call decides: what a
	// user would otherwise pay for three redis_rate calls.
	peers = append(peers, Peer{Name: "ratelease-exact/3-token-buckets", Global: true, Limits: 3,
		New: rateleaseWith(func(lim Limit) []ratelease.Limit {
			return []ratelease.Limit{
				{Rate: lim.Rate, Period: time.Second, Burst: lim.Burst},
				{Rate: 60 * lim.Rate, Period: time.Minute, Burst: 100_000_000},
				{Rate: 2_000_000, Period: time.Hour, Burst: 2_000_000},
			}
		}, ratelease.WithExact())})
	return peers
}

// ratelease with its defaults (DefaultLeaseConfig, the system clock), and opts.
type rateleaseInstance struct {
	l *ratelease.Limiter
	p *ratelease.Policy
}

// newRatelease is ratelease with opts deciding one token bucket of the
// limit's rate per second and its burst.
func newRatelease(opts ...ratelease.Option) func(redis.UniversalClient, Limit) (Instance, error) {
	return rateleaseWith(func(lim Limit) []ratelease.Limit {
		return []ratelease.Limit{{Rate: lim.Rate, Period: time.Second, Burst: lim.Burst}}
	}, opts...)
}

// rateleaseWith is ratelease with opts deciding a policy of the limits
// limits makes of the workload's.
func rateleaseWith(limits func(Limit) []ratelease.Limit, opts ...ratelease.Option) func(redis.UniversalClient, Limit) (Instance, error) {
	return func(c redis.UniversalClient, lim Limit) (Instance, error) {
		l, err := ratelease.New(c, append([]ratelease.Option{ratelease.WithKeyPrefix(lim.Prefix)}, opts...)...)
		if err != nil {
			return nil, err
		}
		p, err := ratelease.NewPolicy("bench", limits(lim)...)
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		return &rateleaseInstance{l: l, p: p}, nil
	}
}

func (r *rateleaseInstance) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, r.p, key)
	return res.Allowed, err
}

func (r *rateleaseInstance) Close() error { return r.l.Close() }

// go-redis/redis_rate: GCRA in one Lua script per decision.
type redisRateInstance struct {
	l      *redisrate.Limiter
	limit  redisrate.Limit
	prefix string
}

func newRedisRate(c redis.UniversalClient, lim Limit) (Instance, error) {
	return &redisRateInstance{
		l:      redisrate.NewLimiter(c),
		limit:  redisrate.Limit{Rate: lim.Rate, Burst: lim.Burst, Period: time.Second},
		prefix: lim.Prefix + ":",
	}, nil
}

func (r *redisRateInstance) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, r.prefix+key, r.limit)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func (r *redisRateInstance) Close() error { return nil }

// ulule/limiter with its Redis store: a fixed window (it has no burst), one
// Lua script per decision.
type ululeInstance struct{ l *ulule.Limiter }

func newUlule(c redis.UniversalClient, lim Limit) (Instance, error) {
	store, err := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: lim.Prefix})
	if err != nil {
		return nil, fmt.Errorf("ulule store: %w", err)
	}
	return &ululeInstance{l: ulule.New(store, ulule.Rate{Period: time.Second, Limit: int64(lim.Rate)})}, nil
}

func (u *ululeInstance) Allow(ctx context.Context, key string) (bool, error) {
	lc, err := u.l.Get(ctx, key)
	if err != nil {
		return false, err
	}
	return !lc.Reached, nil
}

func (u *ululeInstance) Close() error { return nil }

// x/time/rate: a limiter per key in this process, at this instance's share
// of the limit (Rate/Instances, Burst/Instances): the static split a
// service makes without a shared store. It never calls Redis.
type localInstance struct {
	limit rate.Limit
	burst int
	keys  sync.Map // key → *rate.Limiter
}

func newLocal(_ redis.UniversalClient, lim Limit) (Instance, error) {
	n := max(lim.Instances, 1)
	return &localInstance{limit: rate.Limit(float64(lim.Rate) / float64(n)), burst: max(lim.Burst/n, 1)}, nil
}

func (l *localInstance) Allow(_ context.Context, key string) (bool, error) {
	v, ok := l.keys.Load(key)
	if !ok {
		v, _ = l.keys.LoadOrStore(key, rate.NewLimiter(l.limit, l.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

func (l *localInstance) Close() error { return nil }
