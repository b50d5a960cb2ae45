package ratelease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

func concurrency(t *testing.T, name string, limit int, ttl time.Duration) *ratelease.Concurrency {
	t.Helper()
	c, err := ratelease.NewConcurrency(name, limit, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// At most Limit permits of a key are held at once; a release frees one at
// once, a TTL that ends frees it too, and a permit past its TTL is lost to
// its holder.
func TestPermitsPerKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := concurrency(t, "exports", 2, time.Second)
	a, res, err := e.l.AcquirePermit(ctx, c, "tenant")
	if err != nil || a == nil || !res.Allowed || res.Granted != 1 || res.Remaining != 1 || res.Source != ratelease.SourceRemote {
		t.Fatalf("first: %v, %+v, %v", a, res, err)
	}
	e.advance(200 * time.Millisecond)
	b, res, _ := e.l.AcquirePermit(ctx, c, "tenant")
	if b == nil || res.Remaining != 0 {
		t.Fatalf("second: %+v", res)
	}
	p, res, err := e.l.AcquirePermit(ctx, c, "tenant")
	// Denied until a's TTL ends, 800ms on.
	if p != nil || err != nil || res.Allowed || res.RetryAfter != 800*time.Millisecond {
		t.Fatalf("third: %v, %+v, %v; want denied, retry after 800ms", p, res, err)
	}
	if p, _, _ := e.l.AcquirePermit(ctx, c, "other"); p == nil {
		t.Fatal("another key shares the permits")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); !errors.Is(err, ratelease.ErrPermitLost) {
		t.Fatalf("a second Release: %v, want ErrPermitLost", err)
	}
	cp, _, _ := e.l.AcquirePermit(ctx, c, "tenant")
	if cp == nil {
		t.Fatal("no permit after a release")
	}
	// b's TTL ends (a holder that crashed), 1s after its acquire at 200ms:
	// its permit comes back, and b has lost it.
	e.advance(time.Second)
	if p, _, _ := e.l.AcquirePermit(ctx, c, "tenant"); p == nil {
		t.Fatal("no permit after one's TTL ended")
	}
	if err := b.Extend(ctx, time.Second); !errors.Is(err, ratelease.ErrPermitLost) {
		t.Fatalf("Extend past the TTL: %v, want ErrPermitLost", err)
	}
	if err := b.Release(ctx); !errors.Is(err, ratelease.ErrPermitLost) {
		t.Fatalf("Release past the TTL: %v, want ErrPermitLost", err)
	}
}

// Extend keeps a permit held past its first TTL.
func TestPermitExtend(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := concurrency(t, "long", 1, time.Second)
	p, _, _ := e.l.AcquirePermit(ctx, c, "k")
	e.advance(900 * time.Millisecond)
	if err := p.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	e.advance(900 * time.Millisecond)
	if q, res, _ := e.l.AcquirePermit(ctx, c, "k"); q != nil || res.RetryAfter != 100*time.Millisecond {
		t.Fatalf("while the extended permit is held: %v, %+v", q, res)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release after Extend: %v", err)
	}
	if err := p.Extend(ctx, 0); !errors.Is(err, ratelease.ErrInvalidDuration) {
		t.Fatalf("Extend(0): %v, want ErrInvalidDuration", err)
	}
}

// WaitPermit waits for a release, ends with its context, and with Close.
func TestWaitPermit(t *testing.T) {
	mr := redistest.StartMini(t)
	l, err := ratelease.New(mr.Client(t), ratelease.WithExact(), ratelease.WithRedisTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c := concurrency(t, "w", 1, time.Hour)
	ctx := context.Background()
	held, err := l.WaitPermit(ctx, c, "k")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		_ = held.Release(ctx)
	}()
	next, err := l.WaitPermit(ctx, c, "k")
	if err != nil || next == nil {
		t.Fatalf("WaitPermit for a release: %v, %v", next, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.WaitPermit(short, c, "k"); err != context.DeadlineExceeded {
		t.Fatalf("WaitPermit past its deadline: %v, want context.DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.WaitPermit(ctx, c, "k"); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = l.Close()
	if err := <-done; !errors.Is(err, ratelease.ErrClosed) {
		t.Fatalf("WaitPermit at Close: %v, want ErrClosed", err)
	}
}

// While Redis is down each failure mode decides: FailClosed an error,
// FailOpen a permit, FailLocal this instance's share of the limit.
func TestPermitFailureModes(t *testing.T) {
	for _, lease := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease=%v", lease), func(t *testing.T) { permitFailureModes(t, lease) })
	}
}

func permitFailureModes(t *testing.T, lease bool) {
	ctx := context.Background()
	c := concurrency(t, "f", 4, time.Second)
	for _, m := range []struct {
		mode    ratelease.FailureMode
		granted int // of 5 tries
	}{{ratelease.FailClosed, 0}, {ratelease.FailOpen, 5}, {ratelease.FailLocal, 2}} {
		t.Run(m.mode.String(), func(t *testing.T) {
			opts := []ratelease.Option{ratelease.WithFailureMode(m.mode), ratelease.WithInstances(2), ratelease.WithRedisTimeout(200 * time.Millisecond)}
			if lease {
				opts = append(opts, ratelease.WithLease(ratelease.LeaseConfig{}))
			}
			e := newEnv(t, opts...)
			e.mr.Close()
			var held []*ratelease.Permit
			for i := 0; i < 5; i++ {
				p, res, err := e.l.AcquirePermit(ctx, c, "k")
				switch {
				case m.mode == ratelease.FailClosed:
					if !errors.Is(err, ratelease.ErrUnavailable) {
						t.Fatalf("try %d: %v, want ErrUnavailable", i, err)
					}
				case err != nil || res.Source != ratelease.SourceFallback:
					t.Fatalf("try %d: %+v, %v", i, res, err)
				case p != nil:
					held = append(held, p)
				}
			}
			if len(held) != m.granted {
				t.Fatalf("%d permits with Redis down, want %d", len(held), m.granted)
			}
			if len(held) > 0 {
				if err := held[0].Release(ctx); err != nil {
					t.Fatal(err)
				}
				if p, _, _ := e.l.AcquirePermit(ctx, c, "k"); p == nil {
					t.Fatal("no fallback permit after a release")
				}
			}
		})
	}
}

// Bad input is refused, by name.
func TestPermitBadInput(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int
		ttl   time.Duration
		want  error
	}{
		{"", 1, time.Second, ratelease.ErrInvalidPolicy},
		{"a:b", 1, time.Second, ratelease.ErrInvalidPolicy},
		{"x", 0, time.Second, ratelease.ErrInvalidLimit},
		{"x", 1, 0, ratelease.ErrInvalidDuration},
		{"x", 1, 24*time.Hour + 1, ratelease.ErrInvalidDuration},
	} {
		if _, err := ratelease.NewConcurrency(c.name, c.limit, c.ttl); !errors.Is(err, c.want) {
			t.Errorf("NewConcurrency(%q, %d, %v): %v, want %v", c.name, c.limit, c.ttl, err, c.want)
		}
	}
	e := newEnv(t)
	ctx := context.Background()
	if _, _, err := e.l.AcquirePermit(ctx, nil, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Errorf("nil Concurrency: %v", err)
	}
	if _, _, err := e.l.AcquirePermit(ctx, &ratelease.Concurrency{}, "k"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
		t.Errorf("zero Concurrency: %v", err)
	}
	if _, _, err := e.l.AcquirePermit(ctx, concurrency(t, "x", 1, time.Second), ""); !errors.Is(err, ratelease.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
}

// permitWorkerEnv, when set (to a Redis address), makes
// TestPermitsAcrossProcesses a worker process: it acquires, holds and
// releases permits until its deadline, printing each permit's interval
// on Redis's clock.
const permitWorkerEnv = "RATELEASE_PERMIT_WORKER"

// permitTest is the limit the processes share: 3 permits, a TTL of 600ms.
const (
	permitLimit = 3
	permitTTL   = 600 * time.Millisecond
)

// Four processes share a limit of 3 permits, one of them killed (SIGKILL)
// while it holds some; in exact mode, and in lease mode (the processes
// lease slots of the key). At no instant of Redis's clock are more than
// 3 held: each worker's permits, from just after its acquire to just
// before its release, and the killed one's until their TTL ends, never
// overlap more than 3 deep. And the killed one's permits are back within
// their TTL (exact mode) or its slots' expiry, 1.5 TTLs after its last
// call (lease mode): then all 3 can be acquired.
func TestPermitsAcrossProcesses(t *testing.T) {
	if addr := os.Getenv(permitWorkerEnv); addr != "" {
		permitWorker(t, addr, os.Getenv(permitWorkerEnv+"_MODE") == "lease")
		return
	}
	for _, mode := range []string{"exact", "lease"} {
		t.Run(mode, func(t *testing.T) { permitsAcrossProcesses(t, mode) })
	}
}

func permitsAcrossProcesses(t *testing.T, mode string) {
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	type worker struct {
		cmd   *exec.Cmd
		mu    sync.Mutex
		lines []string
		done  chan struct{}
	}
	workers := make([]*worker, 4)
	spawn := func(i int) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPermitsAcrossProcesses$", "-test.count=1")
		// The first, to be killed, holds its permit 2s.
		cmd.Env = append(os.Environ(), permitWorkerEnv+"="+srv.Addr, permitWorkerEnv+"_MODE="+mode,
			fmt.Sprintf("%s_HOLD=%d", permitWorkerEnv, map[bool]int{true: 2000, false: 0}[i == 0]))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w := &worker{cmd: cmd, done: make(chan struct{})}
		go func() {
			defer close(w.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				w.mu.Lock()
				w.lines = append(w.lines, sc.Text())
				w.mu.Unlock()
			}
		}()
		workers[i] = w
	}
	// The first starts alone (the others, which re-acquire as soon as they
	// release, could leave it none of a limit held first come, first
	// served, as exact mode's is); once it holds a permit the others
	// start, and once one of them holds one too, the first is killed.
	holding := func(ws []*worker, what string) {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s held no permit within 5s", what)
			}
			for _, w := range ws {
				w.mu.Lock()
				n := held(w.lines)
				w.mu.Unlock()
				if n > 0 {
					return
				}
			}
		}
	}
	spawn(0)
	holding(workers[:1], "the first worker")
	for i := 1; i < len(workers); i++ {
		spawn(i)
	}
	holding(workers[1:], "the other workers")
	var killedAt int64
	_ = workers[0].cmd.Process.Signal(syscall.SIGKILL)
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killedAt = now.UnixMicro()
	for _, w := range workers {
		<-w.done
		_ = w.cmd.Wait()
	}
	// Intervals: [after acquire, before release]; the killed worker's
	// open ones until after acquire + TTL - 50ms (its acquire came before
	// it printed).
	type event struct {
		at    int64
		delta int
	}
	var events []event
	openKilled := 0
	for i, w := range workers {
		open := map[string]int64{}
		for _, l := range w.lines {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			at, _ := strconv.ParseInt(f[2], 10, 64)
			switch f[0] {
			case "A":
				open[f[1]] = at
			case "R":
				if a, ok := open[f[1]]; ok && at > a {
					events = append(events, event{a, 1}, event{at, -1})
				}
				delete(open, f[1])
			}
		}
		if i == 0 {
			for _, a := range open {
				events = append(events, event{a, 1}, event{a + permitTTL.Microseconds() - 50_000, -1})
				openKilled++
			}
		}
	}
	sort.Slice(events, func(i, j int) bool {
		return events[i].at < events[j].at || events[i].at == events[j].at && events[i].delta < events[j].delta
	})
	depth, most := 0, 0
	for _, e := range events {
		depth += e.delta
		most = max(most, depth)
	}
	if most > permitLimit || len(events) < 20 {
		t.Fatalf("%d permit intervals, at most %d held at once; want at most %d", len(events)/2, most, permitLimit)
	}
	t.Logf("%d permit intervals, at most %d at once; the killed worker held %d", len(events)/2, most, openKilled)
	if openKilled == 0 {
		t.Fatal("the killed worker held no permit when it died")
	}
	// Within the TTL of the kill (a leased slot's 1.5 TTLs), its permits
	// are back.
	l, err := ratelease.New(rc, ratelease.WithExact())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := concurrency(t, "procs", permitLimit, permitTTL)
	back := permitTTL
	if mode == "lease" {
		back += permitTTL / 2
	}
	time.Sleep(time.Until(time.UnixMicro(killedAt).Add(back + 50*time.Millisecond)))
	for i := 0; i < permitLimit; i++ {
		if p, res, err := l.AcquirePermit(context.Background(), c, "k"); p == nil {
			t.Fatalf("permit %d a TTL after the kill: %+v, %v", i, res, err)
		}
	}
}

// held counts the permits a worker's lines say it holds.
func held(lines []string) int {
	n := 0
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "A "):
			n++
		case strings.HasPrefix(l, "R "):
			n--
		}
	}
	return n
}

// permitWorker acquires, holds for 5 to 25ms (or the _HOLD ms its
// environment says) and releases permits for 600ms, printing "A <id> <µs>" just after each acquire and "R <id> <µs>"
// just before each release, on Redis's clock (TIME).
func permitWorker(t *testing.T, addr string, lease bool) {
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rc.Close()
	opts := []ratelease.Option{ratelease.WithRedisTimeout(time.Second)}
	if !lease {
		opts = append(opts, ratelease.WithExact())
	}
	l, err := ratelease.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := concurrency(t, "procs", permitLimit, permitTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	redisNow := func() int64 {
		now, err := rc.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.UnixMicro()
	}
	hold, _ := strconv.Atoi(os.Getenv(permitWorkerEnv + "_HOLD"))
	for i := 0; ctx.Err() == nil; i++ {
		p, err := l.WaitPermit(ctx, c, "k")
		if err != nil {
			return
		}
		id := strconv.Itoa(i)
		fmt.Println("A", id, redisNow())
		if hold > 0 {
			time.Sleep(time.Duration(hold) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(5+i%20) * time.Millisecond)
		}
		fmt.Println("R", id, redisNow())
		_ = p.Release(context.Background())
	}
}
