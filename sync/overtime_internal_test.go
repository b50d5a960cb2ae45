package sync

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// A wait that gives up checks for the call's end first: a select that
// finds the call ended and the caller's context ended together may pick
// either, and an answer that came must not be taken for none.
func TestWaitLateSeesAnEndThatCameWithItsLimit(t *testing.T) {
	m := redistest.StartMini(t)
	d := door.New(door.Config{Store: remote.NewStore(m.Client(t), "t"), Clock: clock.System{}, Timeout: time.Second})
	b := &batcher{door: d, base: time.Now()}
	done := make(chan struct{})
	close(done)
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	for range 64 { // a select picking at random would miss it about 32 times
		if !b.waitLate(done, parent, b.since(time.Now()), nil) {
			t.Fatal("waitLate reported no answer, though the call had ended")
		}
	}
}

// What is queued for a batcher that is not sending owes a look at once: a
// batcher (or a Cluster lane's new goroutine) that takes an eighth of the
// timeout or more to look (it waits for a CPU) shows that this process
// does not keep up, while it has not looked and for a timeout after.
// What is queued while it sends waits for that pipeline, which is
// Redis's time, not this process's.
func TestBatcherLateToLookIsLateness(t *testing.T) {
	m := redistest.StartMini(t)
	const timeout = time.Second
	d := door.New(door.Config{Store: remote.NewStore(m.Client(t), "t"), Clock: clock.System{}, Timeout: timeout})
	b := &batcher{door: d, base: time.Now().Add(-time.Hour), work: make(chan struct{}, 1), owner: &recorder{applied: map[*call][]int64{}}}
	now := b.since(time.Now())
	if b.lateAt(now, now) {
		t.Fatal("late before anything was queued")
	}

	b.mu.Lock()
	b.sending = true
	b.waiting()
	b.mu.Unlock()
	if b.queued.Load() != 0 {
		t.Fatal("what is queued behind a pipeline out owes no look")
	}

	b.mu.Lock()
	b.sending = false
	b.waiting()
	b.mu.Unlock()
	at := b.queued.Load()
	if at == 0 || b.lateAt(at, at+int64(timeout/8)-1) {
		t.Fatalf("queued at %d: not owed a look, or late before an eighth of the timeout", at)
	}
	if !b.lateAt(at, at+int64(timeout/8)) {
		t.Fatal("a look owed for an eighth of the timeout is not lateness")
	}
	b.queued.Store(b.since(time.Now()) - int64(timeout/4)) // it waited a quarter
	b.flush()
	now = b.since(time.Now())
	if b.queued.Load() != 0 || b.behind.Load() == 0 || !b.lateAt(now, now) {
		t.Fatal("a batcher that looked late is not marked behind")
	}
	if later := now + int64(timeout) + 1; b.lateAt(later, later) {
		t.Fatal("still late a timeout after the late look")
	}
	// A goroutine started to send (a Cluster lane's), not yet running.
	b.behind.Store(0)
	now = b.since(time.Now())
	b.spawned.Store(now - int64(timeout/8))
	if !b.lateAt(now, now) {
		t.Fatal("a goroutine started to send that has not run for an eighth of the timeout is not lateness")
	}
}

// A prefetch never waits for the batcher's lock (a hit below low water
// makes it): while the lock is held, it is posted by a goroutine of its
// own once the lock is free, and its lease lands and ends.
func TestPrefetchDoesNotWaitForTheBatchersLock(t *testing.T) {
	l, _ := internalLeaser(t, clock.System{}, time.Second)
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 100, Period: time.Second, Burst: 100}})
	if err != nil {
		t.Fatal(err)
	}
	e := l.NewTable(p, nil).GetOrCreate("k")
	l.batcher.mu.Lock()
	returned := make(chan struct{})
	go func() {
		l.Prefetch(e)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		l.batcher.mu.Unlock()
		t.Fatal("Prefetch waited for the batcher's lock")
	}
	if e.Leasing() == nil {
		l.batcher.mu.Unlock()
		t.Fatal("no lease in flight after the prefetch")
	}
	l.batcher.mu.Unlock()
	for end := time.Now().Add(5 * time.Second); e.Leasing() != nil || e.Units() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the prefetch posted later did not land: in flight %v, %d units", e.Leasing() != nil, e.Units())
		}
	}
}
