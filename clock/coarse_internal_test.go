package clock

import (
	"testing"
	"time"
)

// A precise reading (Fine) brings a coarse clock whose ticker is late (as
// when it waits for a CPU; here it never runs) up to date, and Lag tells
// how far behind it was; a reading within a resolution writes nothing.
func TestCoarseFineCatchesUpAndLagTells(t *testing.T) {
	c := &Coarse{base: time.Now(), resolution: time.Millisecond} // no ticker
	c.lag.Store(int64(time.Millisecond))
	time.Sleep(5 * time.Millisecond)
	if c.Elapsed() != 0 {
		t.Fatal("the cached time moved without a tick")
	}
	fine := c.Fine()
	if cached := c.Elapsed(); cached != fine || fine < 5*time.Millisecond {
		t.Fatalf("after Fine() = %v the cached time is %v; want them equal, at least 5ms", fine, cached)
	}
	if c.Lag() < 5*time.Millisecond {
		t.Fatalf("Lag() = %v after the cached time was 5ms behind", c.Lag())
	}
	if again := c.Fine(); c.Elapsed() != fine || again < fine {
		t.Fatalf("a reading %v within a resolution moved the cached time to %v", again-fine, c.Elapsed())
	}
}
