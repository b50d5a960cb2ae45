package door_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// recorder keeps the events a Door reports.
type recorder struct {
	mu     sync.Mutex
	events []door.Event
}

func (r *recorder) event(ev door.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// take returns the events so far, and forgets them.
func (r *recorder) take() []door.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.events
	r.events = nil
	return evs
}

// describe prints events as kind/state/cause, one per event.
func describe(evs []door.Event) string {
	s := ""
	for _, ev := range evs {
		cause := "-"
		if ev.Err != nil {
			cause = ev.Err.Error()
		}
		s += fmt.Sprintf("%v/%v/%s ", ev.Kind, ev.Breaker, cause)
	}
	return s
}

// The first failure of a run is reported with its cause, and so is each
// change of the breaker: its opening with the failure that opened it (the
// fifth of a run, then a failed probe's), its half-openings and its close
// without. A failure after a success starts a new run. The observer runs outside
// the breaker's lock: one that asks the breaker itself does not deadlock.
func TestEventsOfFailures(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	rec := &recorder{}
	p := perHour(t, 10)
	var d *door.Door
	d = door.New(door.Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clk, Timeout: time.Second,
		Events: func(ev door.Event) {
			// Under the breaker's lock, this would deadlock.
			if pass, err := d.Enter(p, "other"); err == nil {
				d.Leave(pass, context.Canceled)
			}
			d.Breakers()
			rec.event(ev)
		}})
	defer closeDoor(d)
	call := func(err error) {
		t.Helper()
		pass, cause := d.Enter(p, "k")
		if cause != nil {
			t.Fatalf("refused: %v", cause)
		}
		d.Leave(pass, err)
	}
	fail := func(what string) error { return fmt.Errorf("%w: %s", door.ErrUnavailable, what) }

	call(fail("READONLY You can't write against a read only replica."))
	call(nil)
	if got, want := describe(rec.take()), "first-failure/closed/ratelease: redis unavailable: READONLY You can't write against a read only replica. "; got != want {
		t.Fatalf("one failure, then a success: %q, want %q", got, want)
	}
	for i := range 5 {
		call(fail(fmt.Sprint("OOM ", i)))
	}
	clk.Advance(100 * time.Millisecond)
	call(fail("connection refused")) // the probe
	clk.Advance(200 * time.Millisecond)
	call(nil) // the next probe, which closes it
	want := "first-failure/closed/ratelease: redis unavailable: OOM 0 " +
		"breaker/open/ratelease: redis unavailable: OOM 4 " +
		"breaker/half-open/- " +
		"breaker/open/ratelease: redis unavailable: connection refused " +
		"breaker/half-open/- " +
		"breaker/closed/- "
	evs := rec.take()
	if got := describe(evs); got != want {
		t.Fatalf("a run of failures:\n%q\nwant\n%q", got, want)
	}
	for _, ev := range evs {
		if ev.Node != "" || ev.Err != nil && !errors.Is(ev.Err, door.ErrUnavailable) {
			t.Fatalf("%+v: want node \"\" and causes wrapping ErrUnavailable", ev)
		}
	}
}

// Under concurrent failures, successes and probes, observers are never
// called concurrently, hear every change in the order it happened (no two
// in a row alike, each a transition the breaker makes), and the last they
// hear is the breaker's state.
func TestEventsInOrder(t *testing.T) {
	mr := redistest.StartMini(t)
	clk := clock.NewManual(mr.Now())
	var inside atomic.Int32
	var mu sync.Mutex
	var states []door.BreakerState
	d := door.New(door.Config{Store: remote.NewStore(mr.Client(t), "t"), Clock: clk, Timeout: time.Second,
		Events: func(ev door.Event) {
			if inside.Add(1) != 1 {
				t.Error("observers called concurrently")
			}
			time.Sleep(10 * time.Microsecond) // widen the window for a reordering
			if ev.Kind == door.EventBreaker {
				mu.Lock()
				states = append(states, ev.Breaker)
				mu.Unlock()
			}
			inside.Add(-1)
		}})
	defer closeDoor(d)
	p := perHour(t, 10)
	failed := fmt.Errorf("%w: test", door.ErrUnavailable)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 400 {
				if g == 0 && i%20 == 0 {
					clk.Advance(time.Second) // lets a probe through
				}
				pass, cause := d.Enter(p, "k")
				if cause != nil {
					continue
				}
				var err error
				if (7*g+i)%11 != 0 { // mostly failures: runs of five open it
					err = failed
				}
				d.Leave(pass, err)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(states) < 3 {
		t.Fatalf("only %v heard: the test made too few changes", states)
	}
	next := map[door.BreakerState][]door.BreakerState{
		door.BreakerClosed:   {door.BreakerOpen},
		door.BreakerOpen:     {door.BreakerHalfOpen, door.BreakerClosed}, // closed: a call made before it opened succeeded
		door.BreakerHalfOpen: {door.BreakerOpen, door.BreakerClosed},
	}
	prev := door.BreakerClosed
	for i, s := range states {
		ok := false
		for _, n := range next[prev] {
			ok = ok || n == s
		}
		if !ok {
			t.Fatalf("change %d: %v after %v, in %v", i, s, prev, states)
		}
		prev = s
	}
	if now, _ := d.Breakers(); now != prev {
		t.Fatalf("the last change heard is %v, the breaker is %v", prev, now)
	}
}

// With Events, a server's maxmemory-policy is read once, after the first
// call that succeeds: an evicting one (allkeys-lru, or volatile-lru, which
// evicts limiter keys too: they carry TTLs) is a Warning wrapping
// ErrEvictionPolicy; noeviction, and a server that refuses CONFIG (an ACL
// without +config|get, or miniredis), say nothing, and the refusal is not
// counted as an error. Without Events, nothing is read.
func TestWarningOfEviction(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "limited", Password: "pw"})
	defer limited.Close()
	mini := redistest.StartMini(t)
	p := perHour(t, 10)
	// run makes three successful calls through a door to client, with
	// events observed or not, and returns what it heard and counted.
	run := func(client redis.UniversalClient, observe bool) ([]door.Event, door.Counts) {
		t.Helper()
		rec := &recorder{}
		cfg := door.Config{Store: remote.NewStore(client, "t"), Clock: clock.System{}, Timeout: 2 * time.Second}
		if observe {
			cfg.Events = rec.event
		}
		d := door.New(cfg)
		for range 3 {
			if _, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1}); cause != nil || err != nil {
				t.Fatal(cause, err)
			}
		}
		closeDoor(d) // waits for the reading
		single, _ := d.Stats()
		return rec.take(), single
	}
	if evs, n := run(admin, true); len(evs) != 0 || n.RoundTrips != 4 || n.Errors != 0 {
		t.Fatalf("noeviction: %q, %+v; want silence and 3 calls + 1 reading", describe(evs), n)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		evs, n := run(admin, true)
		want := "warning/closed/ratelease: redis may evict limiter keys: maxmemory-policy " + policy + " (use noeviction, or a Redis of its own) "
		if got := describe(evs); got != want || !errors.Is(evs[0].Err, door.ErrEvictionPolicy) || n.Errors != 0 {
			t.Fatalf("%s: %q, %+v; want %q", policy, got, n, want)
		}
	}
	if evs, n := run(admin, false); len(evs) != 0 || n.RoundTrips != 3 {
		t.Fatalf("without Events: %q, %+v; want no reading", describe(evs), n)
	}
	if evs, n := run(limited, true); len(evs) != 0 || n.RoundTrips != 4 || n.Errors != 0 {
		t.Fatalf("CONFIG refused by the ACL: %q, %+v; want silence, no error", describe(evs), n)
	}
	if evs, n := run(mini.Client(t), true); len(evs) != 0 || n.Errors != 0 {
		t.Fatalf("miniredis: %q, %+v; want silence, no error", describe(evs), n)
	}
}

// An EventKind is a word in JSON.
func TestEventKindJSON(t *testing.T) {
	b, err := json.Marshal([]door.EventKind{door.EventFirstFailure, door.EventBreaker, door.EventWarning, 0})
	if err != nil || string(b) != `["first-failure","breaker","warning","unknown"]` {
		t.Fatalf("%s, %v", b, err)
	}
}

// failFirstConfig fails the first CONFIG a client makes, without sending
// it, as a reading that timed out under load.
type failFirstConfig struct{ failed atomic.Bool }

func (*failFirstConfig) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstConfig) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "config") && h.failed.CompareAndSwap(false, true) {
			cmd.SetErr(context.DeadlineExceeded)
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (*failFirstConfig) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A reading of the eviction policy that fails is made again after a later
// call succeeds: the warning still comes.
func TestWarningOfEvictionAfterAFailedReading(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client(t).ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	h := &failFirstConfig{}
	c.AddHook(h)
	rec := &recorder{}
	d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: 2 * time.Second, Events: rec.event})
	p := perHour(t, 1000)
	var evs []door.Event
	for i := 0; i < 100 && len(evs) == 0; i++ {
		if _, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1}); cause != nil || err != nil {
			t.Fatal(cause, err)
		}
		time.Sleep(10 * time.Millisecond)
		evs = append(evs, rec.take()...)
	}
	closeDoor(d)
	evs = append(evs, rec.take()...)
	if !h.failed.Load() || len(evs) != 1 || !errors.Is(evs[0].Err, door.ErrEvictionPolicy) {
		t.Fatalf("first reading failed: %v; events %q; want one eviction warning", h.failed.Load(), describe(evs))
	}
}
