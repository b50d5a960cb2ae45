// Command outage shows the three failure modes while Redis goes away and
// comes back. Three Limiters, one per mode (FailLocal, FailOpen,
// FailClosed), each with its own key, ask at twice the limit; after a while the
// example stops the embedded Redis, then restarts it on the same address.
// Once a second it prints, per mode, what was admitted, denied and failed,
// and where the decisions came from.
//
// Run it from the repository root:
//
//	go run ./examples/outage
//	go run ./examples/outage -rate 50 -down 3s
//
// Expect: while Redis is down, FailLocal keeps admitting about the limit
// (SourceFallback), FailOpen admits everything, FailClosed returns
// ErrUnavailable; each first failing call waits at most the Redis timeout
// (100 ms here), then the circuit breaker answers at once. When Redis is
// back, the breaker closes within its backoff and decisions come from
// Redis and local leases again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

func main() {
	rate := flag.Int("rate", 20, "the limit, requests per second (burst the same); requests come at twice that")
	up := flag.Duration("up", 2*time.Second, "time before the outage, and after it")
	down := flag.Duration("down", 3*time.Second, "how long Redis is gone")
	flag.Parse()
	redis.SetLogger(quiet{}) // the pool's dial errors would drown the table
	if err := run(*rate, *up, *down); err != nil {
		log.Fatal(err)
	}
}

// quiet drops go-redis's log lines.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// counts is what one mode saw in one second.
type counts struct {
	allowed, denied, failed int
	sources                 map[ratelease.Source]int
}

func (c counts) String() string {
	var src []string
	for _, s := range []ratelease.Source{ratelease.SourceLocal, ratelease.SourceRemote, ratelease.SourceCached, ratelease.SourceFallback} {
		if n := c.sources[s]; n > 0 {
			src = append(src, fmt.Sprintf("%s %d", s, n))
		}
	}
	return fmt.Sprintf("%3d ok %3d no %3d err  %-40s", c.allowed, c.denied, c.failed, strings.Join(src, ", "))
}

func run(rate int, up, down time.Duration) error {
	if rate < 1 || up < time.Second || down < time.Second {
		return errors.New("need -rate >= 1, -up and -down >= 1s")
	}
	mr, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer mr.Close()
	modes := []ratelease.FailureMode{ratelease.FailLocal, ratelease.FailOpen, ratelease.FailClosed}
	policy, err := ratelease.NewPolicy("outage", ratelease.PerSecond(rate))
	if err != nil {
		return err
	}
	limiters := make([]*ratelease.Limiter, len(modes))
	for i, m := range modes {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true,
			MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		defer client.Close()
		l, err := ratelease.New(client, ratelease.WithFailureMode(m), ratelease.WithRedisTimeout(100*time.Millisecond),
			ratelease.WithInstances(1))
		if err != nil {
			return err
		}
		defer l.Close()
		limiters[i] = l
	}

	var mu sync.Mutex
	current := make([]counts, len(modes))
	reset := func() []counts {
		mu.Lock()
		defer mu.Unlock()
		old := current
		current = make([]counts, len(modes))
		for i := range current {
			current[i].sources = map[ratelease.Source]int{}
		}
		return old
	}
	reset()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, l := range limiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(2*rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				res, err := l.Allow(ctx, policy, modes[i].String()) // a key per mode
				if errors.Is(err, context.Canceled) {
					return
				}
				mu.Lock()
				c := &current[i]
				switch {
				case err != nil:
					c.failed++
				case res.Allowed:
					c.allowed++
				default:
					c.denied++
				}
				if err == nil {
					c.sources[res.Source]++
				}
				mu.Unlock()
			}
		}()
	}

	fmt.Printf("limit %d/s, requests at %d/s per mode\n%-9s", rate, 2*rate, "t  redis")
	for _, m := range modes {
		fmt.Printf(" | %-65s", m)
	}
	fmt.Println()
	total := 2*up + down
	start := time.Now()
	state := "up"
	for s := 1; time.Duration(s)*time.Second <= total; s++ {
		time.Sleep(time.Until(start.Add(time.Duration(s) * time.Second)))
		row := reset()
		fmt.Printf("%2ds %-5s", s, state)
		for _, c := range row {
			fmt.Printf(" | %s", c)
		}
		fmt.Println()
		switch elapsed := time.Duration(s) * time.Second; {
		case state == "up" && elapsed >= up && elapsed < up+down:
			mr.Close() // Redis is gone: connections refused
			state = "down"
		case state == "down" && elapsed >= up+down:
			if err := mr.Restart(); err != nil { // same address, data kept
				cancel()
				wg.Wait()
				return err
			}
			state = "up"
		}
	}
	cancel()
	wg.Wait()
	for i, l := range limiters {
		st := l.Stats()
		fmt.Printf("%-10s breaker %-9s opened %d times, %d fallback decisions, %d units charged to Redis after recovery\n",
			modes[i], st.Breaker, st.BreakerOpens, st.Fallback, st.UnitsCharged)
	}
	return nil
}
