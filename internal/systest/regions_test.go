package systest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// world is a fleet across regions: one global redis-server, and per region
// a redis-server of its own and instances whose global client goes
// through the region's proxy, which delays every reply by the region's
// cross-region round trip.
type world struct {
	globalNow func() int64
	global    *redis.Client // to the global Redis, not through a proxy
	regions   [][]*instance
	// cross counts each region's round trips to the global Redis.
	cross   []*redistest.Trips
	proxies []*redistest.Proxy
}

// The world of the regional tests: three regions 80, 120 and 160 ms from
// the global Redis, with two, three and four instances.
var (
	worldInstances = []int{2, 3, 4}
	worldRTT       = []time.Duration{80 * time.Millisecond, 120 * time.Millisecond, 160 * time.Millisecond}
)

// newWorld starts a world of len(perRegion) regions, region r with
// perRegion[r] instances and a cross-region round trip of rtt[r], each
// instance made with opts and WithGlobal, connected to both its Redis
// servers before it returns (as a service's would be: a connection's
// handshake costs several round trips).
func newWorld(t testing.TB, perRegion []int, rtt []time.Duration, opts ...ratelease.Option) *world {
	t.Helper()
	global := redistest.Start(t)
	gc := dial(t, global.Addr)
	w := &world{globalNow: redisClock(t, gc), global: gc}
	for r, n := range perRegion {
		regional := redistest.Start(t)
		px := redistest.NewProxy(t, global.Addr)
		px.SetDelay(rtt[r])
		trips := &redistest.Trips{}
		var ins []*instance
		for range n {
			gc := redis.NewClient(&redis.Options{Addr: px.Addr})
			t.Cleanup(func() { _ = gc.Close() })
			if err := gc.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			gc.AddHook(trips)
			o := append([]ratelease.Option{ratelease.WithGlobal(gc, "region"+strconv.Itoa(r))}, opts...)
			in := newInstance(t, dial(t, regional.Addr), o...)
			if err := in.l.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			ins = append(ins, in)
		}
		w.regions = append(w.regions, ins)
		w.cross = append(w.cross, trips)
		w.proxies = append(w.proxies, px)
	}
	return w
}

// worldLoad is what a run of a world made: per region, units admitted and
// decisions; the span of the global Redis's clock that holds it; every
// decision's latency.
type worldLoad struct {
	s                   span
	admitted, decisions []int64
	// steady: what the decisions made from a quarter of the run on
	// admitted, once the fleet's pools and leases are stocked.
	steady []int64
	// latencies of every decision, and of steady's (lateLatencies).
	latencies, lateLatencies []time.Duration
}

func newWorldLoad(regions int) worldLoad {
	return worldLoad{admitted: make([]int64, regions), decisions: make([]int64, regions), steady: make([]int64, regions)}
}

func (l worldLoad) steadyTotal() (units int64) {
	for _, a := range l.steady {
		units += a
	}
	return units
}

func (l worldLoad) total() (units int64) {
	for _, a := range l.admitted {
		units += a
	}
	return units
}

// worst is the worst region's admitted over its max-min fair share of
// what the run admitted, demand[r] the units region r asked for.
func (l worldLoad) worst(demand []float64) float64 {
	fair := redistest.WaterFill(float64(l.total()), demand)
	worst := 2.0
	for r, a := range l.admitted {
		if fair[r] > 0 {
			worst = min(worst, float64(a)/fair[r])
		}
	}
	return worst
}

// runRegions makes decide's decisions in every region of fleet, open
// loop: region r's i-th decision is due at start + i/rate (its demand over
// d) and runs in a goroutine of its own, through instance i of the region
// in turn, however long the decisions before it take, as a service's
// requests arrive. (A closed loop, a few goroutines taking turns, makes
// fewer decisions where decisions are slow, a Wait or a worldwide key's
// first use, and would compare runs of different lengths.) decide reports
// the units admitted; now reads the clock the span is measured on. What
// decisions due from d/4 on admitted counts in steady as well.
func runRegions(t testing.TB, fleet [][]*instance, now func() int64, demand []float64, d time.Duration,
	decide func(in *instance, r, g int) int64) worldLoad {
	t.Helper()
	var mu sync.Mutex
	l := newWorldLoad(len(fleet))
	l.s.start = now()
	start := time.Now()
	end, warm := start.Add(d), start.Add(d/4)
	var wg sync.WaitGroup
	for r, ins := range fleet {
		rate := demand[r] / d.Seconds()
		if rate <= 0 {
			continue
		}
		due := func(i int) time.Time { return start.Add(time.Duration(float64(i) / rate * float64(time.Second))) }
		wg.Go(func() {
			var units, steady, decisions atomic.Int64
			var lmu sync.Mutex
			var lat, late []time.Duration
			var calls sync.WaitGroup
			for i := 0; due(i).Before(end); {
				if w := time.Until(due(i)); w > 0 {
					time.Sleep(max(w, paceTick))
				}
				for at := time.Now(); !due(i).After(at) && due(i).Before(end); i++ {
					g, warmed := i, !due(i).Before(warm)
					calls.Go(func() {
						t0 := time.Now()
						n := decide(ins[g%len(ins)], r, g)
						el := time.Since(t0)
						units.Add(n)
						decisions.Add(1)
						lmu.Lock()
						lat = append(lat, el)
						if warmed {
							steady.Add(n)
							late = append(late, el)
						}
						lmu.Unlock()
					})
				}
			}
			calls.Wait()
			mu.Lock()
			l.latencies = append(l.latencies, lat...)
			l.lateLatencies = append(l.lateLatencies, late...)
			l.admitted[r], l.steady[r], l.decisions[r] = units.Load(), steady.Load(), decisions.Load()
			mu.Unlock()
		})
	}
	wg.Wait()
	l.s.end = now()
	return l
}

// allowOn is a decision of one unit of key by Allow, counted by in.
func allowOn(p *ratelease.Policy, key string) func(in *instance, r, g int) int64 {
	return func(in *instance, _, _ int) int64 {
		if in.allowN(p, key, 1) {
			return 1
		}
		return 0
	}
}

// crossTrips is the round trips the world's regions made to the global
// Redis since the last call.
func (w *world) crossTrips() int64 {
	var n int64
	for _, c := range w.cross {
		n += c.Trips.Swap(0)
	}
	return n
}

func (w *world) check(t testing.TB) {
	t.Helper()
	for r, ins := range w.regions {
		for i, in := range ins {
			in.check(t, fmt.Sprintf("region %d instance %d", r, i))
		}
	}
}

// TestWorldwideLimit: one worldwide limit across three regions 80 to 160
// ms from the global Redis, two to four instances each, one region asking
// five times its fair share: from a fresh key every unit admitted was
// granted by the global Redis within the run, so the fleet never admits
// past Burst + Rate·T of the global Redis's clock (a token bucket), Rate
// per window touched (windows); it admits a good part of that, shares it
// max-min between regions, and seldom crosses regions. The figures of a
// longer run, against exact mode, are docs/regions.md's (BenchmarkRegions).
func TestWorldwideLimit(t *testing.T) {
	const rate = 200
	d := loadLength(4 * time.Second)
	// Fair share rate/3 each; region 0 asks five times it, the others less
	// than it: max-min gives them their demand and region 0 the rest.
	demand := []float64{5 * rate / 3.0 * d.Seconds(), 0.6 * rate / 3 * d.Seconds(), 0.8 * rate / 3 * d.Seconds()}
	// One world for the three: each runs on a key of its own.
	w := newWorld(t, worldInstances, worldRTT)
	t.Run("waiters", func(t *testing.T) { waitersClaimWhatTheyAsk(t, w, rate, d) })
	t.Run("closed-loop waiters", func(t *testing.T) { closedLoopWaitersGetTheirShare(t, w, rate, d) })
	for _, c := range []struct {
		alg   ratelease.Algorithm
		bound bound
		// What a loaded 2-core machine reaches in 4s (an idle one more, a
		// longer run more still: BenchmarkRegions).
		least, fair float64
	}{
		{ratelease.TokenBucket, bucket(rate, rate), 0.55, 0.5},
		{ratelease.FixedWindow, windows(rate), 0.45, 0.3},
		{ratelease.SlidingWindowCounter, windows(rate), 0.3, 0.15},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			p := policy(t, "world-"+strconv.Itoa(int(c.alg)), ratelease.Limit{Algorithm: c.alg, Rate: rate, Period: time.Second}).Worldwide()
			w.crossTrips()
			l := runRegions(t, w.regions, w.globalNow, demand, d, allowOn(p, "k"))
			w.check(t)
			cross := w.crossTrips()
			var decisions int64
			for _, n := range l.decisions {
				decisions += n
			}
			b := c.bound(l.s)
			t.Logf("%v: admitted %v = %d, %.3f of the bound %.0f; worst region %.2f of its max-min share; %.4f cross-region round trips a decision",
				c.alg, l.admitted, l.total(), float64(l.total())/b, b, l.worst(demand), ratio(cross, decisions))
			atMost(t, "worldwide", float64(l.total()), b)
			if float64(l.total()) < c.least*b {
				t.Errorf("admitted %d, %.3f of the bound %.0f; want at least %.2f", l.total(), float64(l.total())/b, b, c.least)
			}
			if worst := l.worst(demand); worst < c.fair {
				t.Errorf("a region got %.2f of its max-min fair share, want at least %.2f", worst, c.fair)
			}
			if r := ratio(cross, decisions); r > 0.05 {
				t.Errorf("%.4f cross-region round trips a decision, want at most 0.05", r)
			}
		})
	}
}

// TestWorldwidePartition: a region cut off from the global Redis for 5s
// decides from its pool, then from its failure-mode share (what the global
// key gave it lately), and once the link is back what it admitted meanwhile
// is charged to the global key: over the run the fleet admits at most the
// bound plus that share over the partition, a refill's span and the global
// call's timeout, and the cut-off region's instances count the units
// charged (by their next refill or a second after the link is back,
// whichever is first).
func TestWorldwidePartition(t *testing.T) {
	const rate = 200
	d := loadLength(9 * time.Second)
	demand := []float64{rate / 2.0 * d.Seconds(), rate / 2.0 * d.Seconds(), rate / 2.0 * d.Seconds()}
	p := policy(t, "world", ratelease.Limit{Algorithm: ratelease.TokenBucket, Rate: rate, Period: time.Second}).Worldwide()
	w := newWorld(t, worldInstances, worldRTT)
	cut := 2
	go func() {
		time.Sleep(2 * time.Second)
		w.proxies[cut].SetDrop(true)
		w.proxies[cut].Cut()
		time.Sleep(5 * time.Second)
		w.proxies[cut].SetDrop(false)
	}()
	l := runRegions(t, w.regions, w.globalNow, demand, d, allowOn(p, "k"))
	// The charge is made by the region's next refill: give it one.
	deadline := time.Now().Add(5 * time.Second)
	var charged uint64
	for time.Now().Before(deadline) {
		charged = 0
		for _, in := range w.regions[cut] {
			_, _ = in.l.Allow(context.Background(), p, "k")
			charged += in.l.Stats().UnitsCharged
		}
		if charged > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.check(t)
	// Its share (at most the worldwide rate; an equal third, about, here)
	// over the partition, a refill's span and the global call's timeout
	// (ten of the default Redis timeout).
	allowance := rate * (5*time.Second + time.Second + 10*100*time.Millisecond).Seconds()
	b := bucket(rate, rate)(l.s)
	t.Logf("admitted %v = %d of the bound %.0f and the partition's allowance %.0f; %d units charged on healing",
		l.admitted, l.total(), b, allowance, charged)
	atMost(t, "worldwide, across a partition", float64(l.total()), b+allowance)
	if charged == 0 {
		t.Error("the region cut off was charged nothing once back")
	}
	if l.admitted[cut] == 0 {
		t.Error("the region cut off admitted nothing")
	}
}

// TestWorldwidePolicyNeedsAGlobalRedis: a worldwide policy on a Limiter
// without WithGlobal, or of an algorithm a pool cannot keep, is refused
// with ErrInvalidPolicy, as is a region's name that cannot be one.
func TestWorldwidePolicyNeedsAGlobalRedis(t *testing.T) {
	srv := redistest.Start(t)
	p := policy(t, "world", ratelease.PerSecond(10)).Worldwide()
	l := newInstance(t, dial(t, srv.Addr)).l
	if _, err := l.Allow(context.Background(), p, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Errorf("a worldwide policy without WithGlobal: %v, want ErrInvalidPolicy", err)
	}
	g := newInstance(t, dial(t, srv.Addr), ratelease.WithGlobal(dial(t, srv.Addr), "here")).l
	for _, a := range []ratelease.Algorithm{ratelease.SlidingWindowLog, ratelease.LeakyBucket} {
		q := policy(t, "exactonly"+a.String()[:3], ratelease.Limit{Algorithm: a, Rate: 10, Period: time.Second}).Worldwide()
		if _, err := g.Allow(context.Background(), q, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
			t.Errorf("a worldwide %v: %v, want ErrInvalidPolicy", a, err)
		}
	}
	for _, name := range []string{"", "a:b", "a b", "{x}"} {
		if _, err := ratelease.New(dial(t, srv.Addr), ratelease.WithGlobal(dial(t, srv.Addr), name)); !errors.Is(err, ratelease.ErrInvalidOption) {
			t.Errorf("region %q: %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := ratelease.New(dial(t, srv.Addr), ratelease.WithGlobal(nil, "x")); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Errorf("a nil global client: %v, want ErrInvalidOption", err)
	}
	// One Redis for both (a test, a demo): the worldwide key and the pool
	// never share a Redis key, and the limit holds. (A decision waits a
	// couple of round trips at most for its pool's refill: on a loaded
	// machine some are denied while one is on its way, and asked again.)
	q := policy(t, "same", ratelease.Limit{Rate: 5, Period: time.Hour}).Worldwide()
	var admitted int
	for i := 0; i < 200 && admitted < 5; i++ {
		if res, err := g.Allow(context.Background(), q, "k"); err != nil {
			t.Fatal(err)
		} else if res.Allowed {
			admitted++
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 20 {
		if res, err := g.Allow(context.Background(), q, "k"); err != nil {
			t.Fatal(err)
		} else if res.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("5 an hour, one Redis for both tiers: admitted %d", admitted)
	}
}

// waitersClaimWhatTheyAsk (TestWorldwideLimit/waiters): regions whose
// callers Wait claim a share of the worldwide limit by what their callers
// ask for, not by how often they retry nor by the whole rate for every
// instance whose pool ran dry. Two regions that ask less than an equal
// share claim at most 3 times their demand at the global key (the median
// of its members hash read from a quarter of the run on; 1.4 to 2.2 times
// in runs on a 2-core machine, and 5 to 13 times when each instance of a
// dry pool claimed the whole rate and retries counted), so the region
// that asks most gets the rest.
//
// It runs in TestWorldwideLimit's world (one world costs seconds to start).
func waitersClaimWhatTheyAsk(t *testing.T, w *world, rate int, d time.Duration) {
	perSec := []float64{5 * float64(rate) / 3, 0.6 * float64(rate) / 3, 0.8 * float64(rate) / 3}
	demand := make([]float64, len(perSec))
	for r, x := range perSec {
		demand[r] = x * d.Seconds()
	}
	p := policy(t, "world-wait", ratelease.Limit{Algorithm: ratelease.TokenBucket, Rate: rate, Period: time.Second}).Worldwide()
	claims := make([][]float64, len(perSec))
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		ctx := context.Background()
		// (From a quarter of the run on: a key's first refills claim the
		// whole rate, before its instances have said what they want.)
		from := time.Now().Add(d / 4)
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if now.Before(from) {
					continue
				}
			}
			keys, err := w.global.Keys(ctx, "*world-wait*").Result()
			if err != nil {
				continue
			}
			for _, k := range keys {
				if typ, _ := w.global.Type(ctx, k).Result(); typ != "hash" {
					continue
				}
				for r := range perSec {
					v, err := w.global.HGet(ctx, k, "region"+strconv.Itoa(r)).Result()
					if err != nil {
						continue
					}
					var gen, claim float64
					if _, err := fmt.Sscanf(v, "%f %f", &gen, &claim); err == nil {
						claims[r] = append(claims[r], claim)
					}
				}
			}
		}
	}()
	l := runRegions(t, w.regions, w.globalNow, demand, d, func(in *instance, _, _ int) int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if in.l.Wait(ctx, p, "k") == nil {
			in.count(ratelease.Result{Allowed: true}, 1)
			return 1
		}
		in.count(ratelease.Result{}, 1)
		return 0
	})
	close(stop)
	<-sampled
	w.check(t)
	t.Logf("admitted %v; claims seen %d, %d, %d", l.admitted, len(claims[0]), len(claims[1]), len(claims[2]))
	for r := 1; r < len(perSec); r++ {
		if len(claims[r]) < 5 {
			t.Fatalf("region %d: %d claims seen at the global key, want a few a second", r, len(claims[r]))
		}
		slices.Sort(claims[r])
		med := claims[r][len(claims[r])/2]
		t.Logf("region %d asks %.0f/s: median claim %.0f/s (lowest %.0f, highest %.0f)", r, perSec[r], med, claims[r][0], claims[r][len(claims[r])-1])
		if med > 3*perSec[r] {
			t.Errorf("region %d asks %.0f units/s and claims %.0f (median) at the global key, want at most 3 times it", r, perSec[r], med)
		}
	}
}

// closedLoopWaitersGetTheirShare (TestWorldwideLimit/closed-loop
// waiters): a region whose callers Wait in a closed loop (each asks again
// only once admitted, so it measures what it is given and no more) joins
// a key that a flood from another region holds whole. Both want more than
// the worldwide limit, so max-min gives each an equal share, and the
// waiters' region gets at least 0.6 of it from its join on. (A region that
// claimed only what it measured would keep what its first refills got.
// It does not: on a 2-core machine the region takes refills of about 70
// units, and 0.69 to 0.70 of an equal share from its join on in a 4s
// run, its first half second spent on its first refill; in a 12s run,
// 0.83 over its first 3s and 1.0 after.)
func closedLoopWaitersGetTheirShare(t *testing.T, w *world, rate int, d time.Duration) {
	p := policy(t, "world-loop", ratelease.Limit{Algorithm: ratelease.TokenBucket, Rate: rate, Period: time.Second}).Worldwide()
	var waited atomic.Int64
	start := time.Now()
	end, join := start.Add(d), start.Add(d/4)
	var wg sync.WaitGroup
	// Region 0 asks three times the rate, open loop (decisions of Allow).
	wg.Go(func() {
		runRegions(t, w.regions[:1], w.globalNow, []float64{3 * float64(rate) * d.Seconds()}, d, allowOn(p, "k"))
	})
	// Region 1 joins at a quarter of the run: two callers per instance,
	// each Waits, then asks again.
	for _, in := range w.regions[1] {
		for range 2 {
			wg.Go(func() {
				time.Sleep(time.Until(join))
				for time.Now().Before(end) {
					ctx, cancel := context.WithDeadline(context.Background(), end)
					err := in.l.Wait(ctx, p, "k")
					cancel()
					if err == nil {
						in.count(ratelease.Result{Allowed: true}, 1)
						waited.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	w.check(t)
	share := float64(rate) / 2 * (d - d/4).Seconds()
	t.Logf("from its join on, the waiters' region admitted %d, %.2f of an equal share %.0f", waited.Load(), float64(waited.Load())/share, share)
	if got := float64(waited.Load()); got < 0.6*share {
		t.Errorf("closed-loop waiters got %.2f of an equal share, want at least 0.6", got/share)
	}
}
