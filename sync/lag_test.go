package sync_test

import (
	"runtime"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/local"
)

// A hit reads a coarse clock, which lags when every core is busy: its
// ticker goroutine waits for a time slice behind the goroutines that
// spin, as callers do in a flood (tens of milliseconds with a dozen
// spinners on two cores). The hit path (tier's Engine.Hit: Leaser.HitNow,
// a Take at the cached time plus how far behind it may be, and a precise
// reading after one take in a 64th of a lease, Entry.Recheck; a miss
// takes at a precise reading) bounds what
// that costs: of each lease, at most a 64th of its units, and one per
// caller under way, are taken past their expiry, however far the clock
// lags. This drives a saturated CPU with goroutines spinning on those
// steps, refills the allowance with a lease of a few milliseconds' life
// as each lapses or runs out, and checks every take against a precise
// reading made before it. Those readings do not refresh the coarse clock
// (the Leaser's do): it is left to its ticker and the rechecks.
func TestHitsUseFewUnitsPastExpiryOnASaturatedCPU(t *testing.T) {
	m := redistest.StartMini(t)
	l := newLeaser(t, m.Client(t), clock.System{}, cfg())
	e := l.NewTable(tokenBucket(t, 1000, 1000), nil).GetOrCreate("k")
	ref, refNow := time.Now(), l.Now()
	fine := func() int64 { return refNow + int64(time.Since(ref)) }
	keep := func(int64, int64) bool { return false }

	const (
		life  = 3 * time.Millisecond
		lease = 1 << 16
	)
	var exp, fills atomic.Int64 // expiry of the units held: stored before they are
	fill := func() {
		now := fine()
		x := now + int64(life)
		exp.Store(x)
		e.Answer(local.Answer{Grant: local.Grant{Units: lease, Keep: lease, At: 1, Expires: x}}, now, keep)
		fills.Add(1)
	}
	fill()

	spinners := 6 * runtime.GOMAXPROCS(0)
	run := 2 * time.Second
	if testing.Short() {
		run = 500 * time.Millisecond
	}
	var (
		stop            atomic.Bool
		late, takes     atomic.Int64
		worst, worstLag atomic.Int64
		wg              stdsync.WaitGroup
	)
	for range spinners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				x := exp.Load()
				t0 := fine()
				now, guard := l.HitNow()
				if lag := t0 - now; lag > worstLag.Load() {
					worstLag.Store(lag) // (a racy max: a reading, not an assertion)
				}
				left, ok := e.Take(1, now+guard)
				if ok && e.Recheck(left, 1) {
					l.Now()
				}
				if !ok { // a miss: Miss takes at a precise reading
					_, ok = e.Take(1, l.Now())
				}
				if !ok || exp.Load() != x {
					continue // none, or refilled meanwhile: not this expiry's unit
				}
				takes.Add(1)
				if over := t0 - x; over >= 0 {
					late.Add(1)
					if over > worst.Load() {
						worst.Store(over)
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the leases: a new one as each lapses or runs out
		defer wg.Done()
		for !stop.Load() {
			if fine() >= exp.Load() || e.Units() == 0 {
				fill()
			}
			runtime.Gosched()
		}
	}()
	time.Sleep(run)
	stop.Store(true)
	wg.Wait()
	allowed := fills.Load() * (lease/64 + int64(spinners))
	t.Logf("%d spinners on %d cores for %v: %d leases of %d units, %d takes; the coarse clock lagged up to %v; %d units taken past their expiry (worst %v past), %d allowed (a 64th of each lease and one per spinner)",
		spinners, runtime.GOMAXPROCS(0), run, fills.Load(), lease, takes.Load(), time.Duration(worstLag.Load()), late.Load(), time.Duration(worst.Load()), allowed)
	if late.Load() > allowed {
		t.Fatalf("%d units taken past their expiry (the worst %v past it), more than the %d allowed", late.Load(), time.Duration(worst.Load()), allowed)
	}
	if takes.Load() == 0 {
		t.Fatal("no unit was taken: the test measured nothing")
	}
}
