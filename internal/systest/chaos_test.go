package systest_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// Chaos: for 20 s, faults picked at random with a fixed seed (hung, killed
// and restarted, slow, dropped, none) under load on three FailLocal
// instances sharing one key, and one FailOpen instance on another. No call
// fails, nothing panics, and the three together never admit more than
// Burst + Rate·T over the run's span of Redis time, plus the documented
// outage allowance: 2·Burst per outage of an instance, shared by the
// instances (its fallback's fresh burst, and the bucket's refill should the
// recovery charge fail), and Burst per restart of Redis (an empty Redis
// starts full).
func TestChaos(t *testing.T) {
	const (
		rate, burst = 1000, 100
		instances   = 3
		runFor      = 20 * time.Second
	)
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	now := redisClock(t, dial(t, srv.Addr)) // past the proxy: it reconnects after a restart
	p := policy(t, "chaos", ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst})
	shared := newInstances(t, instances, clientsTo(t, proxy.Addr), ratelease.WithInstances(instances))
	open := newInstance(t, dial(t, proxy.Addr), ratelease.WithFailureMode(ratelease.FailOpen))

	run := span{start: now()}
	start := time.Now()
	var wg sync.WaitGroup
	load := func(in *instance, key string) {
		flatOut(runFor, 3, func(int) {
			in.allowN(p, key, 1)
			time.Sleep(100 * time.Microsecond)
		})
	}
	for _, in := range shared {
		wg.Go(func() { load(in, "shared") })
	}
	wg.Go(func() { load(open, "open") })

	rng := rand.New(rand.NewPCG(2026, 11))
	restarts := 0
	for time.Since(start) < runFor-2*time.Second {
		hold := time.Duration(200+rng.IntN(1300)) * time.Millisecond
		switch rng.IntN(5) {
		case 0: // none
			time.Sleep(hold)
		case 1:
			srv.Pause(t)
			time.Sleep(hold)
			srv.Resume(t)
		case 2:
			srv.Kill()
			time.Sleep(hold)
			srv.Restart(t)
			restarts++
		case 3:
			proxy.SetDelay(200 * time.Millisecond)
			time.Sleep(hold)
			proxy.SetDelay(0)
		case 4:
			proxy.SetDrop(true)
			time.Sleep(hold)
			proxy.SetDrop(false)
			proxy.Cut()
		}
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond) // some calm between faults
	}
	wg.Wait()
	run.end = now()

	var opens uint64
	for i, in := range shared {
		in.check(t, fmt.Sprintf("instance %d", i))
		opens += in.l.Stats().BreakerOpens
	}
	open.check(t, "the FailOpen instance")
	tot := sum(shared)
	closeAll(append(shared, open))
	allowance := 2*burst*float64(opens)/instances + burst*float64(restarts)
	bound := bucket(rate, burst)(run) + allowance
	t.Logf("admitted %d over %.3fs of Redis time; bound %.0f (Burst + Rate·T %.0f, %d breaker openings, %d restarts); %d decisions by the failure mode",
		tot.admitted, run.seconds(), bound, bucket(rate, burst)(run), opens, restarts, tot.fallback)
	atMost(t, "the shared key", float64(tot.admitted), bound)
}
