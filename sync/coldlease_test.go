package sync_test

import (
	"context"
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// occupy fills every slot of d's combiner (its calls in flight) with a
// decision of another key, so that the next Decide waits in the queue
// until one of them ends. It returns a wait for them.
func occupy(t *testing.T, d *door.Door, p *remote.Policy) func() {
	t.Helper()
	var wg stdsync.WaitGroup
	for range d.InFlight() {
		wg.Go(func() {
			_, err := d.Decide(context.Background(), remote.Request{Policy: p, Key: "busy", Min: 1, Max: 1}, nil)
			if err != nil {
				t.Logf("busy: %v", err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	return wg.Wait
}

// A cold key's lease that waits in the combiner when Close begins, joined
// by a second request of the key, and lands after Close stopped waiting
// for leases (its wait in the queue and its own round trip take longer
// than the one timeout Close gives them): Close waits for it before it
// stops the batcher, so that the unit its entry, gone by then, cannot
// keep is sent back (or, when Redis does not take it in time, counted as
// dropped): nothing is held after Close, and every unit Redis granted is
// used, back in Redis, or counted as dropped.
//
// With a context that can end (and does not), the call runs on a
// goroutine of its own (send): Close waits for its requester's apply too.
func TestCloseWaitsForAColdLeaseInTheCombiner(t *testing.T) {
	for _, cancelable := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelable=%v", cancelable), func(t *testing.T) {
			ctx := context.Background()
			if cancelable {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			closeWaitsForAColdLease(t, ctx)
		})
	}
}

func closeWaitsForAColdLease(t *testing.T, ctx context.Context) {
	proxy, c := proxied(t)
	const timeout = time.Second
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout})
	l := newLeaserThrough(t, d, clock.System{}, cfg())
	p := tokenBucket(t, 1, 2) // 2 units, one more an hour
	tab := l.NewTable(p, nil)
	warm(t, c, d, p)
	proxy.SetDelay(700 * time.Millisecond)
	busy := occupy(t, d, p)
	e := tab.GetOrCreate("k")
	type res struct {
		d     remote.Decision
		taken bool
		err   error
		at    time.Time
	}
	out := make(chan res, 2)
	var wg stdsync.WaitGroup
	lease := func() {
		dd, taken, err := l.Lease(ctx, e, 1)
		out <- res{dd, taken, err, time.Now()}
	}
	wg.Go(lease) // the cold lease: waits in the combiner
	time.Sleep(50 * time.Millisecond)
	wg.Go(lease) // joins it
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	l.Close()
	closed := time.Now()
	t.Logf("Close took %v (Redis timeout %v)", closed.Sub(began), timeout)
	wg.Wait()
	busy()
	close(out)
	used := int64(0)
	for r := range out {
		t.Logf("Lease: granted %d taken %v err %v, %v after Close returned", r.d.Granted, r.taken, r.err, r.at.Sub(closed))
		if r.err == nil && (r.d.Granted > 0 || r.taken) {
			used++
		}
		if r.at.After(closed) {
			t.Errorf("a Lease ended %v after Close returned: Close does not wait for a cold lease in the combiner", r.at.Sub(closed))
		}
	}
	proxy.SetDelay(0)
	s := l.Stats()
	t.Logf("Stats after Close: %+v", s)
	if s.UnitsHeld != 0 {
		t.Errorf("after Close, UnitsHeld %d, want 0", s.UnitsHeld)
	}
	peek, err := remote.NewStore(c, "t").Peek(ctx, p, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(peek.Remaining) + used + int64(s.UnitsDropped); got != 2 {
		t.Errorf("Redis has %d of 2 units of k left, %d used, %d dropped: a granted unit was neither used nor given back nor counted", peek.Remaining, used, s.UnitsDropped)
	}
	if s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped {
		t.Errorf("Stats %+v: leased is not used + refunded + dropped", s)
	}
}

// warm loads the scripts and opens enough connections for the calls in
// flight and a few more, before the proxy delays replies.
func warm(t *testing.T, c *redis.Client, d *door.Door, p *remote.Policy) {
	t.Helper()
	var wg stdsync.WaitGroup
	for range d.InFlight() + 4 {
		wg.Go(func() {
			if _, err := d.Decide(context.Background(), remote.Request{Policy: p, Key: "warm", Min: 1, Max: 1}, nil); err != nil {
				t.Error(err)
			}
			_ = c.Ping(context.Background())
		})
	}
	wg.Wait()
}

// A request of a key whose cold lease waits in the combiner joins the
// first joinable decision of the key it finds there, which need not be
// its entry's lease: here the lease of an entry of the same key that was
// evicted meanwhile (MaxKeys 1). The joiner waits for its own entry's
// lease, which asked for one unit; the unit it added goes to the evicted
// entry (and back to Redis later), having emptied the bucket first. Of
// three requests on a key of 2 units, 1 is admitted; joined as meant (or
// not joined at all), 2 are.
func TestJoinFindsItsOwnEntrysLease(t *testing.T) {
	proxy, c := proxied(t)
	d := newDoor(c, clock.System{})
	conf := cfg()
	conf.MaxKeys = 1
	l := newLeaserThrough(t, d, clock.System{}, conf)
	p := tokenBucket(t, 1, 2) // 2 units, one more an hour
	tab := l.NewTable(p, nil)
	warm(t, c, d, p)
	ctx := context.Background()
	proxy.SetDelay(300 * time.Millisecond)
	busy := occupy(t, d, p)
	var admitted atomic.Int64
	var wg stdsync.WaitGroup
	lease := func(e *leasesync.Entry) {
		dd, taken, err := l.Lease(ctx, e, 1)
		if err != nil {
			t.Error(err)
		}
		if dd.Granted > 0 || taken {
			admitted.Add(1)
		}
	}
	e1 := tab.GetOrCreate("k")
	wg.Go(func() { lease(e1) }) // e1's cold lease waits in the combiner
	time.Sleep(30 * time.Millisecond)
	tab.GetOrCreate("other") // evicts e1
	e2 := tab.GetOrCreate("k")
	if e2 == e1 {
		t.Fatal("e1 was not evicted")
	}
	wg.Go(func() { lease(e2) }) // e2's cold lease waits behind e1's
	time.Sleep(30 * time.Millisecond)
	wg.Go(func() { lease(e2) }) // joins: e2's lease, it should be
	wg.Wait()
	busy()
	if got := admitted.Load(); got != 2 {
		t.Errorf("%d of 3 requests admitted on a key of 2 units, want 2 (Stats %+v)", got, l.Stats())
	}
}

// With an unguarded door (a client that honours deadlines), a cold key's
// lease runs under context.WithoutCancel: its requester no longer returns
// at its context's end, as it did through the batcher (which abandons the
// call and applies its grant itself), but when Redis answers, or at the
// Redis timeout, after any wait in the combiner's queue.
func TestColdLeaseRequesterLeavesWithItsContext(t *testing.T) {
	proxy, c := proxied(t)
	d := newDoor(c, clock.System{}) // unguarded
	l := newLeaserThrough(t, d, clock.System{}, cfg())
	p := tokenBucket(t, 100, 100)
	tab := l.NewTable(p, nil)
	warm(t, c, d, p)
	proxy.SetDelay(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := l.Lease(ctx, tab.GetOrCreate("k"), 1)
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("Lease with a 50ms context returned after %v (%v)", took, err)
	}
}
