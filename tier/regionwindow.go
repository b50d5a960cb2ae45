package tier

import (
	"time"

	"github.com/ratelease/ratelease/remote"
)

// doomed reports whether a refill of a pool whose global key g has
// windows (windowOf), k being what this process knows of the pool, would
// come too late in a window to be of use, and how long to wait for the
// next window instead. A grant's units lapse in the pool with the window,
// by the pool's clock a round trip and a half after the refill set out
// less than the window's end (their life counts from the claim; the call
// lands half a round trip after the global Redis decided it): a refill
// ahead of need that sets out less than two round trips before the end
// brings units that lapse within a round trip of landing, and one for a
// decision waiting for units (need > 0) less than a round trip and a half
// before, units that lapse as they land; charged to the global key all
// the same (a sliding window counter's in the next window's weight too).
// Not when a refill set out now would reach the global Redis after the
// window turned anyway.
//
// The window's end is what k (what this process knows of the pool) says
// the last grant said, half its round trip after it set out (to within
// half a round trip), a whole number of periods on; only for windows at
// least four round trips long.
func (r *regions) doomed(g *remote.Policy, k known, rtt time.Duration, need int64) (time.Duration, bool) {
	period, ok := windowOf(g)
	if !ok || k.end == 0 || 4*rtt > period {
		return 0, false
	}
	now, end := r.clock.Now().UnixNano(), k.end
	if p := int64(period); end <= now {
		end += ((now-end)/p + 1) * p
	}
	left := time.Duration(end - now)
	late := 2 * rtt
	if need > 0 {
		late = 3 * rtt / 2
	}
	wait := left - rtt/2 + aim
	if left > late || wait <= time.Millisecond {
		return 0, false
	}
	return wait, true
}

// windowOf returns the period of g's windows (fixed windows and sliding
// window counters, whose grants lapse with them), when they all have one
// (their ends then fall together, on the epoch's multiples of it) and g
// has no calendar window (whose windows are not of one length).
func windowOf(g *remote.Policy) (time.Duration, bool) {
	var period time.Duration
	for _, l := range g.Limits() {
		switch l.Algorithm {
		case remote.CalendarWindow:
			return 0, false
		case remote.FixedWindow, remote.SlidingWindowCounter:
			if period != 0 && l.Period != period {
				return 0, false
			}
			period = l.Period
		}
	}
	return period, period > 0
}
