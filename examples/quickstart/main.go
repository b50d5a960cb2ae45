// Command quickstart shows one global limit shared by several Limiter
// instances, as several replicas of a service would share it.
//
// Run it from the repository root:
//
//	go run ./examples/quickstart                       # embedded in-memory Redis
//	go run ./examples/quickstart -redis 127.0.0.1:6379 # your Redis
//
// Each instance has its own Redis client and a few goroutines that ask for
// the same key as fast as they can. Once a second it prints what each
// instance admitted, the total against the limit, the Redis calls made and
// the calls saved (decisions made without one, which a per-request limiter
// would have made); at the end, a summary that checks the total against the
// limit's bound, burst + rate·T. With -exact, every decision is a Redis call.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

func main() {
	addr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded in-memory Redis")
	instances := flag.Int("instances", 3, "Limiter instances sharing the limit")
	workers := flag.Int("workers", 4, "goroutines per instance")
	rate := flag.Int("rate", 100, "the global limit, requests per second (burst the same)")
	duration := flag.Duration("duration", 3*time.Second, "how long to run")
	exact := flag.Bool("exact", false, "one Redis call per decision instead of leasing")
	flag.Parse()
	if err := run(*addr, *instances, *workers, *rate, *duration, *exact); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, instances, workers, rate int, duration time.Duration, exact bool) error {
	if instances < 1 || workers < 1 || rate < 1 || duration < time.Second {
		return errors.New("need -instances, -workers and -rate >= 1 and -duration >= 1s")
	}
	where := addr
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr, where = mr.Addr(), "embedded miniredis"
	}
	policy, err := ratelease.NewPolicy("quickstart", ratelease.PerSecond(rate))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("demo-%d", time.Now().UnixNano()) // a fresh key on a shared Redis
	mode, opts := "lease mode", []ratelease.Option{ratelease.WithRedisTimeout(time.Second)}
	if exact {
		mode, opts = "exact mode", append(opts, ratelease.WithExact())
	}
	fmt.Printf("ratelease quickstart: %d instances × %d goroutines on %s, one key, limit %v, %s\n\n",
		instances, workers, where, policy.Limits()[0], mode)

	limiters := make([]*ratelease.Limiter, instances)
	admitted := make([]atomic.Int64, instances)
	var failures, decisions atomic.Int64
	for i := range limiters {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer client.Close()
		l, err := ratelease.New(client, opts...)
		if err != nil {
			return err
		}
		defer l.Close()
		limiters[i] = l
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, l := range limiters {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					res, err := l.Allow(ctx, policy, key)
					if err == nil {
						decisions.Add(1)
					}
					switch {
					case err != nil && ctx.Err() == nil:
						failures.Add(1)
						time.Sleep(10 * time.Millisecond)
					case err == nil && res.Allowed:
						admitted[i].Add(1)
					}
				}
			}()
		}
	}

	header := "second"
	for i := range limiters {
		header += fmt.Sprintf("  inst%-2d", i+1)
	}
	// Admitted counts are per second; the Redis columns are running totals.
	fmt.Println("admitted in each second, by instance and in all; the limit for that second; Redis calls so far")
	fmt.Println(header + "   total   limit  redis calls  calls saved")
	var prev []int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastRow := start
	for s := 1; ; s++ {
		select {
		case <-ctx.Done():
			if time.Since(lastRow) < 500*time.Millisecond {
				s = -1 // the deadline fell on a tick: that second is printed already
			}
		case <-tick.C:
		}
		if s < 0 {
			break
		}
		lastRow = time.Now()
		var row strings.Builder
		fmt.Fprintf(&row, "%6d", s)
		var total int64
		for i := range limiters {
			n := admitted[i].Load()
			if prev != nil {
				n -= prev[i]
			}
			total += n
			fmt.Fprintf(&row, "  %6d", n)
		}
		prev = snapshot(admitted)
		limit := rate
		if s == 1 {
			limit = 2 * rate // the full burst, plus a second of refill
		}
		calls := roundTrips(limiters)
		fmt.Fprintf(&row, "  %6d  %6d  %11d  %11d", total, limit, calls, max(0, decisions.Load()-int64(calls)))
		fmt.Println(row.String())
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()

	elapsed := time.Since(start)
	var total int64
	for i := range admitted {
		total += admitted[i].Load()
	}
	bound := float64(rate) + float64(rate)*elapsed.Seconds()
	fmt.Printf("\nadmitted %d in %.1fs across %d instances; bound burst + rate·T = %.0f (%.1f%% used)\n",
		total, elapsed.Seconds(), instances, bound, 100*float64(total)/bound)
	calls, made := int64(roundTrips(limiters)), decisions.Load()
	fmt.Printf("redis calls: %d for %d decisions (%.2g per decision; a per-request limiter makes 1), errors: %d\n",
		calls, made, float64(calls)/float64(max(made, 1)), failures.Load())
	if exact {
		fmt.Println("(the first second's limit is the burst plus a second of refill; each decision was one")
		fmt.Println(" Redis call, so every second holds to its limit, and the run to burst + rate·T)")
	} else {
		fmt.Println("(the first second's limit is the burst plus a second of refill; in a later second the")
		fmt.Println(" instances may use units leased the second before, up to rate·TTL more: the bound above")
		fmt.Println(" is over the whole run, burst + rate·T, which leasing never exceeds)")
	}
	if float64(total) > bound {
		fmt.Println("the global limit was exceeded: this is a bug")
		os.Exit(1)
	}
	return nil
}

func snapshot(a []atomic.Int64) []int64 {
	s := make([]int64, len(a))
	for i := range a {
		s[i] = a[i].Load()
	}
	return s
}

func roundTrips(ls []*ratelease.Limiter) uint64 {
	var n uint64
	for _, l := range ls {
		n += l.Stats().RoundTrips
	}
	return n
}
