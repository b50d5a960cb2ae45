package sync_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	leasesync "github.com/ratelease/ratelease/sync"
)

// A lease takes along the units its entry set aside to go back. When
// Close begins between a request's lease's start and its call to the
// batcher, which then refuses it, those units must still go back: the
// lease puts them back in its entry, and Close waits for it before it
// clears the entries and stops the batcher. A prefetch is queued for the
// batcher as it starts: Close, begun while the batcher holds it unsent,
// waits for it, and its units go back with its call, its grant with the
// entries'. Forced with a hook.
func TestCloseGivesBackWhatALeaseUnderWayTookAlong(t *testing.T) {
	for _, prefetch := range []bool{false, true} {
		name := "request"
		if prefetch {
			name = "prefetch"
		}
		t.Run(name, func(t *testing.T) {
			m := redistest.StartMini(t)
			c := cfg()
			c.Min, c.Max = 5, 10
			l := newLeaser(t, m.Client(t), clock.System{}, c)
			e := l.NewTable(tokenBucket(t, 100, 100), nil).GetOrCreate("k")
			ctx := context.Background()
			if d, _, err := l.Lease(ctx, e, 1); err != nil || d.Granted == 0 {
				t.Fatalf("first lease: %+v, %v", d, err)
			}
			// The units held lapse, and are set aside to go back.
			units := e.Lapse(l.Now()+int64(c.TTL), keepAll).Aside
			if units == 0 {
				t.Fatal("nothing to set aside")
			}

			reached, hold := make(chan struct{}), make(chan struct{})
			leasesync.SetBeforeSend(l, func(*leasesync.Entry) { close(reached); <-hold })
			leased := make(chan error, 1)
			if prefetch {
				l.Prefetch(e)
			} else {
				go func() { _, _, err := l.Lease(ctx, e, 1); leased <- err }()
			}
			<-reached
			if e.Back() != 0 {
				t.Fatal("the lease did not take the units set aside along")
			}
			closed := make(chan struct{})
			go func() { l.Close(); close(closed) }()
			for !leasesync.Refusing(l) {
				runtime.Gosched()
			}
			select {
			case <-closed:
				t.Fatal("Close returned while a lease that holds units set aside was under way")
			case <-time.After(20 * time.Millisecond):
			}
			close(hold)
			<-closed
			if !prefetch {
				if err := <-leased; !errors.Is(err, door.ErrClosed) {
					t.Fatalf("the refused lease returned %v, want ErrClosed", err)
				}
			}
			s := l.Stats()
			want := uint64(units) // the request's lease, refused
			if prefetch {
				want = s.UnitsLeased - s.UnitsUsed // sent: its grant too
			}
			if s.UnitsRefunded != want || s.UnitsHeld != 0 || s.UnitsDropped != 0 {
				t.Fatalf("after Close: %d refunded, %d held, %d dropped; want %d refunded (the %d set aside among them), none held or dropped",
					s.UnitsRefunded, s.UnitsHeld, s.UnitsDropped, want, units)
			}
			if s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped {
				t.Fatalf("units do not add up after Close: leased %d, used %d + refunded %d + dropped %d", s.UnitsLeased, s.UnitsUsed, s.UnitsRefunded, s.UnitsDropped)
			}
		})
	}
}

// An entry evicted while its lease is in flight takes nothing when the
// grant lands: the units go back at once, as do those that lapsed and
// were set aside before (the eviction's refund). Nothing stays held in an
// entry no longer in the bound. Forced with a hook.
func TestGrantOfAnEvictedEntryGoesBack(t *testing.T) {
	m := redistest.StartMini(t)
	c := cfg()
	c.Min, c.Max, c.MaxKeys = 5, 10, 1
	l := newLeaser(t, m.Client(t), clock.System{}, c)
	p := tokenBucket(t, 100, 100)
	tb := l.NewTable(p, nil)
	e := tb.GetOrCreate("a")
	ctx := context.Background()
	if d, _, err := l.Lease(ctx, e, 1); err != nil || d.Granted == 0 {
		t.Fatalf("first lease: %+v, %v", d, err)
	}
	e.Lapse(l.Now()+int64(c.TTL), keepAll)

	reached, hold := make(chan struct{}), make(chan struct{})
	leasesync.SetBeforeSend(l, func(*leasesync.Entry) { close(reached); <-hold })
	l.Prefetch(e)
	<-reached
	leasesync.SetBeforeSend(l, nil)
	tb.GetOrCreate("b") // evicts a, whose lease is in flight
	if _, ok := tb.Get("a"); ok {
		t.Fatal("a was not evicted")
	}
	close(hold)
	for e.Leasing() != nil {
		runtime.Gosched()
	}
	if e.Units() != 0 || e.Back() != 0 {
		t.Fatalf("an evicted entry holds %d units and %d set aside", e.Units(), e.Back())
	}
	l.Close()
	s := l.Stats()
	if s.UnitsHeld != 0 || s.UnitsLeased != s.UnitsUsed+s.UnitsRefunded+s.UnitsDropped || s.UnitsUsed != 1 {
		t.Fatalf("after Close: leased %d, used %d (want 1), refunded %d, dropped %d, held %d: they must add up", s.UnitsLeased, s.UnitsUsed, s.UnitsRefunded, s.UnitsDropped, s.UnitsHeld)
	}
}

func keepAll(units, at int64) bool { return true }
