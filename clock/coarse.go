package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Coarse is a Clock whose Now is one atomic load: a cached time refreshed by
// one ticker goroutine every resolution. Reading it costs a few nanoseconds
// instead of time.Now's tens, at the price of being up to one resolution
// behind. Timers are the system's, at full precision.
//
// Create it with [NewCoarse] and release its goroutine with [Coarse.Stop].
// After Stop, Now keeps returning the last cached time plus the monotonic
// time elapsed since (it falls back to the system clock). Safe for
// concurrent use.
type Coarse struct {
	// base is the time at which the clock was made, with its monotonic
	// reading; offset is the cached elapsed time since base. Now is
	// base.Add(offset): no allocation, and monotonic because only the ticker
	// goroutine stores offset and elapsed time never decreases.
	base    time.Time
	offset  atomic.Int64
	stopped atomic.Bool

	stopOnce sync.Once
	done     chan struct{}
	exited   chan struct{}
}

var (
	_ Clock   = (*Coarse)(nil)
	_ Elapsed = (*Coarse)(nil)
)

// DefaultResolution is the refresh interval NewCoarse uses for a
// resolution of zero or less.
const DefaultResolution = time.Millisecond

// NewCoarse starts a coarse clock refreshed every resolution
// (DefaultResolution when resolution <= 0).
func NewCoarse(resolution time.Duration) *Coarse {
	if resolution <= 0 {
		resolution = DefaultResolution
	}
	c := &Coarse{
		base:   time.Now(),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go c.run(resolution)
	return c
}

func (c *Coarse) run(resolution time.Duration) {
	defer close(c.exited)
	t := time.NewTicker(resolution)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.offset.Store(int64(time.Since(c.base)))
		}
	}
}

// Now returns the cached time, at most about one resolution old.
func (c *Coarse) Now() time.Time {
	if c.stopped.Load() {
		return c.base.Add(time.Since(c.base))
	}
	return c.base.Add(time.Duration(c.offset.Load()))
}

// Elapsed returns the cached time since the clock was made: Now without
// the time arithmetic, one atomic load.
func (c *Coarse) Elapsed() time.Duration {
	if c.stopped.Load() {
		return time.Since(c.base)
	}
	return time.Duration(c.offset.Load())
}

// NewTimer returns a system timer.
func (c *Coarse) NewTimer(d time.Duration) Timer { return System{}.NewTimer(d) }

// Stop ends the refresh goroutine and waits for it to exit. It is idempotent.
func (c *Coarse) Stop() {
	c.stopOnce.Do(func() {
		c.stopped.Store(true)
		close(c.done)
		<-c.exited
	})
}
