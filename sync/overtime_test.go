package sync_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
	leasesync "github.com/ratelease/ratelease/sync"
)

// lateReader is a go-redis hook that, while on, holds every reply it has
// read for late before its caller sees it: the answer came from Redis in
// time, and its reader waits for a CPU in this process (every P busy with
// goroutines that do not block), as the goroutine the network wakes does
// in a saturated process.
type lateReader struct {
	on   atomic.Bool
	late time.Duration
}

func (h *lateReader) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateReader) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.on.Load() {
			time.Sleep(h.late)
		}
		return err
	}
}

func (h *lateReader) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.on.Load() {
			time.Sleep(h.late)
		}
		return err
	}
}

var _ redis.Hook = (*lateReader)(nil)

// A lease whose answer Redis sent in time, but which reaches its caller
// past the Redis timeout because this process was short of CPU, is used:
// the caller waits past the door's timeout for the call on its way (which
// its own deadline bounds) rather than taking Redis for busy. Both ways a
// caller waits for a lease are covered: its own lease (the batcher), and
// another's in flight. A deadline of the caller's own stands; and when
// Redis does not answer in time, the caller gets the call's error once the
// call's own timeout ends it, not later; a call queued behind another
// pipeline, sent after the caller's wait began, is not waited for in a
// process that keeps up. (The cases that need a process that keeps up run
// first: a late answer marks this one as not keeping up for a timeout.)
func TestLeaseAnsweredLateInThisProcess(t *testing.T) {
	const timeout = 100 * time.Millisecond
	hook := &lateReader{late: 3 * timeout}
	proxy := redistest.NewProxy(t, redistest.Start(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	c.AddHook(hook)
	t.Cleanup(func() { _ = c.Close() })
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout})
	l := newLeaserThrough(t, d, clock.System{}, cfg())
	p := tokenBucket(t, 1_000_000, 1_000_000)
	tab := l.NewTable(p, nil)

	// warmed returns the entry of key after a first lease (a cold one:
	// one exact decision) and the taking of what it held, so that its
	// next lease is the batcher's.
	warmed := func(key string) *leasesync.Entry {
		e := tab.GetOrCreate(key)
		if _, _, err := l.Lease(context.Background(), e, 1); err != nil {
			t.Fatal(err)
		}
		for e.Units() > 0 {
			e.Take(e.Units(), l.Now())
		}
		return e
	}
	bound := func() (context.Context, context.CancelFunc) { return d.Bound(context.Background()) }
	// inFlight starts a lease of e with no deadline of its own, counted in
	// wg, and returns once it is in flight.
	inFlight := func(wg *stdsync.WaitGroup, e *leasesync.Entry) {
		wg.Go(func() {
			if _, _, err := l.Lease(context.Background(), e, 1); err != nil {
				t.Error(err)
			}
		})
		for e.Leasing() == nil {
			time.Sleep(time.Millisecond)
		}
	}

	// A lease queued behind another pipeline (the batcher sends one at a
	// time) goes out later than its caller's deadline allows for: its
	// caller does not wait for it past its own timeout, on a Redis that
	// does not answer. (Waiting would keep it until the queued call's own
	// deadline, up to a timeout later.)
	t.Run("queued behind another", func(t *testing.T) {
		first, second := warmed("ahead"), warmed("behind")
		proxy.SetDelay(5 * timeout)
		defer proxy.SetDelay(0)
		var wg stdsync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			ctx, cancel := bound()
			defer cancel()
			_, _, _ = l.Lease(ctx, first, 1)
		})
		for first.Leasing() == nil {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(timeout / 5) // its pipeline is out
		ctx, cancel := bound()
		defer cancel()
		start := time.Now()
		_, _, err := l.Lease(ctx, second, 1)
		took := time.Since(start)
		if err == nil {
			t.Fatal("Lease of a Redis that does not answer: no error")
		}
		// Its own call ends 4/5 of a timeout after its deadline; the
		// bound allows an eighth, and a quarter more for this machine.
		if limit := timeout + timeout/8 + timeout/4; took > limit {
			t.Fatalf("a lease queued behind another took %v on a Redis that does not answer: waited for a call sent after its wait began (want at most %v)", took, limit)
		}
	})

	t.Run("not answered", func(t *testing.T) {
		e := warmed("slow")
		proxy.SetDelay(5 * timeout)
		defer proxy.SetDelay(0)
		ctx, cancel := bound()
		defer cancel()
		start := time.Now()
		_, _, err := l.Lease(ctx, e, 1)
		took := time.Since(start)
		var ne net.Error
		if err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("Lease of a Redis that does not answer in time: %v, want a timeout", err)
		}
		if took > 3*timeout {
			t.Fatalf("Lease of a Redis that does not answer in time took %v, want about the timeout %v", took, timeout)
		}
	})

	// A request whose Redis timeout ran out before its lease was even
	// queued, because its goroutine ran half a timeout late, was not
	// answered late by Redis: Redis was not asked. Its lease gets a
	// timeout of its own. One whose timeout ran out just now, in a process
	// that keeps up, does not: it spent its timeout waiting (on Redis, as
	// far as it can tell). (A deadline of the caller's own stands: see
	// "caller's deadline".)
	t.Run("timeout spent before asking", func(t *testing.T) {
		e := warmed("early")
		ctx, cancel := bound()
		defer cancel()
		<-ctx.Done()
		if _, _, err := l.Lease(ctx, e, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lease with its timeout spent just now: %v, want DeadlineExceeded", err)
		}
		if e.Leasing() != nil {
			t.Fatal("a lease not sent is still in flight")
		}
		ctx, cancel = bound()
		defer cancel()
		<-ctx.Done()
		time.Sleep(timeout / 2) // this goroutine runs half a timeout late
		dd, taken, err := l.Lease(ctx, e, 1)
		if err != nil || (dd.Granted < 1 && !taken) {
			t.Fatalf("Lease whose goroutine ran half a timeout late: granted %d taken %v, err %v; want its units", dd.Granted, taken, err)
		}
	})

	t.Run("own lease", func(t *testing.T) {
		e := warmed("own")
		hook.on.Store(true)
		defer hook.on.Store(false)
		ctx, cancel := bound()
		defer cancel()
		start := time.Now()
		dd, taken, err := l.Lease(ctx, e, 1)
		took := time.Since(start)
		if err != nil || (dd.Granted < 1 && !taken) {
			t.Fatalf("Lease answered late: granted %d taken %v, err %v after %v; want its units", dd.Granted, taken, err, took)
		}
		if took < timeout {
			t.Fatalf("Lease took %v, under the timeout %v: the late answer was not late", took, timeout)
		}
	})

	t.Run("in flight", func(t *testing.T) {
		e := warmed("inflight")
		hook.on.Store(true)
		defer hook.on.Store(false)
		var wg stdsync.WaitGroup
		defer wg.Wait()
		inFlight(&wg, e)
		ctx, cancel := bound()
		defer cancel()
		dd, taken, err := l.Lease(ctx, e, 1)
		if err != nil || (dd.Granted < 1 && !taken) {
			t.Fatalf("a wait for a lease answered late: granted %d taken %v, err %v; want its units", dd.Granted, taken, err)
		}
	})

	// A process short of CPU for longer than the cap (four timeouts past
	// the deadline): the reader of the answer runs only then, and the
	// pipeline it reads stays out past its deadline meanwhile. The wait
	// goes on for as long as the process shows it is late, both ways.
	t.Run("late past the cap", func(t *testing.T) {
		hook.late = 7 * timeout
		defer func() { hook.late = 3 * timeout }()
		for _, another := range []bool{false, true} {
			e := warmed(fmt.Sprint("past the cap ", another))
			hook.on.Store(true)
			var wg stdsync.WaitGroup
			if another {
				inFlight(&wg, e)
			}
			ctx, cancel := bound()
			dd, taken, err := l.Lease(ctx, e, 1)
			cancel()
			wg.Wait()
			hook.on.Store(false)
			if err != nil || (dd.Granted < 1 && !taken) {
				t.Fatalf("in flight %v: a lease answered %v late: granted %d taken %v, err %v; want its units", another, hook.late, dd.Granted, taken, err)
			}
		}
	})

	// A request that waits for a lease in flight whose goroutine has not
	// handed it to the batcher by the request's deadline (it waits for a
	// CPU, held here by a hook): Redis was not asked, and the request
	// waits for the lease rather than take Redis for busy.
	t.Run("in flight not sent", func(t *testing.T) {
		e := warmed("unsent")
		started := make(chan struct{})
		leasesync.SetBeforeSend(l, func(*leasesync.Entry) {
			close(started)
			time.Sleep(3 * timeout)
		})
		var wg stdsync.WaitGroup
		wg.Go(func() {
			if _, _, err := l.Lease(context.Background(), e, 1); err != nil {
				t.Error(err)
			}
		})
		<-started
		leasesync.SetBeforeSend(l, nil)
		ctx, cancel := bound()
		dd, taken, err := l.Lease(ctx, e, 1)
		cancel()
		wg.Wait()
		if err != nil || (dd.Granted < 1 && !taken) {
			t.Fatalf("a wait for a lease in flight not yet sent: granted %d taken %v, err %v; want its units", dd.Granted, taken, err)
		}
	})

	t.Run("caller's deadline", func(t *testing.T) {
		e := warmed("deadline")
		hook.on.Store(true)
		defer hook.on.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), timeout/2)
		defer cancel()
		start := time.Now()
		_, _, err := l.Lease(ctx, e, 1)
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > timeout {
			t.Fatalf("Lease with a deadline of %v sooner than the timeout: %v after %v, want DeadlineExceeded by then", timeout/2, err, took)
		}
		// The call goes on, and its grant lands in the entry.
		for end := time.Now().Add(5 * time.Second); e.Units() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the grant of a lease whose caller left did not land in its entry")
			}
		}
	})
}

// A hook of the user's that is slow to hear of a round trip's end does not
// make this process look late: the batcher reads the answer's time as the
// round trip ends, before the hook hears of it. (Were it read after, a
// keeping-up process would wait, for a timeout, as one that is late does.)
func TestSlowHookIsNotLateness(t *testing.T) {
	const timeout = 200 * time.Millisecond
	var slow atomic.Bool
	hook := func(ctx context.Context, op door.RedisOp, keys int) (context.Context, func(door.RedisOutcome)) {
		return ctx, func(door.RedisOutcome) {
			if slow.Load() {
				time.Sleep(3 * timeout)
			}
		}
	}
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout, Hook: hook})
	l := newLeaserThrough(t, d, clock.System{}, cfg())
	tab := l.NewTable(tokenBucket(t, 1_000_000, 1_000_000), nil)
	e := tab.GetOrCreate("k")
	if _, _, err := l.Lease(context.Background(), e, 1); err != nil { // a cold lease: the combiner's
		t.Fatal(err)
	}
	for e.Units() > 0 {
		e.Take(e.Units(), l.Now())
	}
	slow.Store(true)
	if _, _, err := l.Lease(context.Background(), e, 1); err != nil { // the batcher's
		t.Fatal(err)
	}
	slow.Store(false)
	if leasesync.LateNow(l) {
		t.Fatal("a hook slow to hear of an answer made this process look late")
	}
}
