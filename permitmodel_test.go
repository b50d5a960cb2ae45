package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

// The permits' model test: several Limiters, leasing and exact, on one
// miniredis whose time the test moves, driven by a seeded random sequence
// of AcquirePermit, WaitPermit, Release, Extend (on another goroutine,
// against a Release, an acquire or a Close), Close and reopen, and faults
// (a reply lost, a call slowed by 50-500ms, the key deleted, an
// instance's clock jumping ahead), checked against a reference model of
// the permits each holder believes it holds:
//
//   - never more live permits than the limit, each live on its holder's
//     clock from the start of the call that granted or extended it;
//   - a live permit is never reported lost to its holder (Release or
//     Extend): no other holder can have been given its slot;
//   - once every permit still known is released and all is quiet for a
//     TTL (and 300ms of the sweepers' linger), Redis holds no permit and
//     no slot, but those of a leasing instance closed while a permit never
//     released was live (a crash), which go within 1.5 TTLs;
//   - then a WaitPermit succeeds on every open instance within 1.5 TTLs,
//     its calls still slowed if they were.
//
// A key deleted (Redis lost it) voids what was held then: the permits
// live at that moment, and those a leasing instance grants within a
// second after it (from slots it leased before), are left out of the
// count. RATELEASE_PERMIT_SEED=n runs seed n alone; RATELEASE_PERMIT_SEEDS
// sets how many seeds run (default 8). A failing sequence is shrunk (a
// prefix, then each op left out in turn) and printed with its seed.
func TestPermitsModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if n, err := strconv.Atoi(os.Getenv("RATELEASE_PERMIT_SEEDS")); err == nil && n > 0 {
		seeds = seeds[:0]
		for i := 1; i <= n; i++ {
			seeds = append(seeds, uint64(i))
		}
	}
	if s, err := strconv.ParseUint(os.Getenv("RATELEASE_PERMIT_SEED"), 10, 64); err == nil {
		seeds = []uint64{s}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ops := modelOps(seed, 150)
			err := runModel(t, seed, ops)
			if err == nil {
				return
			}
			small, serr := shrinkModel(t, seed, ops, err)
			var b strings.Builder
			for i, o := range small {
				fmt.Fprintf(&b, "\n  %3d %v", i, o)
			}
			t.Fatalf("seed %d (RATELEASE_PERMIT_SEED=%d): %v\nshrunk to %d ops: %v%s", seed, seed, err, len(small), serr, b.String())
		})
	}
}

// modelOp is one step of a model run: what, on which instance, with
// what draws, then how long the clocks move.
type modelOp struct {
	kind    string
	inst    int
	a, b    int
	advance time.Duration
}

func (o modelOp) String() string {
	return fmt.Sprintf("%-8s inst %d a=%d b=%d, then +%v", o.kind, o.inst, o.a, o.b, o.advance)
}

const (
	modelTTL       = time.Second
	modelInstances = 3
)

// modelOps draws n ops from seed.
func modelOps(seed uint64, n int) []modelOp {
	rng := rand.New(rand.NewPCG(seed, 38))
	kinds := []struct {
		kind   string
		weight int
	}{{"acquire", 30}, {"release", 20}, {"extend", 12}, {"wait", 5}, {"close", 3},
		{"lose", 6}, {"slow", 6}, {"delkey", 1}, {"jump", 3}, {"forget", 3}, {"idle", 11}}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	ops := make([]modelOp, n)
	for i := range ops {
		r := rng.IntN(total)
		var kind string
		for _, k := range kinds {
			if r < k.weight {
				kind = k.kind
				break
			}
			r -= k.weight
		}
		ops[i] = modelOp{kind: kind, inst: rng.IntN(modelInstances), a: rng.IntN(1000), b: rng.IntN(1000),
			advance: time.Duration(rng.IntN(16)) * 10 * time.Millisecond}
	}
	return ops
}

// shrinkModel looks for a shorter sequence that fails too: the prefix up
// to the failing op, then each op left out in turn (a bounded number of
// runs).
func shrinkModel(t *testing.T, seed uint64, ops []modelOp, err error) ([]modelOp, error) {
	var step *modelStepError
	if errors.As(err, &step) && step.step+1 < len(ops) {
		if e := runModel(t, seed, ops[:step.step+1]); e != nil {
			ops, err = ops[:step.step+1], e
		}
	}
	runs := 0
	for i := len(ops) - 2; i >= 0 && runs < 60; i-- {
		cand := slices.Delete(slices.Clone(ops), i, i+1)
		runs++
		if e := runModel(t, seed, cand); e != nil {
			ops, err = cand, e
		}
	}
	return ops, err
}

// modelStepError is a model run's failure at one step.
type modelStepError struct {
	step int
	err  error
}

func (e *modelStepError) Error() string { return fmt.Sprintf("step %d: %v", e.step, e.err) }

// modelFaults is a go-redis hook on one instance's client: its permit
// calls are slowed (the clocks move while each is in flight), or the
// next one's reply is lost (the call runs, then reports a timeout).
type modelFaults struct {
	slow  atomic.Int64
	lose  atomic.Bool
	world *modelWorld
}

func (h *modelFaults) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *modelFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		permit := false
		for _, a := range cmd.Args() {
			switch a {
			case "acquire", "release", "extend", "lease":
				permit = true
			}
		}
		if !permit {
			return next(ctx, cmd)
		}
		if d := h.slow.Load(); d > 0 {
			h.world.advance(time.Duration(d))
		}
		err := next(ctx, cmd)
		if err == nil && h.lose.CompareAndSwap(true, false) {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}
func (h *modelFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// modelWorld is a model run's Redis, instances and clocks: each
// instance's clock is Redis's plus its jumps (a clock that ran ahead).
type modelWorld struct {
	mu     sync.Mutex // the clocks move together
	mr     *redistest.Mini
	clks   [modelInstances]*clock.Manual
	offs   [modelInstances]time.Duration
	insts  [modelInstances]*modelInst
	limit  int
	c      *ratelease.Concurrency
	exact  [modelInstances]bool
	faults [modelInstances]*modelFaults
}

type modelInst struct {
	l      *ratelease.Limiter
	client *redis.Client
	closed bool
}

func (w *modelWorld) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mr.Advance(d)
	for i, c := range w.clks {
		c.Set(w.mr.Now().Add(w.offs[i]))
	}
}

func (w *modelWorld) jump(i int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.offs[i] += d
	w.clks[i].Set(w.mr.Now().Add(w.offs[i]))
}

func (w *modelWorld) now(i int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.clks[i].Now()
}

func (w *modelWorld) open(t *testing.T, i int) error {
	client := w.mr.Client(t)
	client.AddHook(w.faults[i])
	opts := []ratelease.Option{ratelease.WithClock(w.clks[i]), ratelease.WithRedisTimeout(2 * time.Second), ratelease.WithFailureMode(ratelease.FailClosed)}
	if w.exact[i] {
		opts = append(opts, ratelease.WithExact())
	}
	l, err := ratelease.New(client, opts...)
	if err != nil {
		return err
	}
	w.insts[i] = &modelInst{l: l, client: client}
	return nil
}

// modelPermit is a permit as its holder sees it.
type modelPermit struct {
	p        *ratelease.Permit
	l        *ratelease.Limiter // that granted it
	inst     int
	deadline time.Time // on inst's clock
	orphan   bool      // the key was deleted while it was held, or it came from slots leased before
}

func (w *modelWorld) live(p *modelPermit) bool { return w.now(p.inst).Before(p.deadline) }

// runModel runs ops from a fresh world; the error names the step that
// broke the model.
func runModel(t *testing.T, seed uint64, ops []modelOp) error {
	mr := redistest.StartMini(t)
	defer mr.Close()
	w := &modelWorld{mr: mr}
	rng := rand.New(rand.NewPCG(seed, 83))
	w.limit = 1 + rng.IntN(3)
	w.c = concurrency(t, "model", w.limit, modelTTL)
	for i := range w.insts {
		w.clks[i] = clock.NewManual(mr.Now())
		w.faults[i] = &modelFaults{world: w}
	}
	// Both modes, always: instance 0 leases, 1 is exact, 2 either.
	w.exact = [modelInstances]bool{false, true, rng.IntN(2) == 0}
	for i := range w.insts {
		if err := w.open(t, i); err != nil {
			return err
		}
	}
	defer func() {
		for _, in := range w.insts {
			_ = in.l.Close()
			_ = in.client.Close()
		}
	}()
	var held, forgotten []*modelPermit
	crashed := false // a leasing instance closed while a forgotten permit of its was live: its slots stay 1.5 TTLs
	closeInst := func(i int) {
		in := w.insts[i]
		if in.closed {
			return
		}
		for _, mp := range forgotten {
			crashed = crashed || mp.inst == i && !w.exact[i] && w.live(mp)
		}
		_ = in.l.Close()
		in.closed = true
	}
	var voidUntil time.Time // on Redis's clock: grants of leasing instances until then are orphans
	ctx := context.Background()
	acquired := func(i int, p *ratelease.Permit, start time.Time) {
		mp := &modelPermit{p: p, l: w.insts[i].l, inst: i, deadline: start.Add(modelTTL)}
		w.mu.Lock()
		mp.orphan = !w.exact[i] && w.mr.Now().Before(voidUntil)
		w.mu.Unlock()
		held = append(held, mp)
	}
	pick := func(o modelOp) (*modelPermit, int) {
		if len(held) == 0 {
			return nil, -1
		}
		j := o.a % len(held)
		return held[j], j
	}
	// released checks a Release's outcome against the model.
	released := func(mp *modelPermit, wasLive bool, err error) error {
		if errors.Is(err, ratelease.ErrPermitLost) && wasLive && !mp.orphan {
			return fmt.Errorf("Release of a live permit (instance %d, %v left): %v", mp.inst, mp.deadline.Sub(w.now(mp.inst)), err)
		}
		return nil
	}
	for step, o := range ops {
		in := w.insts[o.inst]
		fail := func(err error) error { return &modelStepError{step, fmt.Errorf("%v: %w", o, err)} }
		switch o.kind {
		case "acquire":
			if in.closed {
				break
			}
			start := w.now(o.inst)
			p, _, err := in.l.AcquirePermit(ctx, w.c, "k")
			if p != nil {
				acquired(o.inst, p, start)
			} else if err != nil && !errors.Is(err, ratelease.ErrUnavailable) {
				return fail(err)
			}
		case "release":
			mp, j := pick(o)
			if mp == nil {
				break
			}
			held = slices.Delete(held, j, j+1)
			err := mp.p.Release(ctx)
			// Live until the call's end (a slow call may outlast it).
			if err := released(mp, w.live(mp), err); err != nil {
				return fail(err)
			}
		case "forget": // a holder that crashed: held until its TTL ends
			if mp, j := pick(o); j >= 0 {
				held = slices.Delete(held, j, j+1)
				forgotten = append(forgotten, mp)
				// Of an instance closed already: nothing there frees its slot.
				in := w.insts[mp.inst]
				crashed = crashed || (in.closed || mp.l != in.l) && !w.exact[mp.inst] && w.live(mp)
			}
		case "extend":
			mp, j := pick(o)
			if mp == nil {
				break
			}
			ttl := time.Duration(100+o.b%900) * time.Millisecond
			start := w.now(mp.inst)
			var extErr error
			done := make(chan struct{})
			go func() { extErr = mp.p.Extend(ctx, ttl); close(done) }()
			var relErr error
			other := o.b % 3
			switch other {
			case 0: // the worker releases while its heartbeat extends
				held = slices.Delete(held, j, j+1)
				relErr = mp.p.Release(ctx)
			case 1: // another acquire on its instance
				if in := w.insts[mp.inst]; !in.closed {
					start := w.now(mp.inst)
					if p, _, _ := in.l.AcquirePermit(ctx, w.c, "k"); p != nil {
						acquired(mp.inst, p, start)
					}
				}
			case 2: // its instance closes
				closeInst(mp.inst)
			}
			<-done
			wasLive := w.live(mp) // until both calls ended, on its first deadline
			if other == 0 {
				// Either order is right, but a live permit is never lost.
				if errors.Is(relErr, ratelease.ErrPermitLost) && errors.Is(extErr, ratelease.ErrPermitLost) && wasLive && !mp.orphan {
					return fail(fmt.Errorf("Extend and Release of a live permit both found it lost"))
				}
				break
			}
			switch {
			case extErr == nil:
				mp.deadline = start.Add(ttl)
			case errors.Is(extErr, ratelease.ErrPermitLost) && wasLive && !mp.orphan:
				return fail(fmt.Errorf("Extend of a live permit (instance %d, %v left): %v", mp.inst, mp.deadline.Sub(start), extErr))
			}
		case "wait":
			if in.closed {
				break
			}
			if p, start, _ := w.waitPermit(in.l, o.inst, 50); p != nil {
				acquired(o.inst, p, start)
			}
		case "close": // closes an open instance, or opens a closed one again
			if !in.closed {
				closeInst(o.inst)
				break
			}
			_ = in.client.Close()
			if err := w.open(t, o.inst); err != nil {
				return fail(err)
			}
		case "lose":
			w.faults[o.inst].lose.Store(true)
		case "slow": // every call of the instance from now on, or none again
			d := time.Duration(50+o.b%450) * time.Millisecond
			if w.faults[o.inst].slow.Load() > 0 {
				d = 0
			}
			w.faults[o.inst].slow.Store(int64(d))
		case "delkey":
			w.mu.Lock()
			w.mr.Del("ratelease:{model:k}:permits")
			voidUntil = w.mr.Now().Add(time.Second)
			w.mu.Unlock()
			for _, mp := range held {
				mp.orphan = true
			}
			for _, mp := range forgotten {
				mp.orphan = true
			}
		case "jump":
			w.jump(o.inst, time.Duration(o.b)*time.Millisecond)
		}
		w.advance(o.advance)
		n := 0
		for _, mp := range append(held, forgotten...) {
			if !mp.orphan && w.live(mp) {
				n++
			}
		}
		if n > w.limit {
			return fail(fmt.Errorf("%d live permits, past the limit %d", n, w.limit))
		}
	}
	// Quiet: every permit still known is released; then, 1.5 TTLs on,
	// Redis holds nothing: no permit, no slot.
	for _, f := range w.faults {
		f.lose.Store(false) // a lost reply ends a WaitPermit with its error; slow calls stay
	}
	var quietRel []string
	for _, mp := range held {
		err := mp.p.Release(ctx)
		quietRel = append(quietRel, fmt.Sprintf("inst %d closed %v: %v", mp.inst, w.insts[mp.inst].closed || mp.l != w.insts[mp.inst].l, err))
		if err := released(mp, w.live(mp), err); err != nil {
			return &modelStepError{len(ops), err}
		}
	}
	// Quiet for a TTL (and the sweepers' linger), every permit has ended
	// and every slot gone back, but those of a leasing instance closed
	// with a live permit never released (a crash): 1.5 TTLs for those.
	quiet := func(d time.Duration) []string {
		for i := 0; i < int(d/(20*time.Millisecond)); i++ {
			w.advance(20 * time.Millisecond)
			time.Sleep(time.Millisecond) // the sweepers run on their own goroutines
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		nowUS := float64(w.mr.Now().UnixMicro())
		set, _ := w.mr.SortedSet("ratelease:{model:k}:permits")
		var left []string
		for m, score := range set {
			if score > nowUS {
				left = append(left, m)
			}
		}
		return left
	}
	left := quiet(modelTTL + 300*time.Millisecond)
	if len(left) > 0 && !crashed {
		var state []string
		for i, in := range w.insts {
			state = append(state, fmt.Sprintf("%d: exact %v, closed %v, slow %v, %+v", i, w.exact[i], in.closed, time.Duration(w.faults[i].slow.Load()), in.l.Stats().Breaker))
		}
		return &modelStepError{len(ops), fmt.Errorf("quiet for a TTL, Redis still holds %v (instances: %s; releases at quiet: %v)", left, strings.Join(state, "; "), quietRel)}
	}
	if left = quiet(modelTTL / 2); len(left) > 0 {
		return &modelStepError{len(ops), fmt.Errorf("quiet for 1.5 TTLs, Redis still holds %v", left)}
	}
	// Then a permit is free for each open instance in turn: WaitPermit
	// gets it within 1.5 TTLs.
	for i, in := range w.insts {
		if in.closed {
			continue
		}
		p, _, err := w.waitPermit(in.l, i, int(modelTTL*3/2/(10*time.Millisecond)))
		if p == nil {
			return &modelStepError{len(ops), fmt.Errorf("instance %d: WaitPermit got nothing in 1.5 TTLs with every permit free (slow calls: %v): %v", i, time.Duration(w.faults[i].slow.Load()), err)}
		}
		if err := p.Release(ctx); err != nil {
			return &modelStepError{len(ops), fmt.Errorf("instance %d: Release: %v", i, err)}
		}
	}
	return nil
}

// waitPermit runs a WaitPermit on instance i while the clocks move 10ms
// a tick, for up to ticks ticks; it returns the permit (nil if none came),
// the time the wait began, on i's clock, and WaitPermit's error.
func (w *modelWorld) waitPermit(l *ratelease.Limiter, i, ticks int) (*ratelease.Permit, time.Time, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type got struct {
		p     *ratelease.Permit
		start time.Time
		err   error
	}
	ch := make(chan got, 1)
	go func() {
		// The wait's start: a permit's TTL counts from the attempt that
		// granted it, no sooner.
		start := w.now(i)
		p, err := l.WaitPermit(ctx, w.c, "k")
		ch <- got{p, start, err}
	}()
	for range ticks {
		select {
		case g := <-ch:
			return g.p, g.start, g.err
		case <-time.After(time.Millisecond):
		}
		w.advance(10 * time.Millisecond)
	}
	cancel()
	g := <-ch
	return g.p, g.start, g.err
}
