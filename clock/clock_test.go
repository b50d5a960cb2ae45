package clock_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelease/ratelease/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestManualTimersFireInOrderWhenDue(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	m := clock.NewManual(start)
	late := m.NewTimer(3 * time.Second)
	early := m.NewTimer(time.Second)
	stopped := m.NewTimer(2 * time.Second)
	if !stopped.Stop() {
		t.Fatal("Stop on a pending timer reported false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop reported true")
	}
	if got := m.Timers(); got != 2 {
		t.Fatalf("Timers() = %d, want 2", got)
	}

	m.Advance(time.Second)
	select {
	case at := <-early.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Fatalf("early fired with %v", at)
		}
	default:
		t.Fatal("early timer did not fire at its deadline")
	}
	select {
	case <-late.C():
		t.Fatal("late timer fired early")
	default:
	}
	if early.Stop() {
		t.Fatal("Stop after firing reported true")
	}

	m.Advance(-time.Hour) // ignored
	if !m.Now().Equal(start.Add(time.Second)) {
		t.Fatalf("negative Advance moved the clock to %v", m.Now())
	}
	m.Set(start.Add(10 * time.Second))
	select {
	case <-late.C():
	default:
		t.Fatal("late timer did not fire after Set")
	}
	select {
	case <-stopped.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if m.Timers() != 0 {
		t.Fatalf("Timers() = %d after all fired", m.Timers())
	}
}

func TestManualZeroDurationFiresAtOnce(t *testing.T) {
	var m clock.Manual
	select {
	case <-m.NewTimer(0).C():
	default:
		t.Fatal("zero-duration timer did not fire at once")
	}
}

func TestCoarseIsMonotonicAndClose(t *testing.T) {
	c := clock.NewCoarse(time.Millisecond)
	defer c.Stop()
	prev := c.Now()
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		now := c.Now()
		if now.Before(prev) {
			t.Fatalf("coarse clock went back: %v then %v", prev, now)
		}
		prev = now
	}
	// A loaded machine may delay the ticker, but not by a second.
	if lag := time.Since(c.Now()); lag < 0 || lag > time.Second {
		t.Fatalf("coarse clock is %v behind the system clock", lag)
	}
}

// Elapsed agrees with Now: Now is the start plus Elapsed.
func TestCoarseElapsedAgreesWithNow(t *testing.T) {
	c := clock.NewCoarse(time.Millisecond)
	defer c.Stop()
	var start time.Time
	checked := 0
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		e1 := c.Elapsed()
		now := c.Now()
		if e2 := c.Elapsed(); e1 != e2 {
			continue // the ticker moved in between
		}
		if start.IsZero() {
			start = now.Add(-e1)
		}
		if !now.Equal(start.Add(e1)) {
			t.Fatalf("Now %v != start + Elapsed %v", now, start.Add(e1))
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d stable readings", checked)
	}
}

func TestCoarseAdvances(t *testing.T) {
	c := clock.NewCoarse(time.Millisecond)
	defer c.Stop()
	first := c.Now()
	deadline := time.Now().Add(5 * time.Second)
	for !c.Now().After(first) {
		if time.Now().After(deadline) {
			t.Fatal("coarse clock did not advance within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCoarseStopIsIdempotentAndNowStillWorks(t *testing.T) {
	c := clock.NewCoarse(0)
	c.Stop()
	c.Stop()
	a := c.Now()
	time.Sleep(2 * time.Millisecond)
	if b := c.Now(); !b.After(a) {
		t.Fatalf("after Stop, Now did not follow the system clock: %v then %v", a, b)
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
}

func BenchmarkNow(b *testing.B) {
	c := clock.NewCoarse(time.Millisecond)
	defer c.Stop()
	b.Run("coarse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.Now()
		}
	})
	b.Run("system", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = time.Now()
		}
	})
}
