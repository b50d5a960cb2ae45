package door_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// slowDoor is a Door to a real Redis through a proxy that delays its
// replies (once delay is set), its hook counting the decisions of each
// RedisDecide round trip, and a Store straight to the server to check what
// Redis holds.
type slowDoor struct {
	d      *door.Door
	proxy  *redistest.Proxy
	direct *remote.Store
	p      *remote.Policy
	// trips and decided: RedisDecide round trips, and the decisions in them.
	trips, decided atomic.Int64
}

func newSlowDoor(t *testing.T) *slowDoor {
	t.Helper()
	srv := redistest.Start(t)
	s := &slowDoor{proxy: redistest.NewProxy(t, srv.Addr)}
	c := redis.NewClient(&redis.Options{Addr: s.proxy.Addr, ContextTimeoutEnabled: true, PoolSize: 64, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	dc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = dc.Close() })
	s.direct = remote.NewStore(dc, "t")
	s.d = door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 5 * time.Second,
		Hook: func(ctx context.Context, op door.RedisOp, keys int) (context.Context, func(door.RedisOutcome)) {
			if op == door.RedisDecide {
				s.trips.Add(1)
				s.decided.Add(int64(keys))
			}
			return ctx, nil
		}})
	t.Cleanup(func() { closeDoor(s.d) })
	// A day's 1000 units: what is taken stays taken while the test runs.
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: 1000, Period: 24 * time.Hour, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	s.p = p
	if _, cause, err := s.d.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || cause != nil {
		t.Fatalf("first decision: %v, %v", cause, err)
	}
	return s
}

// left checks that Redis has exactly want units left for key k.
func (s *slowDoor) left(t *testing.T, want int64) {
	t.Helper()
	ctx := context.Background()
	if dec, err := s.direct.Acquire(ctx, remote.Request{Policy: s.p, Key: "k", Min: want, Max: want}); err != nil || dec.Granted != want {
		t.Fatalf("taking the %d units that should be left: %+v, %v", want, dec, err)
	}
	if dec, err := s.direct.Acquire(ctx, remote.Request{Policy: s.p, Key: "k", Min: 1, Max: 1}); err != nil || dec.Granted != 0 {
		t.Fatalf("a unit beyond the %d that should be left: %+v, %v", want, dec, err)
	}
}

// Decisions that come while the Door's share of calls is on its way wait
// and go together, each decided once, and every caller gets its own.
func TestDecisionsGoTogether(t *testing.T) {
	s := newSlowDoor(t)
	s.proxy.SetDelay(100 * time.Millisecond)
	n := 3 * s.d.InFlight()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dec, cause, err := s.d.Acquire(context.Background(), remote.Request{Policy: s.p, Key: "k", Min: 1, Max: 1})
			switch {
			case err != nil || cause != nil:
				errs <- errors.Join(cause, err)
			case dec.Granted != 1:
				errs <- errors.New("not granted")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	trips, decided := s.trips.Load(), s.decided.Load()
	t.Logf("%d decisions in %d round trips", decided, trips)
	if decided != int64(n)+1 {
		t.Errorf("the hook saw %d decisions, want %d", decided, n+1)
	}
	if trips >= decided {
		t.Errorf("%d round trips for %d decisions: none went together", trips, decided)
	}
	single, batched := s.d.Stats()
	if single.RoundTrips+batched.RoundTrips != uint64(trips) || batched.RoundTrips == 0 {
		t.Errorf("Stats: %+v single, %+v batched; want %d round trips, some batched", single, batched, trips)
	}
	s.proxy.SetDelay(0)
	s.left(t, 1000-int64(n)-1)
}

// A caller that stops waiting takes only itself out: left out of the
// pipeline when it leaves before it is sent, its grant refunded when it
// leaves after; the callers beside it are answered.
func TestQueuedCallerLeaves(t *testing.T) {
	s := newSlowDoor(t)
	const delay = 400 * time.Millisecond
	s.proxy.SetDelay(delay)
	k := s.d.InFlight()
	ctx := context.Background()
	var wg sync.WaitGroup
	acquire := func(ctx context.Context) (remote.Decision, error) {
		dec, cause, err := s.d.Acquire(ctx, remote.Request{Policy: s.p, Key: "k", Min: 1, Max: 1})
		return dec, errors.Join(cause, err)
	}
	for range k { // on their way: the rest waits
		wg.Add(1)
		go func() {
			defer wg.Done()
			if dec, err := acquire(ctx); err != nil || dec.Granted != 1 {
				t.Errorf("a call on its way: %+v, %v", dec, err)
			}
		}()
	}
	for s.trips.Load() < int64(k)+1 {
		time.Sleep(time.Millisecond)
	}
	// Leaves before its pipeline is sent.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := acquire(cctx); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, door.ErrUnavailable) {
			t.Errorf("a caller whose context ends while it waits: %v, want its context's error", err)
		}
		if took := time.Since(start); took >= delay {
			t.Errorf("it returned after %v, not at its deadline", took)
		}
	}()
	// Waits, and is answered.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if dec, err := acquire(ctx); err != nil || dec.Granted != 1 {
			t.Errorf("a caller that waits: %+v, %v", dec, err)
		}
	}()
	// Leaves while its pipeline is on its way (or, on a slow machine,
	// before it is sent).
	wg.Add(1)
	go func() {
		defer wg.Done()
		cctx, cancel := context.WithTimeout(ctx, delay+delay/2)
		defer cancel()
		if _, err := acquire(cctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a caller whose context ends on the way: %v, want its context's error", err)
		}
	}()
	wg.Wait()
	s.proxy.SetDelay(0)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, batched := s.d.Stats()
		if batched.LateGranted == batched.LateRefunded {
			t.Logf("granted late and refunded: %d", batched.LateGranted)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("batched %+v: a late grant not refunded", batched)
		}
	}
	// The first decision, those on their way, and the one that waited.
	s.left(t, 1000-int64(k)-2)
}

// Many callers at once, each asking for a number of units of its own,
// some leaving while they wait or while their call is on its way, again
// and again (a waiting caller's record is used again once it has its
// answer): each answered caller gets its own decision, a caller's own
// deadline reads as its context's error, never as Redis failing, and Redis
// holds the units answered, plus at most those of callers that left while
// their own call (not a pipeline, whose late grants are refunded) was on
// its way: Redis may have decided it, its reply cut off.
func TestCombinerUnderChurn(t *testing.T) {
	s := newSlowDoor(t)
	s.proxy.SetDelay(2 * time.Millisecond)
	callers, rounds := 4*s.d.InFlight(), 12
	if most := int64(callers * rounds * 3); most > 999 {
		t.Fatalf("%d callers × %d rounds may take %d units, more than the 999 left", callers, rounds, most)
	}
	var granted, answered, left, uncertain atomic.Int64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := int64(1 + i%3)
			for j := range rounds {
				// Every third call has a deadline that may end it while it
				// waits or while it is on its way.
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if j%3 == i%3 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(1+(i+j)%6)*time.Millisecond)
				}
				dec, cause, err := s.d.Acquire(ctx, remote.Request{Policy: s.p, Key: "k", Min: want, Max: want})
				cancel()
				switch {
				case err == nil && cause == nil:
					if dec.Granted != want {
						t.Errorf("caller %d asked for %d units, got a decision of %d", i, want, dec.Granted)
					}
					granted.Add(dec.Granted)
					answered.Add(1)
				case cause == nil && errors.Is(err, context.DeadlineExceeded):
					left.Add(1)
					uncertain.Add(want)
				default:
					t.Errorf("caller %d: %v, %v", i, cause, err)
				}
			}
		}()
	}
	wg.Wait()
	s.proxy.SetDelay(0)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, b := s.d.Stats(); b.LateGranted == b.LateRefunded {
			break
		}
		if time.Now().After(end) {
			t.Fatal("a late grant not refunded")
		}
	}
	t.Logf("%d answered (%d units), %d left before their answer, %d round trips for %d decisions",
		answered.Load(), granted.Load(), left.Load(), s.trips.Load(), s.decided.Load())
	if left.Load() == 0 || s.trips.Load() >= s.decided.Load() {
		t.Errorf("no caller left, or no decisions went together: the test did not churn")
	}
	most := 999 - granted.Load()
	rest, err := s.direct.Acquire(context.Background(), remote.Request{Policy: s.p, Key: "k", Min: 1, Max: most + 1})
	if err != nil || rest.Granted > most || rest.Granted < most-uncertain.Load() {
		t.Fatalf("Redis had %d units left (%v), want %d less at most %d of callers that left", rest.Granted, err, most, uncertain.Load())
	}
}

// A decision waiting in the combiner grants the units of the requests of
// its owner that join it, in one call; a decision with no owner, another
// owner's, a request of another size and a join past the key's capacity
// are not joined, and a decision answered is joined by none.
func TestJoinWaitingDecision(t *testing.T) {
	s := newSlowDoor(t)
	ctx := context.Background()
	other := func(key string) remote.Request { return remote.Request{Policy: s.p, Key: key, Min: 1, Max: 1} }
	if s.d.Join(s, s.p, "k", 1) {
		t.Fatal("joined with nothing waiting")
	}
	s.proxy.SetDelay(200 * time.Millisecond)
	var wg sync.WaitGroup
	for range s.d.InFlight() { // every call in flight: the next wait
		wg.Go(func() { _, _ = s.d.Decide(ctx, other("busy"), nil) })
	}
	time.Sleep(50 * time.Millisecond)
	grants := make(chan int64, 2)
	wg.Go(func() {
		dec, err := s.d.Decide(ctx, remote.Request{Policy: s.p, Key: "k", Min: 2, Max: 2}, s)
		if err != nil {
			t.Error(err)
		}
		grants <- dec.Granted
	})
	wg.Go(func() {
		dec, err := s.d.Decide(ctx, remote.Request{Policy: s.p, Key: "k2", Min: 1, Max: 1}, nil)
		if err != nil {
			t.Error(err)
		}
		grants <- dec.Granted
	})
	time.Sleep(50 * time.Millisecond) // both wait
	switch {
	case s.d.Join(s, s.p, "k", 1):
		t.Error("a request of 1 joined a decision of 2")
	case s.d.Join(s, s.p, "k2", 1):
		t.Error("joined a decision that is not joinable")
	case s.d.Join(t, s.p, "k", 2):
		t.Error("joined another owner's decision")
	case !s.d.Join(s, s.p, "k", 2), !s.d.Join(s, s.p, "k", 2):
		t.Error("two requests of 2 could not join a joinable decision of 2")
	case s.d.Join(s, s.p, "k", 1000):
		t.Error("joined past the key's capacity")
	}
	wg.Wait()
	close(grants)
	var got []int64
	for g := range grants {
		got = append(got, g)
	}
	if got[0]+got[1] != 7 || (got[0] != 6 && got[1] != 6) {
		t.Errorf("granted %v, want 6 to the joined decision and 1 to the other", got)
	}
	if s.d.Join(s, s.p, "k", 2) {
		t.Error("joined a decision already answered")
	}
}
