package local

import "math"

// demand estimates how fast units are used, in units per second: for its
// first tau the average since the first observation (over at least
// firstWindow), then the greater of two moving averages, rate and fast,
// of time constant tau and tau/4: a rise is followed four times as fast
// as a fall. The zero value knows nothing (0). Requires the entry's lock.
type demand struct {
	rate, fast  float64
	last, first int64   // ns of the last and first observe
	total       float64 // units used since first, during the first tau
	started     bool
	known       bool // a rate has been measured
}

const tau = 1e9 // ns

// firstWindow is the shortest time a rate is measured over: requests that
// arrive together (goroutines starting at once) are not a rate, and would
// have a key's first leases claim a fair share it does not use.
const firstWindow = 20e6 // ns

// observe records that used units were used since the last observation,
// at now (ns). The first only starts the clock.
func (d *demand) observe(used, now int64) {
	if !d.started {
		d.last, d.first, d.started = now, now, true
		return
	}
	if since := now - d.first; since < tau {
		// The average since the first observation learns a steady demand
		// at once; a moving average from zero would take a few taus.
		d.total += float64(used)
		if now > d.last {
			d.last = now
			d.rate, d.known = d.total*1e9/float64(max(since, firstWindow)), true
			d.fast = d.rate
		}
		return
	}
	dt := now - d.last
	if dt <= 0 {
		return
	}
	d.last = now
	if !d.known {
		// The average since the first (and a seed's units).
		d.rate, d.known = (d.total+float64(used))*1e9/float64(now-d.first), true
		d.fast = d.rate
		return
	}
	// (Not one average faster up than down: docs/leasing.md, item 3.)
	r := float64(used) * 1e9 / float64(dt)
	d.rate += (1 - math.Exp(-float64(dt)/tau)) * (r - d.rate)
	d.fast += (1 - math.Exp(-4*float64(dt)/tau)) * (r - d.fast)
}

// seed starts the clock at first (ns), as if used units had been observed
// since, unless the clock runs or first is within firstWindow of now.
func (d *demand) seed(first, used, now int64) {
	if d.started || now-first < firstWindow {
		return
	}
	d.first, d.last, d.total, d.started = first, first, float64(used), true
}

// estimate returns the estimated units per second.
func (d *demand) estimate() float64 { return max(d.rate, d.fast) }
