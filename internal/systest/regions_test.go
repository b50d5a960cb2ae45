package systest_test

import (
	"context"
	"fmt"
	"os"
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
	regions   [][]*instance
	// cross counts each region's round trips to the global Redis.
	cross    []*redistest.Trips
	proxies  []*redistest.Proxy
	regional []*redistest.Server
}

// newWorld starts a world of len(perRegion) regions, region r with
// perRegion[r] instances and a cross-region round trip of rtt[r], each
// instance made with opts and WithGlobal.
func newWorld(t testing.TB, perRegion []int, rtt []time.Duration, opts ...ratelease.Option) *world {
	t.Helper()
	global := redistest.Start(t)
	w := &world{globalNow: redisClock(t, dial(t, global.Addr))}
	for r, n := range perRegion {
		regional := redistest.Start(t)
		px := redistest.NewProxy(t, global.Addr)
		px.SetDelay(rtt[r])
		trips := &redistest.Trips{}
		var ins []*instance
		for range n {
			gc := redis.NewClient(&redis.Options{Addr: px.Addr})
			t.Cleanup(func() { _ = gc.Close() })
			// Connected before the run, as a service's would be: a new
			// connection's handshake costs several round trips.
			if err := gc.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			gc.AddHook(trips)
			o := append([]ratelease.Option{ratelease.WithGlobal(gc, fmt.Sprintf("region%d", r))}, opts...)
			ins = append(ins, newInstance(t, dial(t, regional.Addr), o...))
		}
		w.regions = append(w.regions, ins)
		w.cross = append(w.cross, trips)
		w.proxies = append(w.proxies, px)
		w.regional = append(w.regional, regional)
	}
	return w
}

// paced runs demand[r] decisions a second on key of p in region r, spread
// over its instances, for d; it returns the span of the global Redis's
// clock that holds the run, and what each region admitted.
func (w *world) paced(t *testing.T, p *ratelease.Policy, key string, demand []float64, d time.Duration) (span, []int64) {
	t.Helper()
	s := span{start: w.globalNow()}
	start := time.Now()
	done := make(chan struct{}, len(demand))
	for r, rate := range demand {
		ins := w.regions[r]
		go func() {
			offered := pace(start, rate, d, max(len(ins), goroutinesFor(rate)), func(g int) { ins[g%len(ins)].allowN(p, key, 1) })
			checkOffered(t, fmt.Sprintf("region %d", r), offered, rate, d)
			done <- struct{}{}
		}()
	}
	for range demand {
		<-done
	}
	s.end = w.globalNow()
	admitted := make([]int64, len(demand))
	for r, ins := range w.regions {
		admitted[r] = sum(ins).units
		for i, in := range ins {
			in.check(t, fmt.Sprintf("region %d instance %d", r, i))
		}
	}
	return s, admitted
}

// exactPaced is the same demand on one Redis in exact mode, as many
// instances: what a single-region limiter admits.
func exactPaced(t *testing.T, p *ratelease.Policy, key string, perRegion []int, demand []float64, d time.Duration) int64 {
	t.Helper()
	srv := redistest.Start(t)
	var all int64
	done := make(chan int64, len(demand))
	start := time.Now()
	for r, rate := range demand {
		ins := newInstances(t, perRegion[r], clientsTo(t, srv.Addr), ratelease.WithExact())
		go func() {
			pace(start, rate, d, max(len(ins), goroutinesFor(rate)), func(g int) { ins[g%len(ins)].allowN(p, key, 1) })
			done <- sum(ins).units
		}()
	}
	for range demand {
		all += <-done
	}
	return all
}

// TestWorldwideLimit: one worldwide limit across three regions, 40 to 80
// ms each way from the global Redis, two to four instances each, one
// region at five times its fair share: the fleet never admits past the
// bound (from a fresh key every unit admitted was granted by the global
// Redis within the run: Burst + Rate·T for a token bucket, Rate per window
// touched for windows), admits close to what one exact limiter admits on
// the same demand, shares max-min between regions, and seldom crosses
// regions.
func TestWorldwideLimit(t *testing.T) {
	const rate = 200
	perRegion := []int{2, 3, 4}
	rtt := []time.Duration{80 * time.Millisecond, 120 * time.Millisecond, 160 * time.Millisecond}
	// Fair share rate/3 each; region 0 asks five times it, the others
	// less than it: max-min gives them their demand and region 0 the rest.
	demand := []float64{5 * rate / 3.0, 0.6 * rate / 3, 0.8 * rate / 3}
	d := loadLength(5 * time.Second)
	for _, c := range []struct {
		alg   ratelease.Algorithm
		bound func(rate float64) bound
	}{
		{ratelease.TokenBucket, func(r float64) bound { return bucket(r, r) }},
		{ratelease.FixedWindow, windows},
		{ratelease.SlidingWindowCounter, windows},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			base := policy(t, "world", ratelease.Limit{Algorithm: c.alg, Rate: rate, Period: time.Second})
			p := base.Worldwide()
			w := newWorld(t, perRegion, rtt)
			s, admitted := w.paced(t, p, "k", demand, d)
			var total int64
			for _, a := range admitted {
				total += a
			}
			atMost(t, "worldwide", float64(total), c.bound(rate)(s))
			if os.Getenv("RL_DEBUG_REGIONS") != "" {
				for r, srv := range w.regional {
					m, _ := dial(t, srv.Addr).HGetAll(context.Background(), "ratelease:{world:k}:m").Result()
					t.Logf("region %d members %v", r, m)
					for _, in := range w.regions[r] {
						st := in.l.Stats()
						t.Logf("region %d: leases %d leased %d used %d refunded %d expired %d dropped %d held %d remote %d local %d cached %d denied %d", r, st.Leases, st.UnitsLeased, st.UnitsUsed, st.UnitsRefunded, st.UnitsExpired, st.UnitsDropped, st.UnitsHeld, st.Remote, st.Local, st.Cached, st.Denied)
					}
				}
			}
			exact := exactPaced(t, base, "k", perRegion, demand, d)
			var decisions, cross int64
			for r, ins := range w.regions {
				decisions += sum(ins).decisions
				cross += w.cross[r].Trips.Load()
			}
			// Max-min: regions 1 and 2 get their demand, region 0 the rest.
			fair := []float64{rate*s.seconds() - (demand[1]+demand[2])*d.Seconds(), demand[1] * d.Seconds(), demand[2] * d.Seconds()}
			worst := 2.0
			for r := range admitted {
				worst = min(worst, float64(admitted[r])/fair[r])
			}
			t.Logf("%v: admitted %v = %d of bound %.0f, exact mode %d (%.3f); worst region %.2f of its fair share; cross-region round trips %d, %.4f a decision",
				c.alg, admitted, total, c.bound(rate)(s), exact, ratio(total, exact), worst, cross, ratio(cross, decisions))
			atLeast(t, "worldwide against exact mode", float64(total), float64(exact), 0.85)
			if worst < 0.8 {
				t.Errorf("a region got %.2f of its max-min fair share, want at least 0.8", worst)
			}
		})
	}
}
