package remote_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// When the room left is scarce, a grant above min shrinks toward the room
// divided by the live instances; with plenty of room, Share changes nothing.
func TestFairShare(t *testing.T) {
	f := newFake(t)
	p := mustPolicy(t, "p", tb(100, 100, time.Hour))
	ask := func(min, max, share int64) int64 {
		d, err := f.s.Acquire(context.Background(), remote.Request{Policy: p, Key: "k", Min: min, Max: max, Share: share})
		if err != nil {
			t.Fatal(err)
		}
		return d.Granted
	}
	if g := ask(1, 10, 4); g != 10 { // room 100: a quarter is 25 >= 10
		t.Fatalf("plenty of room: granted %d, want 10", g)
	}
	if g := ask(1, 90, 4); g != 22 { // room 90: a quarter
		t.Fatalf("scarce: granted %d, want 22 (90/4)", g)
	}
	if g := ask(1, 90, 4); g != 17 { // room 68
		t.Fatalf("scarcer: granted %d, want 17", g)
	}
	if g := ask(30, 90, 4); g != 30 { // room 51: a quarter is 12, but min is 30
		t.Fatalf("min above the share: granted %d, want 30", g)
	}
	if g := ask(1, 90, 0); g != 21 { // Share 0 means 1: all the room
		t.Fatalf("share 0: granted %d, want the 21 left", g)
	}
}

func TestValidFor(t *testing.T) {
	f := newFake(t)
	f.Advance(250 * ms)
	for _, c := range []struct {
		limits []remote.Limit
		want   time.Duration
	}{
		{[]remote.Limit{tb(10, 10, time.Second)}, -1},
		{[]remote.Limit{win(remote.FixedWindow, 10, time.Second)}, 750 * ms},
		{[]remote.Limit{win(remote.SlidingWindowCounter, 10, time.Minute)}, time.Minute - 250*ms},
		{[]remote.Limit{tb(10, 10, time.Second), win(remote.FixedWindow, 100, time.Minute), win(remote.FixedWindow, 10, time.Second)}, 750 * ms},
	} {
		p := mustPolicy(t, fmt.Sprintf("p%d", len(c.limits)), c.limits...)
		d := acquire(t, f.s, p, "k", 1, 1, false)
		if d.ValidFor != c.want {
			t.Errorf("%v: ValidFor %v, want %v", c.limits, d.ValidFor, c.want)
		}
	}
}

func TestBatchesOnRealRedis(t *testing.T) {
	s, c := realStore(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(10, 10, time.Hour))
	q := mustPolicy(t, "q", win(remote.FixedWindow, 5, time.Hour))
	if err := c.ScriptFlush(ctx).Err(); err != nil { // the batch must load what it needs
		t.Fatal(err)
	}
	rs := []remote.Request{{Policy: p, Key: "a", Min: 1, Max: 4}, {Policy: q, Key: "b", Min: 1, Max: 9}, {Policy: p, Key: "a", Min: 7, Max: 7}}
	ds, errs := s.AcquireBatch(ctx, rs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if ds[0].Granted != 4 || ds[1].Granted != 5 || ds[2].Granted != 0 {
		t.Fatalf("granted %d %d %d, want 4, 5 and a denial", ds[0].Granted, ds[1].Granted, ds[2].Granted)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	errs = s.RefundBatch(ctx, []remote.Grant{{Policy: p, Key: "a", Units: 4, At: ds[0].At}, {Policy: q, Key: "b", Units: 5, At: ds[1].At}})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("refund %d: %v", i, err)
		}
	}
	if d := acquire(t, s, p, "a", 10, 10, false); d.Granted != 10 {
		t.Fatalf("after the batch refund: %+v", d)
	}
	if d := acquire(t, s, q, "b", 5, 5, false); d.Granted != 5 {
		t.Fatalf("after the batch refund: %+v", d)
	}
}

func TestHeartbeat(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	beat := func(id string, leave bool) int64 {
		n, err := f.s.Heartbeat(ctx, id, 3*time.Second, leave)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := beat("a", false); n != 1 {
		t.Fatalf("one instance: %d", n)
	}
	f.Advance(2 * time.Second)
	if n := beat("b", false); n != 2 {
		t.Fatalf("two instances: %d", n)
	}
	f.Advance(2 * time.Second) // a's heartbeat has lapsed
	if n := beat("b", false); n != 1 {
		t.Fatalf("after a lapsed: %d", n)
	}
	if n := beat("b", true); n != 0 {
		t.Fatalf("after b left: %d", n)
	}
	if f.Exists(remote.MembersKey("test")) {
		t.Fatal("the members' set outlived its members")
	}
}
