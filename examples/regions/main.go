// Command regions shows one worldwide limit shared by several regions, each
// with its own Redis, and a global Redis that holds the limit.
//
// Run it from the repository root:
//
//	go run ./examples/regions                     # embedded in-memory Redis servers
//	go run ./examples/regions -global 127.0.0.1:6379 -regions 127.0.0.1:6380,127.0.0.1:6381
//
// Each region's instances have their own Limiter (WithGlobal), their own
// clients to the region's Redis and to the global one, and a few goroutines
// that ask for the same key at a steady pace: together twice the worldwide
// limit, the first region skew times each other's. Every call to the
// global Redis is delayed by -latency (a go-redis hook on the global
// clients), as a call across regions would be. Once a second it prints
// what each region admitted and the worldwide total against the limit; at
// the end, a summary that checks the total against the bound of regional
// pools, burst + rate·(T + region TTL + lease TTL), and exits non-zero if
// it was exceeded. Give each region its own Redis: regions that share one
// share their pool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/tier"
)

// embeddedRegions is how many regions run without -regions.
const embeddedRegions = 3

// workers is how many goroutines of each instance ask for the key.
const workers = 3

// errExceeded is run's error when more was admitted than the bound allows.
var errExceeded = errors.New("the worldwide limit was exceeded: this is a bug")

// setup is what the flags say.
type setup struct {
	global    string   // the global Redis; "": embedded
	regions   []string // each region's Redis; nil: embedded
	instances int      // Limiters per region
	rate      int      // the worldwide limit per second, and its burst
	skew      int      // the first region's demand over each other's
	duration  time.Duration
	latency   time.Duration // added to each call to the global Redis
}

func main() {
	var s setup
	regions := flag.String("regions", "", "comma-separated Redis addresses (host:port), one per region; empty starts an embedded Redis for each of 3 regions")
	flag.StringVar(&s.global, "global", "", "global Redis address (host:port); empty starts an embedded in-memory Redis")
	flag.IntVar(&s.instances, "instances", 2, "Limiter instances per region")
	flag.IntVar(&s.rate, "rate", 100, "the worldwide limit, requests per second (burst the same)")
	flag.IntVar(&s.skew, "skew", 5, "how many times more demand the first region has than each other")
	flag.DurationVar(&s.duration, "duration", 3*time.Second, "how long to run")
	flag.DurationVar(&s.latency, "latency", 50*time.Millisecond, "delay added to every call to the global Redis")
	flag.Parse()
	if *regions != "" {
		s.regions = strings.Split(*regions, ",")
	}
	if err := run(s); err != nil {
		log.Fatal(err)
	}
}

// region is one region's servers, Limiters and counts.
type region struct {
	name     string
	addr     string  // its Redis
	demand   float64 // requests per second, all instances together
	limiters []*ratelease.Limiter
	admitted atomic.Int64
	decided  atomic.Int64 // decisions (errors aside)
	slow     atomic.Int64 // decisions that took -latency or longer
	global   atomic.Int64 // round trips of its global clients
}

func run(s setup) error {
	if s.instances < 1 || s.rate < 1 || s.skew < 1 || s.duration < time.Second || s.latency < 0 {
		return errors.New("need -instances, -rate and -skew >= 1, -duration >= 1s and -latency >= 0")
	}
	globalAddr, where := s.global, "global Redis "+s.global
	if globalAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		globalAddr, where = mr.Addr(), "an embedded global Redis"
	}
	addrs := s.regions
	if addrs == nil {
		for range embeddedRegions {
			mr, err := miniredis.Run()
			if err != nil {
				return err
			}
			defer mr.Close()
			addrs = append(addrs, mr.Addr())
		}
		where += " and embedded regional ones (miniredis)"
	} else {
		where += " and regional " + strings.Join(addrs, ", ")
	}

	base, err := ratelease.NewPolicy("regions", ratelease.PerSecond(s.rate))
	if err != nil {
		return err
	}
	policy := base.Worldwide()
	key := fmt.Sprintf("demo-%d", time.Now().UnixNano()) // a fresh key on a shared Redis

	// Twice the limit, so that it binds; by default the other regions ask
	// less than an equal part of it, so that max-min sharing gives them
	// what they ask and the first region the rest.
	regions := make([]*region, len(addrs))
	weights := float64(s.skew + len(addrs) - 1)
	for i, addr := range addrs {
		r := &region{name: fmt.Sprintf("r%d", i+1), addr: addr, demand: 2 * float64(s.rate) / weights}
		if i == 0 {
			r.demand *= float64(s.skew)
		}
		regions[i] = r
	}
	demands := make([]float64, len(regions))
	for i, r := range regions {
		demands[i] = r.demand
	}
	fair := shares(float64(s.rate), demands)

	fmt.Printf("ratelease regions: %d regions × %d instances × %d goroutines on %s, one worldwide key, limit %v\n",
		len(regions), s.instances, workers, where, policy.Limits()[0])
	fmt.Printf("every call to the global Redis is delayed %v by a go-redis hook on the global clients\n", s.latency)
	for i, r := range regions {
		fmt.Printf("  %s: demand %.0f/s, max-min share %.0f/s\n", r.name, r.demand, fair[i])
	}
	fmt.Println()

	for _, r := range regions {
		for range s.instances {
			client := redis.NewClient(&redis.Options{Addr: r.addr, ContextTimeoutEnabled: true})
			defer client.Close()
			gc := redis.NewClient(&redis.Options{Addr: globalAddr, ContextTimeoutEnabled: true})
			defer gc.Close()
			gc.AddHook(&faraway{delay: s.latency, calls: &r.global})
			l, err := ratelease.New(client, ratelease.WithGlobal(gc, r.name), ratelease.WithRedisTimeout(time.Second))
			if err != nil {
				return err
			}
			defer l.Close()
			r.limiters = append(r.limiters, l)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var failures, slowest atomic.Int64
	for _, r := range regions {
		// Each goroutine asks at its part of the region's demand; a tick
		// that comes while its decision waits is dropped.
		every := max(time.Microsecond, time.Duration(float64(time.Second)*float64(len(r.limiters)*workers)/r.demand))
		for _, l := range r.limiters {
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tick := time.NewTicker(every)
					defer tick.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						t0 := time.Now()
						res, err := l.Allow(ctx, policy, key)
						took := time.Since(t0)
						switch {
						case err != nil && ctx.Err() == nil:
							failures.Add(1)
						case err == nil:
							r.decided.Add(1)
							if res.Allowed {
								r.admitted.Add(1)
							}
							if s.latency > 0 && took >= s.latency {
								r.slow.Add(1)
							}
							if d := int64(took); d > slowest.Load() {
								slowest.Store(d) // (racy max: a report, not a check)
							}
						}
					}
				}()
			}
		}
	}

	header := "second"
	for _, r := range regions {
		header += fmt.Sprintf("  %6s", r.name)
	}
	// Admitted counts are per second; the round trips are running totals.
	fmt.Println("admitted in each second, by region and worldwide; the limit for that second; round trips so far")
	fmt.Println(header + "   total   limit  regional  global")
	prev := make([]int64, len(regions))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastRow := start
	for sec := 1; ; sec++ {
		select {
		case <-ctx.Done():
			if time.Since(lastRow) < 500*time.Millisecond {
				sec = -1 // the deadline fell on a tick: that second is printed already
			}
		case <-tick.C:
		}
		if sec < 0 {
			break
		}
		lastRow = time.Now()
		var row strings.Builder
		fmt.Fprintf(&row, "%6d", sec)
		var total int64
		for i, r := range regions {
			n := r.admitted.Load()
			total += n - prev[i]
			fmt.Fprintf(&row, "  %6d", n-prev[i])
			prev[i] = n
		}
		limit := s.rate
		if sec == 1 {
			limit = 2 * s.rate // the full burst, plus a second of refill
		}
		local, global := roundTrips(regions)
		fmt.Fprintf(&row, "  %6d  %6d  %8d  %6d", total, limit, local, global)
		fmt.Println(row.String())
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()

	elapsed := time.Since(start)
	fmt.Printf("\nin %.1fs:\n", elapsed.Seconds())
	fmt.Println("region  admitted  per second  max-min share  decisions  as slow as -latency  global round trips")
	var total, decisions int64
	for i, r := range regions {
		n := r.admitted.Load()
		total += n
		decisions += r.decided.Load()
		fmt.Printf("%6s  %8d  %10.1f  %13.0f  %9d  %17d  %18d\n",
			r.name, n, float64(n)/elapsed.Seconds(), fair[i], r.decided.Load(), r.slow.Load(), r.global.Load())
	}
	rate := float64(s.rate)
	leaseTTL := ratelease.DefaultLeaseConfig().TTL
	bound := rate + rate*(elapsed+tier.RegionTTL+leaseTTL).Seconds()
	exact := rate + rate*elapsed.Seconds()
	fmt.Printf("worldwide: admitted %d; bound burst + rate·(T + %v + %v) = %.0f (%.1f%% used);\n",
		total, tier.RegionTTL, leaseTTL, bound, 100*float64(total)/bound)
	fmt.Printf("           one exact limiter, burst + rate·T = %.0f (%.1f%%)\n", exact, 100*float64(total)/exact)
	local, global := roundTrips(regions)
	fmt.Printf("round trips: %d to the regions' Redis, %d to the global Redis (counted by the hook, connection set-up included) for %d decisions; errors: %d\n",
		local, global, decisions, failures.Load())
	fmt.Printf("the slowest decision took %v (a decision as slow as -latency waited on the global Redis, or on a busy machine)\n",
		time.Duration(slowest.Load()).Round(time.Millisecond))
	fmt.Printf("(%v is how long a regional pool keeps units, %v how long an instance keeps a lease:\n", tier.RegionTTL, leaseTTL)
	fmt.Println(" units taken from the global Redis may be used that much later, so a run may pass")
	fmt.Println(" burst + rate·T, but never the bound)")
	if float64(total) > bound {
		return errExceeded
	}
	return nil
}

// roundTrips returns the round trips of every region's Limiters to their
// region's Redis (their Stats) and to the global Redis (their hooks').
func roundTrips(regions []*region) (local, global uint64) {
	for _, r := range regions {
		for _, l := range r.limiters {
			local += l.Stats().RoundTrips
		}
		global += uint64(r.global.Load())
	}
	return local, global
}

// shares returns the max-min fair split of rate between demands: in order
// of demand, each gets its demand or an equal part of what is left,
// whichever is less.
func shares(rate float64, demands []float64) []float64 {
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case demands[a] < demands[b]:
			return -1
		case demands[a] > demands[b]:
			return 1
		}
		return 0
	})
	out := make([]float64, len(demands))
	for k, i := range order {
		out[i] = min(demands[i], rate/float64(len(order)-k))
		rate -= out[i]
	}
	return out
}

// faraway is a go-redis hook that makes a Redis seem in another region:
// it waits delay before each round trip (a command or a pipeline), and
// counts them in calls.
type faraway struct {
	delay time.Duration
	calls *atomic.Int64
}

var _ redis.Hook = (*faraway)(nil)

func (f *faraway) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *faraway) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (f *faraway) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := f.wait(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// wait counts a round trip and waits delay, or until ctx ends, as the
// network would.
func (f *faraway) wait(ctx context.Context) error {
	f.calls.Add(1)
	t := time.NewTimer(f.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
