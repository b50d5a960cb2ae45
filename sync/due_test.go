package sync_test

import (
	"context"
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
		e.ClearDenial()
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
	eb.ClearDenial()
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
		e.ClearDenial()
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
