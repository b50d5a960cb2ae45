package local

import "math"

// demand estimates how fast units are used. For its first Tau it is the
// average since the first observation, over at least FirstWindow; from
// then on an exponentially weighted moving average of units per second
// with time constant Tau, Tau/4 while the demand rises. The zero value is
// ready: it knows nothing yet (Rate 0). Not safe for concurrent use: its
// owner updates it under its own lock, off the hit path.
type demand struct {
	rate    float64 // units per second
	last    int64   // ns of the last Observe
	first   int64   // ns of the first Observe
	total   float64 // units used since first, during the first Tau
	started bool    // an Observe has set last and first
	known   bool    // a rate has been measured
}

// tau is the averaging time constant of Demand: an observation's weight
// halves after about 0.7·tau.
const tau = 1e9 // ns

// firstWindow is the shortest time a rate is measured over. Requests that
// arrive together (a service's goroutines starting at once) are not a
// rate: two of them a round trip apart would make one of thousands a
// second, and a key's first leases would claim a fair share it does not
// use.
const firstWindow = 20e6 // ns

// observe records that used units were used since the last observation,
// at now (ns). The first observation only starts the clock.
func (d *demand) observe(used, now int64) {
	if !d.started {
		d.last, d.first, d.started = now, now, true
		return
	}
	if since := now - d.first; since < tau {
		// The first Tau: the average since the first observation, which
		// learns a steady demand at once; an average with the zero before
		// it would take a few Taus.
		d.total += float64(used)
		if now > d.last {
			d.last = now
			d.rate, d.known = d.total*1e9/float64(max(since, firstWindow)), true
		}
		return
	}
	dt := now - d.last
	if dt <= 0 {
		return
	}
	d.last = now
	r := float64(used) * 1e9 / float64(dt)
	if !d.known {
		d.rate, d.known = r, true
		return
	}
	tau := float64(tau)
	if r > d.rate {
		// A rising demand is followed four times as fast as a falling one:
		// a lease sized for yesterday's demand makes its key wait on Redis
		// (and, shared, its fair share is counted too low) until the
		// average catches up, while one sized too large for a short lull
		// only holds a few units more until they lapse.
		tau /= 4
	}
	alpha := 1 - math.Exp(-float64(dt)/tau)
	d.rate += alpha * (r - d.rate)
}

// estimate returns the estimated units per second.
func (d *demand) estimate() float64 { return d.rate }
