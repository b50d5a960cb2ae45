package systest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// TestFloodFigures is a measurement (RATELEASE_MEASURE=1): the demand
// shapes where lease engine v2 fell short, each in lease and exact mode
// with the defaults on one real redis-server, one run each, printed as a
// table (the closing note's before/after comes from running it on two
// commits):
//
//	RATELEASE_MEASURE=1 go test -run '^TestFloodFigures$' -v -timeout 20m ./internal/systest
//
// RATELEASE_ROWS=text runs only the rows whose name holds text.
func TestFloodFigures(t *testing.T) {
	redistest.Measure(t)
	srv := redistest.Start(t)
	now := redisClock(t, srv.Client(t))
	tb := func(rate, burst int) ratelease.Limit {
		return ratelease.Limit{Rate: rate, Period: time.Second, Burst: burst}
	}
	type row struct {
		name           string
		limit          ratelease.Limit
		instances, gor int
		n              int
		d              time.Duration
		kind           string // flood, paced, wait
	}
	rows := []row{
		{"flood 6x2, 3000/s burst 300", tb(3000, 300), 6, 2, 1, 4 * time.Second, "flood"},
		{"flood 3x2", tb(3000, 300), 3, 2, 1, 4 * time.Second, "flood"},
		{"flood 2x2", tb(3000, 300), 2, 2, 1, 4 * time.Second, "flood"},
		{"flood 1x4", tb(3000, 300), 1, 4, 1, 4 * time.Second, "flood"},
		{"flood 6x2, 30000/s burst 3000", tb(30000, 3000), 6, 2, 1, 4 * time.Second, "flood"},
		{"paced 6x2 (1ms sleep per call)", tb(3000, 300), 6, 2, 1, 4 * time.Second, "paced"},
		{"bandwidth 1e9 B/s burst 64 MiB, 4x2 AllowN(64 KiB)", tb(1_000_000_000, 64<<20), 4, 2, 64 << 10, 2 * time.Second, "flood"},
		{"Wait 6x2", tb(3000, 300), 6, 2, 1, 4 * time.Second, "wait"},
		{"fixed window 2500/s, 6x1 spinning", ratelease.Limit{Rate: 2500, Period: time.Second, Algorithm: ratelease.FixedWindow}, 6, 1, 1, 4 * time.Second, "flood"},
	}
	t.Logf("| shape | mode | admitted / bound | round trips per admitted | worst fair share |")
	for _, r := range rows {
		if only := os.Getenv("RATELEASE_ROWS"); only != "" && !strings.Contains(r.name, only) {
			continue
		}
		for _, exact := range []bool{false, true} {
			opts := []ratelease.Option{}
			mode := "lease"
			if exact {
				opts, mode = append(opts, ratelease.WithExact()), "exact"
			}
			p := policy(t, "ft"+strconv.FormatInt(time.Now().UnixNano(), 36), r.limit)
			ins := newInstances(t, r.instances, clientsTo(t, srv.Addr), opts...)
			s := span{start: now()}
			ctx, cancel := context.WithTimeout(context.Background(), r.d)
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
			cancel()
			s.end = now()
			tot := sum(ins)
			closeAll(ins)
			var most float64
			if r.limit.Algorithm == ratelease.FixedWindow {
				most = windows(float64(r.limit.Rate))(s)
			} else {
				most = bucket(float64(r.limit.Rate), float64(r.limit.Burst))(s)
			}
			worst := worstShare(ins, r.n, r.kind == "wait")
			t.Logf("| %s | %s | %.3f | %.3f | %.2f |", r.name, mode, float64(tot.units)/most,
				ratio(float64(tot.trips), float64(tot.admitted)), worst)
		}
	}
	// Single-use keys: 16,000 keys each used once, 16 goroutines.
	for _, exact := range []bool{false, true} {
		if only := os.Getenv("RATELEASE_ROWS"); only != "" && !strings.Contains("single-use", only) {
			break
		}
		var opts []ratelease.Option
		if exact {
			opts = append(opts, ratelease.WithExact())
		}
		p := policy(t, fmt.Sprintf("once%v", exact), ratelease.PerMinute(60))
		in := newInstances(t, 1, clientsTo(t, srv.Addr), opts...)[0]
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for k := next.Add(1); k <= 16000; k = next.Add(1) {
					in.allowN(p, "once-"+strconv.FormatInt(k, 10), 1)
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		_ = in.l.Close()
		t.Logf("| 16,000 single-use keys, 16 goroutines | exact=%v | %.0f decisions/s | %.3f round trips, %.3f commands per decision | |",
			exact, 16000/el.Seconds(), ratio(float64(in.wire.Trips.Load()), 16000), ratio(float64(in.wire.Cmds.Load()), 16000))
	}
}
