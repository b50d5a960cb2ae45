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
// instance admitted, the total against the limit, and the Redis calls made;
// at the end, a summary that checks the total against the limit's bound,
// burst + rate·T.
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
	flag.Parse()
	if err := run(*addr, *instances, *workers, *rate, *duration); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, instances, workers, rate int, duration time.Duration) error {
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
	fmt.Printf("ratelease quickstart: %d instances × %d goroutines on %s, one key, limit %v, exact mode\n\n",
		instances, workers, where, policy.Limits()[0])

	limiters := make([]*ratelease.Limiter, instances)
	admitted := make([]atomic.Int64, instances)
	var failures atomic.Int64
	for i := range limiters {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer client.Close()
		l, err := ratelease.New(client, ratelease.WithRedisTimeout(time.Second))
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
	fmt.Println(header + "   total   limit  redis calls")
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
		fmt.Fprintf(&row, "  %6d  %6d  %11d", total, limit, roundTrips(limiters))
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
	fmt.Printf("redis calls: %d (one per decision in exact mode), errors: %d\n", roundTrips(limiters), failures.Load())
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
