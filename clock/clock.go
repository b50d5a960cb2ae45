package clock

import "time"

// Clock tells the time and makes timers. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time. Durations between two results of Now
	// must be monotonic for the same Clock.
	Now() time.Time
	// NewTimer returns a Timer that sends the time on its channel once d has
	// passed. A d of zero or less fires at once.
	NewTimer(d time.Duration) Timer
}

// Elapsed is implemented by clocks that can tell the time elapsed since
// they were made more cheaply than by subtracting two results of Now, for
// hot paths that only compare times. Elapsed must agree with Now:
// c.Now() == start.Add(c.Elapsed()) for the clock's fixed start.
type Elapsed interface {
	Elapsed() time.Duration
}

// Timer is a single-shot timer made by a Clock.
type Timer interface {
	// C returns the channel on which the time is delivered once.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped it,
	// false when the timer had already fired or been stopped.
	Stop() bool
}

// System is the process clock: time.Now and time.NewTimer. Its zero value is
// ready to use.
type System struct{}

var _ Clock = System{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// NewTimer returns a Timer backed by time.NewTimer.
func (System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
