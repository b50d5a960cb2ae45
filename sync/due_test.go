package sync_test

import (
	"context"
	"fmt"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// dueRig is what the tests of due leases share: miniredis and a manual
// clock that move together, and a token bucket of 100 units a second, 10
// deep (a unit every 10ms).
type dueRig struct {
	t   *testing.T
	mr  *redistest.Mini
	clk *clock.Manual
	p   *remote.Policy
}

func newDueRig(t *testing.T) *dueRig {
	t.Helper()
	mr := redistest.StartMini(t)
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 100, Period: time.Second, Burst: 10}})
	if err != nil {
		t.Fatal(err)
	}
	return &dueRig{t: t, mr: mr, clk: clock.NewManual(mr.Now()), p: p}
}

// leaser returns a Leaser of TTL 1s (its sweeper wakes every 250ms).
func (r *dueRig) leaser(maxKeys int) *leasesync.Leaser {
	r.t.Helper()
	conf := leasesync.Config{Min: 1, Max: 100, TTL: time.Second, LowWater: 0.25, MaxKeys: maxKeys}
	return newLeaser(r.t, r.mr.Client(r.t), r.clk, conf)
}

func (r *dueRig) advance(d time.Duration) {
	r.mr.Advance(d)
	r.clk.Advance(d)
}

// hotDenied makes e's key hot (this instance wants fifty times its rate)
// and leases it until Redis denies it: the answer sets a due lease.
func (r *dueRig) hotDenied(l *leasesync.Leaser, e *leasesync.Entry) remote.Decision {
	r.t.Helper()
	ctx := context.Background()
	if e.Answers() == 0 { // the first lease starts the demand's clock
		if _, _, err := l.Lease(ctx, e, 1); err != nil {
			r.t.Fatal(err)
		}
		r.advance(20 * time.Millisecond)
	}
	for range 20 {
		e.TakeUpTo(100, l.Now())
		e.Wanted(100)
		e.ClearDenial(false)
		d, _, err := l.Lease(ctx, e, 1)
		if err != nil {
			r.t.Fatal(err)
		}
		if d.Granted == 0 {
			return d
		}
	}
	r.t.Fatal("a hot key never denied")
	return remote.Decision{}
}

// dueIn is how long after its answer d's due lease goes out.
func dueIn(d remote.Decision) time.Duration {
	return min(max(d.RetryAfter, d.Next), time.Second) + 2*time.Millisecond
}

// still fails the test if f changes within 200ms: for what a background
// goroutine must not do.
func still[T comparable](t *testing.T, what string, f func() T) {
	t.Helper()
	was := f()
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if now := f(); now != was {
			t.Fatalf("%s went from %v to %v", what, was, now)
		}
	}
}

// A hot key's entry evicted while its due lease is pending gets no lease
// when it falls due: nobody would use the batch (it would only go back),
// and the call would count this instance among the key's members again,
// with its old demand, after the eviction took it out of them: the key's
// other instance would be held to half the key for seconds.
func TestDueLeasesNothingForAnEvictedEntry(t *testing.T) {
	r := newDueRig(t)
	a, b := r.leaser(1), r.leaser(100)
	ea, eb := a.NewTable(r.p, nil).GetOrCreate("k"), b.NewTable(r.p, nil).GetOrCreate("k")
	r.hotDenied(a, ea)
	r.hotDenied(b, eb)
	d := r.hotDenied(a, ea)
	if d.Members != 2 || !ea.Shared() {
		t.Fatalf("a's denial: %+v, shared %v; want both hot instances members of a key shared out", d, ea.Shared())
	}
	trips := a.Stats().RoundTrips
	a.NewTable(r.p, nil).GetOrCreate("other") // evicts a's entry of k: a leaves k's members
	waitFor(t, func() bool { return a.Stats().RoundTrips > trips })
	leases := a.Stats().Leases
	for range 10 { // past a's due
		r.advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	still(t, "a's leases", func() uint64 { return a.Stats().Leases })
	if a.Stats().Leases != leases {
		t.Fatalf("a leased k %d times after its entry was evicted", a.Stats().Leases-leases)
	}
	eb.ClearDenial(false)
	if d, _, err := b.Lease(context.Background(), eb, 1); err != nil || d.Members != 1 {
		t.Fatalf("b's lease: %+v, %v; want b k's only member", d, err)
	}
}

// However many answers come while an entry's due lease is pending (each a
// call to Redis: here denials one after another, as a Refund or an
// Unblock of the key, which drop its cached denial, let through), the
// entry has one pending, one goroutine and one timer, at the last answer's
// time, and one lease goes out then.
func TestDuePendingOncePerEntry(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	e := l.NewTable(r.p, nil).GetOrCreate("k")
	d := r.hotDenied(l, e)
	for range 20 {
		e.ClearDenial(false)
		var err error
		if d, _, err = l.Lease(context.Background(), e, 1); err != nil || d.Granted != 0 {
			t.Fatalf("lease: %+v, %v; want a denial", d, err)
		}
	}
	waitFor(t, func() bool { return r.clk.Timers() >= 2 })
	still(t, "timers", r.clk.Timers)
	if n := r.clk.Timers(); n != 2 || leasesync.PendingDues(l) != 1 {
		t.Fatalf("%d timers, %d dues pending after 21 denials; want the sweeper's and one due's", n, leasesync.PendingDues(l))
	}
	leases := l.Stats().Leases
	r.advance(dueIn(d))
	waitFor(t, func() bool { return l.Stats().Leases == leases+1 && e.Leasing() == nil })
	if e.Units() == 0 || leasesync.PendingDues(l) != 0 {
		t.Fatalf("after the due lease: %d units, %d dues pending; want its grant, none pending", e.Units(), leasesync.PendingDues(l))
	}
}

// A due lease moved by a later answer goes out at that answer's time,
// sooner or later than the one it replaces.
func TestDueMovesWithTheLastAnswer(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	e := l.NewTable(r.p, nil).GetOrCreate("k")
	leases := func() uint64 { return l.Stats().Leases }

	now := l.Now()
	leasesync.DueAt(l, e, now+int64(500*time.Millisecond))
	waitFor(t, func() bool { return r.clk.Timers() == 2 })
	leasesync.DueAt(l, e, now+int64(20*time.Millisecond)) // sooner
	r.advance(25 * time.Millisecond)
	waitFor(t, func() bool { return leases() == 1 && e.Leasing() == nil })

	e.TakeUpTo(100, l.Now()) // (a due lease is for an entry with no units)
	now = l.Now()
	leasesync.DueAt(l, e, now+int64(20*time.Millisecond))
	waitFor(t, func() bool { return r.clk.Timers() == 2 })
	leasesync.DueAt(l, e, now+int64(300*time.Millisecond)) // later
	r.advance(25 * time.Millisecond)
	still(t, "leases", leases)
	if leases() != 1 || leasesync.PendingDues(l) != 1 {
		t.Fatalf("%d leases, %d dues pending; want the due moved later, still pending", leases(), leasesync.PendingDues(l))
	}
	r.advance(280 * time.Millisecond)
	waitFor(t, func() bool { return leases() == 2 })
}

// Dues pending on a clock that never moves end with Close, which does not
// wait for their time: their timers are stopped, their goroutines gone
// (TestMain's goleak), and none starts after.
func TestCloseEndsDuesOnAStillClock(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	tb := l.NewTable(r.p, nil)
	for i := range 10 {
		leasesync.DueAt(l, tb.GetOrCreate(fmt.Sprint(i)), l.Now()+int64(time.Hour))
	}
	waitFor(t, func() bool { return r.clk.Timers() == 11 })
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the dues' time")
	}
	leasesync.DueAt(l, tb.GetOrCreate("late"), l.Now()+int64(time.Millisecond))
	if n := r.clk.Timers(); n != 0 {
		t.Fatalf("%d timers after Close", n)
	}
	r.advance(time.Hour)
	if s := l.Stats(); s.Leases != 0 {
		t.Fatalf("Stats %+v: a due leased", s)
	}
}

// Dues set while Close runs, and falling due during it (the clock moves
// all along): Close returns, no due's goroutine or timer outlives it, no
// lease goes out after it, and every unit leased is accounted for, none
// held.
func TestCloseRacesDues(t *testing.T) {
	for round := range 10 {
		r := newDueRig(t)
		l := r.leaser(100)
		tb := l.NewTable(r.p, nil)
		var es []*leasesync.Entry
		for i := range 8 {
			es = append(es, tb.GetOrCreate(fmt.Sprint(i)))
		}
		start, done := make(chan struct{}), make(chan struct{})
		var wg stdsync.WaitGroup
		for _, e := range es {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for j := range 200 {
					leasesync.DueAt(l, e, l.Now()+int64(1+j%3)*int64(time.Millisecond))
					if j%10 == 0 {
						e.TakeUpTo(100, l.Now())
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
					r.advance(time.Millisecond)
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		l.Close()
		after := l.Stats()
		close(done)
		wg.Wait()
		if n := r.clk.Timers(); n != 0 {
			t.Fatalf("round %d: %d timers after Close", round, n)
		}
		r.advance(time.Second)
		time.Sleep(10 * time.Millisecond)
		s := l.Stats()
		if s.Leases != after.Leases {
			t.Fatalf("round %d: %d leases after Close", round, s.Leases-after.Leases)
		}
		if s.UnitsHeld != 0 || s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped {
			t.Fatalf("round %d: %+v: units held, or leased units not accounted for", round, s)
		}
	}
}

// A due lease and a request's lease of one entry: the request that comes
// while the due's is in flight waits for it and takes from it, making no
// call of its own (one lease in flight for an entry, a prefetch's or a
// request's).
func TestDueLeaseServesTheRequestThatMeetsIt(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	var armed atomic.Bool
	var sent atomic.Int64
	reached, hold := make(chan struct{}), make(chan struct{})
	leasesync.SetBeforeSend(l, func(*leasesync.Entry) {
		if armed.Load() {
			if sent.Add(1) == 1 {
				close(reached)
				<-hold
			}
		}
	})
	e := l.NewTable(r.p, nil).GetOrCreate("k")
	d := r.hotDenied(l, e)
	leases := l.Stats().Leases
	waitFor(t, func() bool { return leasesync.PendingDues(l) == 1 && r.clk.Timers() == 2 })
	armed.Store(true)
	r.advance(dueIn(d))
	<-reached // the due's lease, held before it is sent
	type result struct {
		taken bool
		err   error
	}
	got := make(chan result, 1)
	go func() {
		_, taken, err := l.Lease(context.Background(), e, 1)
		got <- result{taken, err}
	}()
	still(t, "leases sent", sent.Load)
	close(hold)
	if res := <-got; !res.taken || res.err != nil {
		t.Fatalf("the request: taken %v, %v; want its unit from the due's lease", res.taken, res.err)
	}
	if s := l.Stats(); s.Leases != leases+1 || sent.Load() != 1 {
		t.Fatalf("%d leases, %d sent; want the due's alone", s.Leases-leases, sent.Load())
	}
}

// A Reset (Forget, the key's state gone in Redis, Forget again) while a
// due lease is in flight: its grant, from the fresh key, is dropped, not
// held in the entry past the Reset; a due lease after the Reset brings the
// fresh key's units into the entry, which is live. Either way every unit
// leased is accounted for, and none is held after Close.
func TestDueAcrossReset(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	var armed atomic.Bool
	reached, hold := make(chan struct{}), make(chan struct{})
	leasesync.SetBeforeSend(l, func(*leasesync.Entry) {
		if armed.CompareAndSwap(true, false) {
			close(reached)
			<-hold
		}
	})
	dr := newDoor(r.mr.Client(t), r.clk) // for the Reset: a door of its own
	t.Cleanup(func() { dr.Close(context.Background()) })
	reset := func(e *leasesync.Entry) {
		l.Forget(e)
		if err := dr.Reset(context.Background(), r.p, "k"); err != nil {
			t.Fatal(err)
		}
		l.Forget(e)
	}
	e := l.NewTable(r.p, nil).GetOrCreate("k")
	d := r.hotDenied(l, e)
	waitFor(t, func() bool { return leasesync.PendingDues(l) == 1 && r.clk.Timers() == 2 })
	armed.Store(true)
	dropped := l.Stats().UnitsDropped
	r.advance(dueIn(d))
	<-reached
	reset(e)
	close(hold)
	waitFor(t, func() bool { return e.Leasing() == nil && l.Stats().UnitsDropped > dropped })
	if e.Units() != 0 {
		t.Fatalf("the entry holds %d units of a grant that began before the Reset", e.Units())
	}

	d = r.hotDenied(l, e)
	waitFor(t, func() bool { return leasesync.PendingDues(l) == 1 })
	reset(e)
	leases := l.Stats().Leases
	r.advance(dueIn(d))
	waitFor(t, func() bool { return l.Stats().Leases == leases+1 && e.Leasing() == nil })
	if e.Units() == 0 {
		t.Fatal("a due lease after the Reset brought nothing")
	}
	l.Close()
	if s := l.Stats(); s.UnitsHeld != 0 || s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped {
		t.Fatalf("after Close: %+v: units held, or leased units not accounted for", s)
	}
}

// Units a due lease brings while the demand has stopped lapse within TTL
// of the lease (a take after that fails), go back (or are counted
// dropped), and no further lease follows: the due is the answer's, not a
// poll.
func TestDueUnitsLapseWithinTTL(t *testing.T) {
	r := newDueRig(t)
	l := r.leaser(100)
	e := l.NewTable(r.p, nil).GetOrCreate("k")
	d := r.hotDenied(l, e)
	waitFor(t, func() bool { return leasesync.PendingDues(l) == 1 && r.clk.Timers() == 2 })
	before := l.Stats()
	r.advance(dueIn(d))
	start := l.Now() // (the lease's validity counts from its start, about now)
	waitFor(t, func() bool { return l.Stats().Leases == before.Leases+1 && e.Leasing() == nil })
	got := l.Stats().UnitsLeased - before.UnitsLeased
	if got == 0 || uint64(e.Units()) != got {
		t.Fatalf("the due lease brought %d units, the entry holds %d", got, e.Units())
	}
	for range 12 { // 3s: a sweep every 250ms
		r.advance(250 * time.Millisecond)
		waitFor(t, func() bool { return r.clk.Timers() == 1 }) // the sweeper's next
	}
	if took(e.Take(1, start+int64(time.Second))) {
		t.Fatal("a unit of the due lease taken at its TTL")
	}
	s := l.Stats()
	if s.Leases != before.Leases+1 {
		t.Fatalf("%d leases after the due's, with no demand", s.Leases-before.Leases-1)
	}
	if s.UnitsExpired-before.UnitsExpired != got || s.UnitsHeld != 0 || s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped {
		t.Fatalf("Stats %+v: want the due's %d units expired, given back or dropped, none held", s, got)
	}
}
