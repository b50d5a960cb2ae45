package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/internal/guard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A call that answers in time is returned as it is, and late is not called.
func TestDoInTime(t *testing.T) {
	var g guard.Group
	wantErr := errors.New("boom")
	v, err := guard.Do(&g, context.Background(), func(context.Context) (int, error) { return 7, wantErr },
		func(int, error) { t.Error("late called for a call that answered in time") })
	if v != 7 || err != wantErr {
		t.Fatalf("Do = %v, %v; want 7, boom", v, err)
	}
	if !g.Close(context.Background()) {
		t.Fatal("Close: calls still running")
	}
}

// A call that outlives ctx: Do returns ctx's error at ctx's end; the result
// reaches late; Close waits for it until its own ctx only.
func TestDoLate(t *testing.T) {
	var g guard.Group
	release := make(chan struct{})
	lates := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	v, err := guard.Do(&g, ctx, func(context.Context) (int, error) {
		<-release // a client that ignores the deadline
		return 42, nil
	}, func(v int, err error) {
		if err != nil {
			t.Error(err)
		}
		lates <- v
	})
	if v != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, %v; want 0, DeadlineExceeded", v, err)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if g.Close(short) {
		t.Fatal("Close reported every call ended while one was still blocked")
	}
	if _, err := guard.Do(&g, context.Background(), func(context.Context) (int, error) { return 1, nil }, nil); !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("Do after Close: %v, want ErrClosed", err)
	}
	close(release)
	if v := <-lates; v != 42 {
		t.Fatalf("late got %d, want 42", v)
	}
	if !g.Close(context.Background()) {
		t.Fatal("Close after the call ended: still running")
	}
}

// Go runs its function on a goroutine Close waits for, and refuses once
// Close has begun.
func TestGo(t *testing.T) {
	var g guard.Group
	release, ran := make(chan struct{}), make(chan struct{})
	if !g.Go(func() { <-release; close(ran) }) {
		t.Fatal("Go refused before Close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if g.Close(ctx) {
		t.Fatal("Close did not wait for the goroutine of Go")
	}
	if g.Go(func() { t.Error("ran after Close") }) {
		t.Fatal("Go accepted after Close")
	}
	close(release)
	<-ran
	if !g.Close(context.Background()) {
		t.Fatal("Close: the goroutine of Go still running after it ended")
	}
}
