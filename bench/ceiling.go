package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/remote"
)

// CeilingConfig is the ceiling workload: Goroutines callers decide as fast
// as they can for Duration, over Keys keys of a limit far above the demand
// (every decision admits), and the Redis CPU they cost is read from the
// server's own accounting. Pipelined, each caller sends Batch decisions
// per round trip.
type CeilingConfig struct {
	Goroutines, Keys, Batch int
	Duration                time.Duration
}

// DefaultCeiling is the workload of docs/benchmarks.md.
var DefaultCeiling = CeilingConfig{Goroutines: 32, Keys: 1000, Batch: 32, Duration: 3 * time.Second}

// CeilingResult is one run of the ceiling workload.
type CeilingResult struct {
	Decisions int64
	// Seconds is the wall time; RedisSeconds the CPU time (user and
	// system) the redis-server process spent meanwhile.
	Seconds, RedisSeconds float64
}

// PerRedisSecond is the decisions one second of Redis CPU made: the most
// one Redis core (one Cluster master) can make per second, if the rest
// of the machine kept up.
func (r CeilingResult) PerRedisSecond() float64 { return float64(r.Decisions) / r.RedisSeconds }

// PerSecond is the decisions made per second of wall time: on a machine
// whose cores the callers share with Redis, what the callers could send,
// not Redis's ceiling.
func (r CeilingResult) PerSecond() float64 { return float64(r.Decisions) / r.Seconds }

// Ceiling runs the ceiling workload for peer p, each decision through its
// Allow, on the Redis at addr.
func Ceiling(p Peer, addr string, cfg CeilingConfig) (CeilingResult, error) {
	c, _ := newClient(addr, cfg.Goroutines)
	defer c.Close()
	inst, err := p.New(c, Limit{Rate: 1_000_000, Burst: 1_000_000_000, Instances: 1, Prefix: prefix(p.Name)})
	if err != nil {
		return CeilingResult{}, err
	}
	defer inst.Close()
	return ceiling(func(ctx context.Context) (float64, error) { return redisCPU(ctx, c) }, cfg, allow(p, inst, cfg))
}

// CeilingCluster runs the ceiling workload for peer p on the Redis Cluster
// whose masters are at addrs, each decision through its Allow, with a cluster
// client: its keys spread over the masters by their slots. RedisSeconds
// is the masters' CPU time, summed.
func CeilingCluster(p Peer, addrs []string, cfg CeilingConfig) (CeilingResult, error) {
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		PoolSize:              max(cfg.Goroutines, 10*runtime.GOMAXPROCS(0)),
		ContextTimeoutEnabled: true,
	})
	defer c.Close()
	inst, err := p.New(c, Limit{Rate: 1_000_000, Burst: 1_000_000_000, Instances: 1, Prefix: prefix(p.Name)})
	if err != nil {
		return CeilingResult{}, err
	}
	defer inst.Close()
	masters := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		masters[i] = redis.NewClient(&redis.Options{Addr: a})
		defer masters[i].Close()
	}
	cpu := func(ctx context.Context) (float64, error) {
		var sum float64
		for _, m := range masters {
			s, err := redisCPU(ctx, m)
			if err != nil {
				return 0, err
			}
			sum += s
		}
		return sum, nil
	}
	return ceiling(cpu, cfg, allow(p, inst, cfg))
}

// allow is the ceiling workload's call for inst, an instance of p: one
// decision, for one of cfg.Keys keys, which must admit.
func allow(p Peer, inst Instance, cfg CeilingConfig) func(ctx context.Context, g, i int) (int, error) {
	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
	}
	return func(ctx context.Context, g, i int) (int, error) {
		ok, err := inst.Allow(ctx, keys[(g*7919+i)%len(keys)])
		if err == nil && !ok {
			err = fmt.Errorf("%s: denied under a limit far above the demand", p.Name)
		}
		return 1, err
	}
}

// CeilingPipelined runs the ceiling workload for ratelease's exact
// decisions sent Batch to a round trip (remote.Store.AcquireBatch: what
// its script costs Redis when the callers pipeline; the Limiter itself
// pipelines only its leases).
func CeilingPipelined(addr string, cfg CeilingConfig) (CeilingResult, error) {
	c, _ := newClient(addr, cfg.Goroutines)
	defer c.Close()
	s := remote.NewStore(c, prefix("pipelined"))
	p, err := remote.NewPolicy("bench", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000}})
	if err != nil {
		return CeilingResult{}, err
	}
	return ceiling(func(ctx context.Context) (float64, error) { return redisCPU(ctx, c) }, cfg, func(ctx context.Context, g, i int) (int, error) {
		rs := make([]remote.Request, cfg.Batch)
		for j := range rs {
			rs[j] = remote.Request{Policy: p, Key: "key" + strconv.Itoa((g*7919+i*cfg.Batch+j)%cfg.Keys), Min: 1, Max: 1}
		}
		ds, errs := s.AcquireBatch(ctx, rs)
		for j, err := range errs {
			if err == nil && ds[j].Granted != 1 {
				err = fmt.Errorf("pipelined: denied under a limit far above the demand")
			}
			if err != nil {
				return 0, err
			}
		}
		return len(rs), nil
	})
}

// ceiling runs decide (caller g's i-th call, returning the decisions it
// made) from cfg.Goroutines callers for cfg.Duration, and reads the
// servers' CPU time (cpu) before and after.
func ceiling(cpu func(context.Context) (float64, error), cfg CeilingConfig, decide func(ctx context.Context, g, i int) (int, error)) (CeilingResult, error) {
	ctx := context.Background()
	for g := 0; g < cfg.Goroutines; g++ { // connections and keys in place before timing
		if _, err := decide(ctx, g, 0); err != nil {
			return CeilingResult{}, err
		}
	}
	before, err := cpu(ctx)
	if err != nil {
		return CeilingResult{}, err
	}
	var decisions atomic.Int64
	var firstErr atomic.Pointer[error]
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for g := 0; g < cfg.Goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; time.Now().Before(deadline); i++ {
				n, err := decide(ctx, g, i)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				decisions.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	after, err := cpu(ctx)
	if err != nil {
		return CeilingResult{}, err
	}
	if e := firstErr.Load(); e != nil {
		return CeilingResult{}, *e
	}
	return CeilingResult{Decisions: decisions.Load(), Seconds: elapsed, RedisSeconds: after - before}, nil
}

// redisCPU is the CPU time (s, user and system) the server has spent, from
// INFO cpu.
func redisCPU(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	var found int
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		sum += f
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: no used_cpu_sys and used_cpu_user")
	}
	return sum, nil
}
