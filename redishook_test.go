package ratelease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

// hookKey marks contexts: the caller's ("caller"), and the one the hook
// returns ("hook").
type hookKey struct{}

// hookCall is what a recording hook saw of one round trip.
type hookCall struct {
	call    ratelease.RedisCall
	caller  any // hookKey's value in the context the hook was given
	out     ratelease.RedisOutcome
	ended   bool
	endings int
}

// hookRecorder records every round trip its hook is told of.
type hookRecorder struct {
	mu    sync.Mutex
	calls []*hookCall
}

func (r *hookRecorder) hook(ctx context.Context, c ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
	hc := &hookCall{call: c, caller: ctx.Value(hookKey{})}
	r.mu.Lock()
	r.calls = append(r.calls, hc)
	r.mu.Unlock()
	return context.WithValue(ctx, hookKey{}, "hook"), func(o ratelease.RedisOutcome) {
		r.mu.Lock()
		defer r.mu.Unlock()
		hc.out, hc.ended = o, true
		hc.endings++
	}
}

// snapshot returns copies of the calls recorded so far.
func (r *hookRecorder) snapshot() []hookCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]hookCall, len(r.calls))
	for i, c := range r.calls {
		out[i] = *c
	}
	return out
}

// ctxSpy is a go-redis hook that records hookKey's value in the context
// of each command and pipeline the client runs.
type ctxSpy struct {
	mu   sync.Mutex
	seen []any
}

func (s *ctxSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *ctxSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(ctx)
		return next(ctx, cmd)
	}
}

func (s *ctxSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.record(ctx)
		return next(ctx, cmds)
	}
}

func (s *ctxSpy) record(ctx context.Context) {
	s.mu.Lock()
	s.seen = append(s.seen, ctx.Value(hookKey{}))
	s.mu.Unlock()
}

// newHookEnv returns a Limiter on a fresh miniredis with a recording hook,
// a spy on its client, and opts. The client honours context deadlines
// (each call is made directly), unless guarded (each call is made on a
// goroutine of its own).
func newHookEnv(t *testing.T, guarded bool, opts ...ratelease.Option) (*env, *hookRecorder, *ctxSpy) {
	t.Helper()
	mr := redistest.StartMini(t)
	clk := clock.NewManual(t0)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: !guarded})
	spy := &ctxSpy{}
	client.AddHook(spy)
	t.Cleanup(func() { _ = client.Close() })
	rec := &hookRecorder{}
	l, err := ratelease.New(client, append([]ratelease.Option{ratelease.WithExact(), ratelease.WithClock(clk),
		ratelease.WithRedisTimeout(5 * time.Second), ratelease.WithRedisHook(rec.hook)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &env{mr: mr, clock: clk, l: l}, rec, spy
}

// In exact mode each decision, and each operator's call, is one round
// trip the hook is told of, with the caller's context, as it starts and
// ends: what it did, how many keys, what Redis granted, and a failure.
// The context the hook returns is the one the client runs the call with.
func TestRedisHookExact(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testRedisHookExact(t, false) })
	t.Run("guarded", func(t *testing.T) { testRedisHookExact(t, true) })
}

func testRedisHookExact(t *testing.T, guarded bool) {
	e, rec, spy := newHookEnv(t, guarded)
	l := e.l
	p := policy(t, "api", ratelease.PerSecond(2))
	ctx := context.WithValue(context.Background(), hookKey{}, "caller")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		_, err := l.Allow(ctx, p, "k")
		must(err)
	}
	_, err := l.Peek(ctx, p, "k")
	must(err)
	must(l.Refund(ctx, p, "k", 1))
	must(l.Reset(ctx, p, "k"))
	_, err = l.AllowAtMost(ctx, p, "k", 5)
	must(err)
	must(l.Block(ctx, p, "k", time.Minute))
	must(l.Unblock(ctx, p, "k"))
	must(l.Ping(ctx))

	type want struct {
		op      string
		keys    int
		granted int64
	}
	wants := []want{
		{"decide", 1, 1}, {"decide", 1, 1}, {"decide", 1, 0},
		{"peek", 1, 0}, {"refund", 1, 0}, {"reset", 1, 0},
		{"decide", 1, 2}, // AllowAtMost(5) on a fresh key of 2
		{"block", 1, 0}, {"unblock", 1, 0}, {"ping", 0, 0},
	}
	calls := rec.snapshot()
	if len(calls) != len(wants) {
		t.Fatalf("%d calls, want %d: %+v", len(calls), len(wants), calls)
	}
	for i, c := range calls {
		w := wants[i]
		if c.call != (ratelease.RedisCall{Op: w.op, Keys: w.keys}) || c.endings != 1 || c.caller != "caller" ||
			c.out != (ratelease.RedisOutcome{Granted: w.granted}) {
			t.Errorf("call %d: %+v, want %+v", i, c, w)
		}
	}
	// Stats counts the round trips of decisions and operators' calls, not
	// Ping's.
	if rt := l.Stats().RoundTrips; rt != uint64(len(wants)-1) {
		t.Errorf("RoundTrips %d, want one per hook call but Ping: %d", rt, len(wants)-1)
	}
	spy.mu.Lock()
	seen := slices.Clone(spy.seen)
	spy.mu.Unlock()
	// A script's first run may be EVALSHA then EVAL: more commands than
	// round trips, each made with the hook's context.
	if len(seen) < len(wants) {
		t.Fatalf("the client saw %d commands, want at least %d", len(seen), len(wants))
	}
	for i, v := range seen {
		if v != "hook" {
			t.Errorf("command %d made with context value %v, want the hook's", i, v)
		}
	}

	// A failed call: its error, wrapping ErrUnavailable, and Failed 1;
	// the failure mode decides.
	e.mr.SetError("ERR boom")
	r, err := l.Allow(ctx, p, "other")
	if err != nil || r.Source != ratelease.SourceFallback {
		t.Fatalf("during the failure: %+v, %v", r, err)
	}
	calls = rec.snapshot()
	last := calls[len(calls)-1]
	if len(calls) != len(wants)+1 || last.call.Op != "decide" || last.out.Failed != 1 || last.out.Granted != 0 ||
		!errors.Is(last.out.Err, ratelease.ErrUnavailable) || !strings.Contains(last.out.Err.Error(), "boom") {
		t.Fatalf("failed call: %d calls, last %+v (err %v)", len(calls), last, last.out.Err)
	}
}

// In lease mode the hook is told of lease pipelines (what they were
// granted adds up to UnitsLeased) and of the refunds of Close, never of a
// leased hit, and of as many round trips as Stats counts.
func TestRedisHookLease(t *testing.T) {
	e, rec, _ := newHookEnv(t, false, ratelease.WithLease(ratelease.LeaseConfig{Min: 5, Max: 5, TTL: time.Hour}))
	l := e.l
	p := policy(t, "api", ratelease.PerHour(100))
	ctx := context.Background()
	for i := range 3 {
		r, err := l.Allow(ctx, p, "k")
		if err != nil || !r.Allowed {
			t.Fatalf("request %d: %+v, %v", i, r, err)
		}
	}
	s := l.Stats()
	if s.Local == 0 {
		t.Fatalf("no leased hit: %+v", s)
	}
	calls := rec.snapshot()
	if len(calls) == 0 || calls[0].call != (ratelease.RedisCall{Op: "lease", Keys: 1}) || calls[0].out.Granted != 5 {
		t.Fatalf("first call %+v, want a lease of 1 key granted 5", calls)
	}
	var leased int64
	for i, c := range calls {
		if c.call.Op != "lease" || c.out.Err != nil || c.endings != 1 {
			t.Errorf("call %d: %+v, want a lease that succeeded", i, c)
		}
		leased += c.out.Granted
	}
	if uint64(leased) != s.UnitsLeased || uint64(len(calls)) != s.RoundTrips {
		t.Errorf("hook: %d calls granted %d; Stats: %d round trips, %d units leased", len(calls), leased, s.RoundTrips, s.UnitsLeased)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	s = l.Stats()
	calls = rec.snapshot()
	last := calls[len(calls)-1]
	if s.UnitsRefunded == 0 || last.call != (ratelease.RedisCall{Op: "refund", Keys: 1}) ||
		last.out != (ratelease.RedisOutcome{}) || last.endings != 1 || uint64(len(calls)) != s.RoundTrips {
		t.Fatalf("after Close: last call %+v, %d calls; Stats %+v", last, len(calls), s)
	}
}

// What FailLocal admitted during an outage is charged when Redis is back:
// one round trip the hook is told of, granted what was admitted.
func TestRedisHookCharge(t *testing.T) {
	e, rec, _ := newHookEnv(t, true)
	p := policy(t, "api", ratelease.PerHour(10))
	ctx := context.Background()
	e.mr.SetError("ERR down")
	for range 6 { // the breaker opens after 5 failed calls
		if r, err := e.l.Allow(ctx, p, "k"); err != nil || !r.Allowed || r.Source != ratelease.SourceFallback {
			t.Fatalf("during the outage: %+v, %v", r, err)
		}
	}
	if n := len(rec.snapshot()); n != 5 {
		t.Fatalf("%d calls during the outage, want 5 (then the breaker is open)", n)
	}
	e.mr.SetError("")
	e.advance(time.Second) // past the breaker's backoff
	if r, err := e.l.Allow(ctx, p, "other"); err != nil || r.Source != ratelease.SourceRemote {
		t.Fatalf("after the outage: %+v, %v", r, err)
	}
	var charge *hookCall
	for end := time.Now().Add(5 * time.Second); charge == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no charge: %+v", rec.snapshot())
		}
		for _, c := range rec.snapshot() {
			if c.call.Op == "charge" && c.ended {
				charge = &c
			}
		}
	}
	if charge.call.Keys != 1 || charge.out != (ratelease.RedisOutcome{Granted: 6}) {
		t.Fatalf("charge %+v, want 1 key granted 6", charge)
	}
}

// A hook that wants no outcome and returns a nil context is fine; a nil
// hook is an invalid option.
func TestRedisHookOption(t *testing.T) {
	var starts int
	e, _, _ := newHookEnv(t, false, ratelease.WithRedisHook(func(ctx context.Context, c ratelease.RedisCall) (context.Context, func(ratelease.RedisOutcome)) {
		starts++
		return nil, nil
	}))
	p := policy(t, "api", ratelease.PerSecond(2))
	if r, err := e.l.Allow(context.Background(), p, "k"); err != nil || !r.Allowed || r.Source != ratelease.SourceRemote {
		t.Fatalf("%+v, %v", r, err)
	}
	if starts != 1 {
		t.Fatalf("the last hook given was called %d times, want 1", starts)
	}
	mr := redistest.StartMini(t)
	if _, err := ratelease.New(mr.Client(t), ratelease.WithRedisHook(nil)); !errors.Is(err, ratelease.ErrInvalidOption) {
		t.Fatalf("nil hook: %v, want ErrInvalidOption", err)
	}
}
