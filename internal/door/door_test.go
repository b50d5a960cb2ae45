package door_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func perHour(t *testing.T, n int64) *remote.Policy {
	t.Helper()
	p, err := remote.NewPolicy("p", []remote.Limit{{Algorithm: remote.TokenBucket, Rate: n, Period: time.Hour, Burst: n}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// closeDoor closes d within its timeout.
func closeDoor(d *door.Door) {
	ctx, cancel := d.Bound(context.Background())
	defer cancel()
	d.Close(ctx)
}

// The breaker's refusal says once that Redis is unavailable, and why, on
// one line; a classified error is not classified again.
func TestErrorsSayItOnce(t *testing.T) {
	cause := door.Classify(context.Background(), errors.New("connection refused"))
	if again := door.Classify(context.Background(), cause); again != cause {
		t.Fatalf("Classify twice: %q, want %q", again, cause)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: time.Second})
	defer closeDoor(d)
	p := perHour(t, 5)
	var last error
	for range 6 { // five failures open the breaker; the sixth is refused
		pass, err := d.Enter(p, "k")
		if err != nil {
			last = err
			break
		}
		d.Leave(pass, cause)
	}
	if last == nil || !errors.Is(last, door.ErrUnavailable) {
		t.Fatalf("refused by the open breaker: %v, want ErrUnavailable", last)
	}
	if msg := last.Error(); msg != "ratelease: redis unavailable: circuit breaker open after: connection refused" {
		t.Fatalf("refused by the open breaker: %q", msg)
	}
}

// lagging is a context whose deadline has passed while its timer has not
// yet marked it done.
type lagging struct{ context.Context }

func (lagging) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

func TestClassify(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	ioTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	late := lagging{live}
	later, cancelLater := context.WithTimeout(live, time.Hour)
	defer cancelLater()
	for _, c := range []struct {
		ctx      context.Context
		err      error
		want     error
		wrapsErr bool
	}{
		{live, nil, nil, false},
		{done, nil, nil, false},
		{live, door.ErrClosed, door.ErrClosed, false},
		{done, door.ErrClosed, door.ErrClosed, false},
		{done, boom, context.Canceled, false},
		{live, boom, door.ErrUnavailable, true},
		// A timeout at the caller's own deadline is the caller's, even
		// before its context's timer has fired; any other error, or a
		// timeout before that deadline (the Redis timeout's), is Redis's.
		{late, ioTimeout, context.DeadlineExceeded, false},
		{late, fmt.Errorf("dial: %w", context.DeadlineExceeded), context.DeadlineExceeded, false},
		{late, boom, door.ErrUnavailable, true},
		{later, ioTimeout, door.ErrUnavailable, false},
		{live, ioTimeout, door.ErrUnavailable, false},
	} {
		got := door.Classify(c.ctx, c.err)
		if !errors.Is(got, c.want) || c.wrapsErr != errors.Is(got, boom) || (c.want == nil) != (got == nil) {
			t.Errorf("Classify(%v, %v) = %v, want %v", c.ctx.Err(), c.err, got, c.want)
		}
		if (c.want == context.Canceled || c.want == context.DeadlineExceeded) && got != c.want {
			t.Errorf("Classify wrapped the caller's context error: %v", got)
		}
	}
}

// Bound adds the timeout to a context without a sooner deadline, and
// leaves one with a sooner deadline as it is.
func TestBound(t *testing.T) {
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: time.Minute})
	ctx, cancel := d.Bound(context.Background())
	defer cancel()
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Minute {
		t.Fatalf("Bound(Background): deadline %v, %v; want within a minute", dl, ok)
	}
	soon, cancelSoon := context.WithTimeout(context.Background(), time.Second)
	defer cancelSoon()
	if got, cancel := d.Bound(soon); got != soon {
		cancel()
		t.Fatal("Bound made a new context for one with a sooner deadline")
	}
}

// The breaker opens after five failures in a row, lets nothing through
// while open, probes after its backoff (doubling after a failed probe), and
// closes when a probe succeeds, telling the owner, who charges the outage.
// A probe its caller gave up on lets the next call probe at once.
func TestBreaker(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	var mu sync.Mutex
	var states []door.BreakerState
	recovered := make(chan string, 1)
	d := door.New(door.Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clk, Timeout: time.Second,
		Events: func(ev door.Event) {
			if ev.Kind == door.EventBreaker {
				mu.Lock()
				states = append(states, ev.Breaker)
				mu.Unlock()
			}
		},
		Recovered: func(node string) { recovered <- node }})
	defer closeDoor(d)
	p := perHour(t, 10)
	failed := fmt.Errorf("%w: test", door.ErrUnavailable)
	call := func(err error) error {
		t.Helper()
		pass, cause := d.Enter(p, "k")
		if cause != nil {
			return cause
		}
		if got := d.Leave(pass, err); got != nil && got != err {
			t.Fatalf("Leave(%v) = %v", err, got)
		}
		return nil
	}
	for i := 0; i < 5; i++ {
		if err := call(failed); err != nil {
			t.Fatalf("call %d refused: %v", i, err)
		}
	}
	if s, opens := d.Breakers(); s != door.BreakerOpen || opens != 1 || d.Ready(p, "k") {
		t.Fatalf("after 5 failures: %v, %d opens", s, opens)
	}
	if err := call(nil); !errors.Is(err, failed) {
		t.Fatalf("open breaker: %v, want the last failure as the cause", err)
	}
	clk.Advance(100 * time.Millisecond)
	if err := call(failed); err != nil { // the probe, failing
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond) // the backoff doubled: not yet
	if err := call(nil); err == nil {
		t.Fatal("probed before the doubled backoff")
	}
	clk.Advance(100 * time.Millisecond)
	pass, err := d.Enter(p, "k") // a probe whose caller's context ends
	if err != nil {
		t.Fatal(err)
	}
	d.Leave(pass, context.Canceled)
	if err := call(nil); err != nil { // probes at once, and succeeds
		t.Fatal(err)
	}
	if s, _ := d.Breakers(); s != door.BreakerClosed || !d.Ready(p, "k") {
		t.Fatalf("after a successful probe: %v", s)
	}
	if node := <-recovered; node != "" {
		t.Fatalf("recovered node %q, want \"\" (one server)", node)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []door.BreakerState{door.BreakerOpen, door.BreakerHalfOpen, door.BreakerOpen,
		door.BreakerHalfOpen, door.BreakerOpen, door.BreakerHalfOpen, door.BreakerClosed}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("observed %v, want %v", states, want)
	}
	// Every opening the observer heard is counted.
	if _, opens := d.Breakers(); opens != 3 {
		t.Fatalf("%d openings counted, the observer heard 3", opens)
	}
}

// Acquire, Refund, Charge and Batch are counted: single calls apart from
// pipelines, a round trip each, and the calls that failed.
func TestCounts(t *testing.T) {
	mr := redistest.StartMini(t)
	d := door.New(door.Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clock.NewManual(mr.Now()), Timeout: time.Second})
	defer closeDoor(d)
	p := perHour(t, 10)
	ctx := context.Background()
	dec, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 3, Max: 3})
	if err != nil || cause != nil || dec.Granted != 3 {
		t.Fatalf("Acquire: %+v, %v, %v", dec, cause, err)
	}
	d.Refund(p, "k", 3, dec.At)
	if n := d.Charge("", func(on func(*remote.Policy, string) bool) []remote.Request {
		if on != nil {
			t.Error("a test of the node without a cluster")
		}
		return []remote.Request{{Policy: p, Key: "k", Min: 1, Max: 4}}
	}); n != 4 {
		t.Fatalf("Charge granted %d, want 4", n)
	}
	var seen []bool // what Batch told of each round trip's end
	saw := func(answered bool) { seen = append(seen, answered) }
	ds, errs, gerrs := d.Batch(ctx, []remote.Request{{Policy: p, Key: "k", Min: 6, Max: 6}, {Policy: p, Key: "k", Min: 1, Max: 1}},
		[]remote.Grant{{Policy: p, Key: "k", Units: 4, At: dec.At}}, saw)
	if errs[0] != nil || errs[1] != nil || gerrs[0] != nil || ds[0].Granted != 6 || ds[1].Granted != 1 {
		t.Fatalf("Batch: %+v, %v, %v", ds, errs, gerrs)
	}
	if _, _, gerrs := d.Batch(ctx, nil, []remote.Grant{{Policy: p, Key: "k", Units: 1, At: dec.At}}, saw); gerrs[0] != nil {
		t.Fatalf("Batch of a refund alone: %v", gerrs[0])
	}
	mr.Close()
	if _, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1}); err != nil || !errors.Is(cause, door.ErrUnavailable) {
		t.Fatalf("Acquire with Redis gone: %v, %v; want a cause wrapping ErrUnavailable", cause, err)
	}
	_, errs, gerrs = d.Batch(ctx, []remote.Request{{Policy: p, Key: "k", Min: 1, Max: 1}}, []remote.Grant{{Policy: p, Key: "k", Units: 1, At: dec.At}}, saw)
	if errs[0] == nil || gerrs[0] == nil {
		t.Fatal("Batch with Redis gone did not fail")
	}
	if want := []bool{true, true, false}; !slices.Equal(seen, want) {
		t.Errorf("Batch's seen: told %v, want %v (answered, answered, Redis gone)", seen, want)
	}
	single, batched := d.Stats()
	if want := (door.Counts{RoundTrips: 4, Errors: 1}); single != want {
		t.Errorf("single calls: %+v, want %+v", single, want)
	}
	if want := (door.Counts{RoundTrips: 3, Errors: 2}); batched != want {
		t.Errorf("batched calls: %+v, want %+v", batched, want)
	}
}

// With Guard, a client that ignores deadlines cannot hold a call past the
// timeout, and what Redis grants the call afterwards goes back to it.
func TestLateGrantsAreRefunded(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1}) // deadlines ignored
	t.Cleanup(func() { _ = c.Close() })
	dc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = dc.Close() })
	direct := remote.NewStore(dc, "t")
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 50 * time.Millisecond, Guard: true})
	defer closeDoor(d)
	p := perHour(t, 100) // what a call takes stays taken unless refunded
	// Load the script: a late NOSCRIPT is retried with EVAL only while the
	// deadline lasts, and then nothing is granted.
	if _, err := direct.Acquire(context.Background(), remote.Request{Policy: p, Key: "warm", Min: 1, Max: 1}); err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(300 * time.Millisecond)
	start := time.Now()
	_, cause, err := d.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 10, Max: 10})
	if err != nil || !errors.Is(cause, door.ErrUnavailable) || !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a slow Redis: %v, %v; want a cause wrapping ErrUnavailable and the deadline", cause, err)
	}
	if took := time.Since(start); took > 250*time.Millisecond { // a bound: 300ms would mean no guard
		t.Fatalf("Acquire took %v with a 50ms timeout", took)
	}
	_, errs, _ := d.Batch(context.Background(), []remote.Request{{Policy: p, Key: "k", Min: 20, Max: 20}}, nil, nil)
	if !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("Batch on a slow Redis: %v, want DeadlineExceeded", errs[0])
	}
	proxy.SetDelay(0)
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		single, batched := d.Stats()
		if single.LateGranted == 10 && single.LateRefunded == 10 && batched.LateGranted == 20 && batched.LateRefunded == 20 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Stats %+v, %+v: want 10 and 20 units granted late, and refunded", single, batched)
		}
	}
	if dec, err := direct.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: 100, Max: 100}); err != nil || dec.Granted != 100 {
		t.Fatalf("after the late refunds: %+v, %v; want all 100 units", dec, err)
	}
}

// A breaker state is a word in JSON.
func TestBreakerStateJSON(t *testing.T) {
	for s, want := range map[door.BreakerState]string{door.BreakerClosed: `"closed"`, door.BreakerOpen: `"open"`, door.BreakerHalfOpen: `"half-open"`} {
		if b, err := json.Marshal(s); err != nil || string(b) != want {
			t.Errorf("json.Marshal(%v) = %s, %v; want %s", s, b, err, want)
		}
	}
}

// Overtime tells a context Bound ended by the Redis timeout (its parent
// lives on: a wait for a call on its way may go on under it) from every
// other end: the parent's deadline first, the parent cancelled, a context
// Bound did not make, one not ended, and any context of a guarded door
// (whose client may ignore deadlines, so that its calls may never end).
func TestOvertime(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called
	t.Cleanup(func() { _ = c.Close() })
	const timeout = 10 * time.Millisecond
	for _, guarded := range []bool{false, true} {
		d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout, Guard: guarded})
		overtime := func(ctx context.Context) (context.Context, bool) {
			<-ctx.Done()
			parent, _, ok := door.Overtime(ctx)
			return parent, ok
		}

		parent, cancelParent := context.WithCancel(context.Background())
		ctx, cancel := d.Bound(parent)
		if _, _, ok := door.Overtime(ctx); ok {
			t.Errorf("guarded %v: Overtime of a live context: ok", guarded)
		}
		want, _ := ctx.Deadline()
		got, ok := overtime(ctx)
		if ok == guarded || (ok && got != parent) {
			t.Errorf("guarded %v: Overtime past the timeout = %v, %v; want the parent, ok %v", guarded, got, ok, !guarded)
		}
		if _, dl, ok := door.Overtime(ctx); ok && !dl.Equal(want) {
			t.Errorf("guarded %v: Overtime's deadline %v, want the context's, %v", guarded, dl, want)
		}
		cancel()
		cancelParent()
		if _, ok := overtime(ctx); ok {
			t.Errorf("guarded %v: Overtime once the parent ended: ok", guarded)
		}

		short, cancelShort := context.WithTimeout(context.Background(), timeout/2)
		ctx, cancel = d.Bound(short)
		if _, ok := overtime(ctx); ok {
			t.Errorf("guarded %v: Overtime when the caller's deadline came first: ok", guarded)
		}
		cancel()
		cancelShort()

		mine, cancelMine := context.WithTimeout(context.Background(), timeout)
		if _, ok := overtime(mine); ok {
			t.Errorf("guarded %v: Overtime of a context the door did not bound: ok", guarded)
		}
		cancelMine()

		parent, cancelParent = context.WithCancel(context.Background())
		ctx, cancel = d.Bound(parent)
		cancelParent()
		if _, ok := overtime(ctx); ok {
			t.Errorf("guarded %v: Overtime of a cancelled parent: ok", guarded)
		}
		cancel()
		closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
		d.Close(closeCtx)
		cancelClose()
	}
}
