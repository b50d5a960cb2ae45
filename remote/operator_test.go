package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelease/ratelease/remote"
)

// Reset deletes every limit's state and the members hash in one call;
// Peek charges nothing.
func TestResetAndPeek(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	p := mustPolicy(t, "p", tb(10, 10, time.Second), win(remote.FixedWindow, 5, time.Minute))
	if _, err := f.s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 3, Member: "m1", Demand: 5, Horizon: time.Second}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Keys()); n != 3 {
		t.Fatalf("keys %v, want two limits and the members", f.Keys())
	}
	for i := 0; i < 3; i++ {
		d, err := f.s.Peek(ctx, p, "k")
		if err != nil || d.Granted != 1 || d.Remaining != 2 || d.Decider != 1 {
			t.Fatalf("Peek: %+v, %v", d, err)
		}
	}
	if err := f.s.Reset(ctx, p, "k"); err != nil {
		t.Fatal(err)
	}
	if keys := f.Keys(); len(keys) != 0 {
		t.Fatalf("keys left after Reset: %v", keys)
	}
	if d, _ := f.s.Peek(ctx, p, "k"); d.Remaining != 5 {
		t.Fatalf("Peek after Reset: %+v", d)
	}
}
