package local

import "math"

// Demand estimates how fast units are used, as an exponentially weighted
// moving average of units per second with time constant Tau. The zero value
// is ready: it knows nothing yet (Rate 0). Not safe for concurrent use: its
// owner updates it under its own lock, off the hit path.
type Demand struct {
	rate float64 // units per second
	last int64   // ns of the last Observe; 0 before the first
}

// Tau is the averaging time constant of Demand: an observation's weight
// halves after about 0.7·Tau.
const Tau = 1e9 // ns

// Observe records that used units were used since the last observation,
// at now (ns). The first observation only starts the clock.
func (d *Demand) Observe(used, now int64) {
	if d.last == 0 {
		d.last = now
		return
	}
	dt := now - d.last
	if dt <= 0 {
		return
	}
	d.last = now
	alpha := 1 - math.Exp(-float64(dt)/Tau)
	d.rate += alpha * (float64(used)*1e9/float64(dt) - d.rate)
}

// Rate returns the estimated units per second.
func (d *Demand) Rate() float64 { return d.rate }
