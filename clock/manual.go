package clock

import (
	"sort"
	"sync"
	"time"
)

// Manual is a fake Clock for tests: its time changes only through Set and
// Advance, and its timers fire when that time reaches their deadline. The
// zero value starts at the zero time; [NewManual] starts at a given time.
// Safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer // requires mu held
}

var _ Clock = (*Manual)(nil)

// NewManual returns a Manual clock set to t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{m: m, at: m.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- m.now
		return t
	}
	m.timers = append(m.timers, t)
	return t
}

// Advance moves the clock forward by d and fires the timers that are due, in
// deadline order. A negative d is ignored: a Clock never goes back.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	m.mu.Lock()
	m.setLocked(m.now.Add(d))
	m.mu.Unlock()
}

// Set moves the clock to t if t is after its current time, and fires the
// timers that are due.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	if t.After(m.now) {
		m.setLocked(t)
	}
	m.mu.Unlock()
}

// Timers reports how many timers are waiting to fire. Tests use it to know
// that a goroutine has started waiting before they advance the clock.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// setLocked requires m.mu held.
func (m *Manual) setLocked(t time.Time) {
	m.now = t
	sort.SliceStable(m.timers, func(i, j int) bool { return m.timers[i].at.Before(m.timers[j].at) })
	kept := m.timers[:0]
	for _, tm := range m.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.c <- t // buffered, sent once: the timer leaves the list here
	}
	clear(m.timers[len(kept):])
	m.timers = kept
}

type manualTimer struct {
	m  *Manual
	at time.Time
	c  chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	for i, tm := range t.m.timers {
		if tm == t {
			t.m.timers = append(t.m.timers[:i], t.m.timers[i+1:]...)
			return true
		}
	}
	return false
}
