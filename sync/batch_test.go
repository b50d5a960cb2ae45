package sync

import (
	"context"
	"errors"
	stdsync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// recorder is an owner that records what the batcher hands back.
type recorder struct {
	mu       stdsync.Mutex
	applied  map[*call][]int64 // the n of each apply of the call
	leases   int
	refunded int64
}

func (r *recorder) apply(c *call, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied[c] = append(r.applied[c], n)
}

func (r *recorder) countLease(remote.Request, remote.Decision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases++
}

func (r *recorder) countRefund(units int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.refunded += units
	}
}

func (r *recorder) returning(int64) {}
func (r *recorder) sending(*Entry)  {}
func (r *recorder) ended(*call)     {}

// appliedTo returns the n of each apply of c so far.
func (r *recorder) appliedTo(c *call) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.applied[c]...)
}

// The batcher completes every call through its owner, exactly once: on the
// requester's goroutine with its n, or, when the requester left, on its
// own with 0. Close's half: calls are refused once closing, refunds are
// still taken, and close returns only when the calls in flight are applied
// and everything queued is sent.
func TestBatcherCompletesCallsThroughOwner(t *testing.T) {
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 5 * time.Second})
	t.Cleanup(func() {
		ctx, cancel := d.Bound(context.Background())
		defer cancel()
		d.Close(ctx)
	})
	rec := &recorder{applied: map[*call][]int64{}}
	b := newBatcher(d, rec)
	p, err := remote.NewPolicy("b", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: time.Hour, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	newCall := func(key string) *call {
		return &call{req: remote.Request{Policy: p, Key: key, Min: 1, Max: 10, Member: "m", Demand: 1, Horizon: time.Second}}
	}

	waited := newCall("waited")
	got, err := b.lease(context.Background(), waited, 3)
	if err != nil || got.Granted != 10 {
		t.Fatalf("lease: %+v, %v; want 10 units", got, err)
	}
	if ns := rec.appliedTo(waited); len(ns) != 1 || ns[0] != 3 {
		t.Fatalf("waited call applied with %v, want once with the caller's 3", ns)
	}
	if b.roundTrip() <= 0 {
		t.Fatalf("round trip %v after a lease, want it measured", b.roundTrip())
	}

	proxy.SetDelay(200 * time.Millisecond)
	left := newCall("left")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = b.lease(ctx, left, 3)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lease past its context: %v, want DeadlineExceeded", err)
	}
	if ns := rec.appliedTo(left); len(ns) != 0 {
		t.Fatalf("abandoned call applied with %v before its answer", ns)
	}

	// A call in flight when Close begins: close returns once it is applied,
	// and once the refund queued after closing is sent.
	inFlight := newCall("inflight")
	res := make(chan error, 1)
	go func() {
		_, err := b.lease(context.Background(), inFlight, 1)
		res <- err
	}()
	// Queued: it waits there while the pipeline of the call that was left
	// is out, or has gone out since.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		queued, done := len(b.calls) > 0, inFlight.done // (made as it is queued)
		b.mu.Unlock()
		if queued || (done != nil && chanClosed(done)) || time.Now().After(end) {
			break
		}
	}
	b.closing(context.Background())
	if _, err := b.lease(context.Background(), newCall("late"), 1); !errors.Is(err, door.ErrClosed) {
		t.Fatalf("lease once closing: %v, want door.ErrClosed", err)
	}
	b.queueBack(remote.Grant{Policy: p, Key: "waited", Units: 7, At: got.At})
	b.close()
	// Applied before close returns (its requester's goroutine applies it).
	if ns := rec.appliedTo(inFlight); len(ns) != 1 || ns[0] != 1 {
		t.Fatalf("call in flight at Close applied with %v when close returned, want once with 1", ns)
	}
	if err := <-res; err != nil {
		t.Fatalf("lease in flight at Close: %v", err)
	}
	if ns := rec.appliedTo(left); len(ns) != 1 || ns[0] != 0 {
		t.Fatalf("abandoned call applied with %v, want once by the batcher, with 0", ns)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.leases != 3 || rec.refunded != 7 || len(rec.applied) != 3 {
		t.Fatalf("counted %d leases and %d units refunded, applied %d calls; want 3, 7, 3",
			rec.leases, rec.refunded, len(rec.applied))
	}
}

func chanClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A pipeline that Redis did not answer (its deadline came first, or its
// dial failed) says nothing of Redis's latency: the measured round trip,
// which sizes leases, keeps to the pipelines Redis answered. (Folding in a
// deadline would size the first leases after an outage for it.)
func TestRoundTripOfAnsweredPipelinesOnly(t *testing.T) {
	const timeout = 50 * time.Millisecond
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout})
	t.Cleanup(func() {
		ctx, cancel := d.Bound(context.Background())
		defer cancel()
		d.Close(ctx)
	})
	b := newBatcher(d, &recorder{applied: map[*call][]int64{}})
	defer func() {
		b.closing(context.Background())
		b.close()
	}()
	p, err := remote.NewPolicy("b", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: time.Hour, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	lease := func() error {
		_, err := b.lease(context.Background(), &call{req: remote.Request{Policy: p, Key: "k", Min: 1, Max: 1, Member: "m", Demand: 1, Horizon: time.Second}}, 1)
		return err
	}
	if err := lease(); err != nil {
		t.Fatal(err)
	}
	measured := b.roundTrip()
	if measured <= 0 {
		t.Fatalf("round trip %v after a lease Redis answered, want it measured", measured)
	}
	proxy.SetDelay(10 * timeout)
	for range 3 {
		if err := lease(); err == nil {
			t.Fatal("a lease of a Redis that does not answer in time succeeded")
		}
	}
	if got := b.roundTrip(); got != measured {
		t.Fatalf("round trip %v after pipelines Redis did not answer, want %v, as measured before them", got, measured)
	}
	proxy.SetDelay(0)
}
