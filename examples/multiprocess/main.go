// Command multiprocess shows one global limit holding across processes: it
// starts N copies of itself, each with its own Limiter and Redis client, all
// asking for the same key as fast as they can, and adds up what they
// admitted against the limit's bound, burst + rate·T.
//
// Run it from the repository root (embedded in-memory Redis, which the
// parent serves to its children over loopback, unless -redis is given):
//
//	go run ./examples/multiprocess
//	go run ./examples/multiprocess -procs 8 -rate 500 -duration 5s -redis 127.0.0.1:6379
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
)

// childEnv marks a child process; its value is the child's number.
const childEnv = "RATELEASE_MULTIPROCESS_CHILD"

// report is what a child prints when it is done, as one JSON line.
type report struct {
	Child      int    `json:"child"`
	PID        int    `json:"pid"`
	Admitted   int64  `json:"admitted"`
	Decisions  int64  `json:"decisions"`
	RoundTrips uint64 `json:"round_trips"`
}

func main() {
	procs := flag.Int("procs", 4, "child processes")
	rate := flag.Int("rate", 200, "the global limit, requests per second (burst the same)")
	duration := flag.Duration("duration", 3*time.Second, "how long the children run")
	addr := flag.String("redis", "", "Redis address (host:port); empty starts an embedded in-memory Redis")
	key := flag.String("key", "", "the key (children get it from the parent)")
	flag.Parse()
	if n := os.Getenv(childEnv); n != "" {
		child, _ := strconv.Atoi(n)
		if err := runChild(child, *addr, *key, *rate, *duration); err != nil {
			log.Fatalf("child %d: %v", child, err)
		}
		return
	}
	if err := runParent(*procs, *rate, *duration, *addr); err != nil {
		log.Fatal(err)
	}
}

// runParent starts the children, collects their reports and checks the
// total against the bound.
func runParent(procs, rate int, duration time.Duration, addr string) error {
	if procs < 1 || rate < 1 || duration < time.Second {
		return errors.New("need -procs and -rate >= 1 and -duration >= 1s")
	}
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	key := fmt.Sprintf("multiprocess-%d", time.Now().UnixNano())
	// T is read from Redis's clock (which the limit runs on) before the
	// first child starts and after the last one ends: every decision falls
	// within it.
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	began, err := rc.Time(context.Background()).Result()
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	fmt.Printf("%d processes, one key, limit %d/s (burst %d), %v, Redis %s\n", procs, rate, rate, duration, addr)
	reports := make([]report, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		cmd := exec.Command(self, "-redis", addr, "-key", key, "-rate", strconv.Itoa(rate), "-duration", duration.String())
		cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if err := json.Unmarshal(sc.Bytes(), &reports[i]); err != nil {
					errs[i] = fmt.Errorf("child %d: %q: %w", i, sc.Text(), err)
				}
			}
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("child %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var total, decisions int64
	var trips uint64
	for _, r := range reports {
		fmt.Printf("  process %d (pid %d): admitted %6d of %8d decisions, %5d Redis round trips\n",
			r.Child, r.PID, r.Admitted, r.Decisions, r.RoundTrips)
		total, decisions, trips = total+r.Admitted, decisions+r.Decisions, trips+r.RoundTrips
	}
	ended, err := rc.Time(context.Background()).Result()
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	// Every decision was made within T, so the total can never exceed the
	// bound; T includes the children's start-up, so it is loose by that.
	T := ended.Sub(began)
	bound := int64(rate) + int64(float64(rate)*T.Seconds())
	fmt.Printf("total admitted %d, bound burst + rate·T = %d with T = %.2fs on Redis's clock (%.1f%%); %d decisions, %.4f round trips per decision\n",
		total, bound, T.Seconds(), 100*float64(total)/float64(bound), decisions, float64(trips)/float64(max(1, decisions)))
	if total > bound {
		return fmt.Errorf("admitted %d, over the bound %d", total, bound)
	}
	return nil
}

// runChild is one process: one Limiter, a few goroutines on the key.
func runChild(child int, addr, key string, rate int, duration time.Duration) error {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	l, err := ratelease.New(client, ratelease.WithRedisTimeout(time.Second))
	if err != nil {
		return err
	}
	policy, err := ratelease.NewPolicy("multiprocess", ratelease.PerSecond(rate))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var admitted, decisions atomic.Int64
	var failure atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := l.Allow(context.Background(), policy, key)
				if err != nil {
					failure.Store(err)
					return
				}
				decisions.Add(1)
				if res.Allowed {
					admitted.Add(1)
				} else {
					time.Sleep(min(res.RetryAfter, 10*time.Millisecond))
				}
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		return err
	}
	if err, ok := failure.Load().(error); ok {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(report{Child: child, PID: os.Getpid(), Admitted: admitted.Load(),
		Decisions: decisions.Load(), RoundTrips: l.Stats().RoundTrips})
}
