package systest_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// BenchmarkFlood runs the demand shapes where lease engine v2 fell short,
// each in lease and in exact mode with the defaults on one real
// redis-server, each op one timed load (4 s; 2 s for bandwidth) on fresh
// Limiters. It reports what was admitted over the bound (admitted/bound),
// the Redis round trips per admitted decision (trips/admitted) and the
// worst instance's admitted units over its max-min fair share
// (worst-share). Run it with
//
//	go test -run '^$' -bench '^BenchmarkFlood$' -benchtime 1x -timeout 20m ./internal/systest
//
// (-bench 'Flood/shape=wait' for one shape). Keys used once each, the last
// of the shapes: BenchmarkSingleUseKeys.
func BenchmarkFlood(b *testing.B) {
	addr := redistest.BenchAddr(b)
	now := redisClock(b, dial(b, addr))
	tb := func(rate, burst int) ratelease.Limit {
		return ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst}
	}
	for _, r := range []floodShape{
		{"flood-6x2", tb(3000, 300), 6, 2, 1, 4 * time.Second, "flood"},
		{"flood-3x2", tb(3000, 300), 3, 2, 1, 4 * time.Second, "flood"},
		{"flood-2x2", tb(3000, 300), 2, 2, 1, 4 * time.Second, "flood"},
		{"flood-1x4", tb(3000, 300), 1, 4, 1, 4 * time.Second, "flood"},
		{"flood-6x2-30000", tb(30000, 3000), 6, 2, 1, 4 * time.Second, "flood"},
		{"paced-6x2", tb(3000, 300), 6, 2, 1, 4 * time.Second, "paced"},
		{"bandwidth-4x2", tb(1_000_000_000, 64<<20), 4, 2, 64 << 10, 2 * time.Second, "flood"},
		{"wait-6x2", tb(3000, 300), 6, 2, 1, 4 * time.Second, "wait"},
		{"fixed-window-6x1", ratelease.Limit{Rate: 2500, Period: time.Second, Algorithm: ratelease.FixedWindow}, 6, 1, 1, 4 * time.Second, "flood"},
	} {
		for _, exact := range []bool{false, true} {
			b.Run("shape="+r.name+"/mode="+modeName(exact), func(b *testing.B) {
				var ofBound, trips, worst float64
				for b.Loop() {
					o, t, w := r.run(b, addr, now, exact)
					ofBound, trips, worst = ofBound+o, trips+t, worst+w
				}
				n := float64(b.N)
				b.ReportMetric(ofBound/n, "admitted/bound")
				b.ReportMetric(trips/n, "trips/admitted")
				b.ReportMetric(worst/n, "worst-share")
			})
		}
	}
}

// A floodShape is one shape of BenchmarkFlood: instances Limiters with gor
// goroutines each, deciding n units at a time on one key under limit for
// d; kind is flood (back to back), paced (a 1 ms sleep after each call) or
// wait (WaitN back to back).
type floodShape struct {
	name           string
	limit          ratelease.Limit
	instances, gor int
	n              int
	d              time.Duration
	kind           string
}

// run makes one load of r in one mode and returns what was admitted over
// the bound, the round trips per admitted decision and the worst share.
func (r floodShape) run(b *testing.B, addr string, now func() int64, exact bool) (ofBound, tripsPerAdmitted, worst float64) {
	var opts []ratelease.Option
	if exact {
		opts = append(opts, ratelease.WithExact())
	}
	p := policy(b, "ft"+strconv.FormatInt(time.Now().UnixNano(), 36), r.limit)
	ins := newInstances(b, r.instances, clientsTo(b, addr), opts...)
	s := span{start: now()}
	ctx, cancel := context.WithTimeout(context.Background(), loadLength(r.d))
	defer cancel()
	var wg sync.WaitGroup
	for _, in := range ins {
		for range r.gor {
			wg.Go(func() {
				for ctx.Err() == nil {
					switch r.kind {
					case "wait":
						err := in.l.WaitN(ctx, p, "k", r.n)
						if errors.Is(err, context.DeadlineExceeded) {
							return
						}
						in.count(ratelease.Result{Allowed: err == nil}, r.n)
					default:
						in.allowN(p, "k", r.n)
						if r.kind == "paced" {
							time.Sleep(time.Millisecond)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	s.end = now()
	tot := sum(ins)
	closeAll(ins)
	for i, in := range ins {
		in.check(b, "instance "+strconv.Itoa(i))
	}
	var most float64
	if r.limit.Algorithm == ratelease.FixedWindow {
		most = windows(float64(r.limit.Rate))(s)
	} else {
		most = bucket(float64(r.limit.Rate), float64(r.limit.Burst))(s)
	}
	return float64(tot.units) / most, ratio(float64(tot.trips), float64(tot.admitted)), worstShare(ins, r.n, r.kind == "wait")
}
