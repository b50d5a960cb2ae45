package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Coarse is a Clock whose Now is one atomic load: a cached time refreshed by
// one ticker goroutine every resolution. Reading it costs a few nanoseconds
// instead of time.Now's tens, at the price of being up to one resolution
// behind, or more when the ticker goroutine waits for a CPU: with every
// core busy (goroutines spinning, as callers do in a flood), the Go
// scheduler runs it only when another goroutine's time slice ends, and the
// cached time may lag by tens of milliseconds. [Coarse.Fine] reads the
// time precisely and brings the cached time up to it; [Coarse.Lag] tells
// how far behind the cached time has been lately, so that a caller can
// tell when a reading is too close to a deadline to be trusted. Timers are
// the system's, at full precision.
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
	// lag is the most the cached time was seen behind the time (ns), at
	// least resolution: a tick's lateness, or the gap a Fine reading
	// closed. It decays by a 1024th each tick (about a second at the
	// default resolution), so that one stall is remembered for a while.
	lag        atomic.Int64
	resolution time.Duration

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
		base:       time.Now(),
		resolution: resolution,
		done:       make(chan struct{}),
		exited:     make(chan struct{}),
	}
	c.lag.Store(int64(resolution))
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
			// How far behind the cached time was just before this tick:
			// a resolution when the tick is on time.
			l := c.lag.Load()
			c.lag.Store(max(int64(resolution), l-l/1024))
			c.advance(int64(time.Since(c.base)), 0)
		}
	}
}

// advance brings the cached time up to now (ns since base) if it is
// behind by more than slack, and records how far behind it was.
func (c *Coarse) advance(now, slack int64) {
	for {
		old := c.offset.Load()
		if now-old <= slack {
			return
		}
		if c.offset.CompareAndSwap(old, now) {
			c.seen(now - old)
			return
		}
	}
}

// seen records that the cached time was behind by behind (ns).
func (c *Coarse) seen(behind int64) {
	for {
		l := c.lag.Load()
		if behind <= l || c.lag.CompareAndSwap(l, behind) {
			return
		}
	}
}

// Fine returns the time since the clock was made, read precisely (a
// reading of the system's monotonic clock, as time.Since), and brings the
// cached time up to it if it is behind by more than a resolution (its
// ticker is late): a caller that reads the time precisely refreshes it for
// the hot path too, and writes it no more often than the ticker does.
func (c *Coarse) Fine() time.Duration {
	d := time.Since(c.base)
	if !c.stopped.Load() {
		c.advance(int64(d), int64(c.resolution))
	}
	return d
}

// Lag returns the most the cached time was behind the time lately: at
// least the resolution; more after the ticker goroutine waited for a CPU
// (it decays over about a thousand resolutions). A reading of Elapsed or
// Now may be behind by more when the lag grows past anything seen lately.
// Zero after Stop (the clock reads the system's).
func (c *Coarse) Lag() time.Duration {
	if c.stopped.Load() {
		return 0
	}
	return time.Duration(c.lag.Load())
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
