package door_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/door"
	"github.com/ratelease/ratelease/internal/redistest"
	"github.com/ratelease/ratelease/remote"
)

// A call to a port where nothing listens ends as soon as the dial is
// refused, with the refusal naming the address, wrapping ErrUnavailable
// and syscall.ECONNREFUSED: not when the timeout ends, as "context
// deadline exceeded" (go-redis retries the dial, with a backoff, until
// the deadline, on a goroutine of its own). So for every kind of call,
// with a client that honours deadlines or one the door guards, and a
// client with go-redis's default options; the first failure's event says
// the same.
func TestRefusedDialEndsTheCall(t *testing.T) {
	addr := redistest.ClosedAddr(t)
	const timeout = 2 * time.Second
	p := perHour(t, 10)
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprint("honours deadlines ", honours), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: honours})
			defer c.Close()
			rec := &recorder{}
			d := door.New(door.Config{Store: remote.NewStore(c, "t"), Clock: clock.System{}, Timeout: timeout,
				Guard: !honours, Events: rec.event})
			defer closeDoor(d)
			ctx := context.Background()
			calls := map[string]func() error{
				"Acquire": func() error {
					_, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1})
					return errors.Join(cause, err)
				},
				"Batch": func() error {
					_, errs, gerrs := d.Batch(ctx, []remote.Request{{Policy: p, Key: "k", Min: 1, Max: 1}},
						[]remote.Grant{{Policy: p, Key: "g", Units: 1, At: 1}}, nil)
					if errs[0] == nil || gerrs[0] == nil || errs[0].Error() != gerrs[0].Error() {
						return fmt.Errorf("acquire %v, refund %v: want both the refusal", errs[0], gerrs[0])
					}
					return door.Classify(ctx, errs[0])
				},
				"Peek": func() error { _, err := d.Peek(ctx, p, "k"); return err },
				"Ping": func() error { return d.Ping(ctx) },
			}
			for _, name := range []string{"Acquire", "Batch", "Peek", "Ping"} {
				start := time.Now()
				err := calls[name]()
				took := time.Since(start)
				if !errors.Is(err, door.ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) ||
					!strings.Contains(err.Error(), addr) || took > timeout/4 {
					t.Errorf("%s: %v after %v; want the refusal naming %s, at once", name, err, took, addr)
				}
			}
			evs := rec.take()
			if len(evs) == 0 || evs[0].Kind != door.EventFirstFailure || !errors.Is(evs[0].Err, syscall.ECONNREFUSED) ||
				!strings.Contains(evs[0].Err.Error(), addr) {
				t.Errorf("events %q: want the first failure, the refusal naming %s", describe(evs), addr)
			}
		})
	}
}

// With a Redis Cluster, a dial to a master that is gone ends the calls to
// that master, with the refusal naming it, and no call to another: while
// the dead master's dials fail, calls to a live master, made all along by
// goroutines that wait for each other's connection (a pool of one), all
// succeed. (A call that is not waiting does not see its context end.)
func TestClusterDialEndsOnlyItsMastersCalls(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t, &redis.ClusterOptions{ContextTimeoutEnabled: true, PoolSize: 1})
	d := door.New(door.Config{Store: remote.NewStore(cc, "t"), Clock: clock.System{}, Timeout: 2 * time.Second})
	defer closeDoor(d)
	p := perHour(t, 1_000_000)
	ctx := context.Background()
	keys := map[int]string{} // a key of each master
	for i := 0; len(keys) < len(cl.Masters); i++ {
		key := fmt.Sprint("k", i)
		keys[cl.Master(t, p.Keys("t", key)[0])] = key
	}
	acquire := func(key string) error {
		_, cause, err := d.Acquire(ctx, remote.Request{Policy: p, Key: key, Min: 1, Max: 1})
		return errors.Join(cause, err)
	}
	for _, key := range keys {
		if err := acquire(key); err != nil {
			t.Fatal(err)
		}
	}
	dead := cl.Masters[0].Addr
	cl.Masters[0].Kill()
	stop := make(chan struct{})
	var live, failed atomic.Int64
	var liveErr atomic.Value
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				live.Add(1)
				if err := acquire(keys[1]); err != nil {
					failed.Add(1)
					liveErr.Store(err)
				}
			}
		}()
	}
	var refused bool
	for range 10 {
		start := time.Now()
		err := acquire(keys[0])
		if took := time.Since(start); !errors.Is(err, door.ErrUnavailable) || took > time.Second {
			t.Errorf("a call to the dead master: %v after %v; want ErrUnavailable at once", err, took)
		}
		refused = refused || errors.Is(err, syscall.ECONNREFUSED) && strings.Contains(err.Error(), dead)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // the dead master's dials go on
	close(stop)
	wg.Wait()
	if !refused {
		t.Error("no call to the dead master failed with its refusal")
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls to a live master failed: %v", n, live.Load(), liveErr.Load())
	}
	t.Logf("%d calls to a live master, all granted", live.Load())
}
