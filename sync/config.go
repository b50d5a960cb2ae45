package sync

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a Leaser; New rejects an invalid one.
type Config struct {
	// Min bounds one lease from below, in units (>= 1); Max from above (0:
	// no bound but the policy's capacity and the fair share).
	Min, Max int64
	// Refresh: a lease is sized to last about this long at the key's
	// demand, and never less than a few round trips. 0: three quarters of
	// TTL.
	Refresh time.Duration
	// TTL: leased units unused after this long are given back. It bounds
	// a token bucket's overshoot over any window: Rate·TTL.
	TTL time.Duration
	// LowWater, in (0, 1): below LowWater × the last grant (and a few
	// round trips' demand) the next lease is made ahead of need.
	LowWater float64
	// MaxKeys bounds the number of keys with local state.
	MaxKeys int
}

// Past maxDuration a TTL or Refresh would overflow the expiry arithmetic;
// under minDuration it could not outlive a round trip.
const (
	minDuration = time.Millisecond
	maxDuration = 24 * time.Hour
)

var errInvalidOption = errors.New("invalid lease config")

// validate reports what is wrong with c, naming the field.
func (c Config) validate() error {
	switch {
	case c.Min < 1:
		return errorf("Min %d must be at least 1", c.Min)
	case c.Max != 0 && c.Max < c.Min:
		return errorf("Max %d must be 0 (no bound) or at least Min %d", c.Max, c.Min)
	case c.TTL < minDuration || c.TTL > maxDuration:
		return errorf("TTL %v must be between %v and %v", c.TTL, minDuration, maxDuration)
	case c.Refresh != 0 && (c.Refresh < minDuration || c.Refresh > c.TTL):
		return errorf("Refresh %v must be 0 (automatic) or between %v and TTL %v: units held past TTL lapse", c.Refresh, minDuration, c.TTL)
	case !(c.LowWater > 0 && c.LowWater < 1): // (NaN too)
		return errorf("LowWater %v must be in (0, 1)", c.LowWater)
	case c.MaxKeys < 1:
		return errorf("MaxKeys %d must be at least 1", c.MaxKeys)
	}
	return nil
}

// horizon is how long a lease is meant to last.
func (c Config) horizon() time.Duration {
	if c.Refresh > 0 {
		return c.Refresh
	}
	return c.TTL * 3 / 4
}

// Stats counts a Leaser's work.
type Stats struct {
	// Leases counts lease requests answered by Redis; Denied those that
	// granted nothing.
	Leases, Denied uint64
	// RoundTrips counts the door's round trips (a pipeline counts one:
	// one per node) and refunds of grants that came late; Errors the
	// calls in them that failed.
	RoundTrips, Errors uint64
	// UnitsLeased, UnitsRefunded: units granted by and given back to Redis.
	// UnitsExpired: units that lapsed unused, given back or dropped.
	UnitsLeased, UnitsRefunded, UnitsExpired uint64
	// UnitsUsed: leased units that requests took; UnitsDropped: leased
	// units neither used nor given back (lapsed past any refund's worth,
	// forgotten by a Reset, or in a refund Redis did not take); UnitsHeld:
	// units held now (in allowances, set aside, or on their way back). At
	// any quiet moment UnitsLeased = UnitsUsed + UnitsRefunded +
	// UnitsDropped + UnitsHeld; after Close, UnitsHeld is 0.
	UnitsUsed, UnitsDropped, UnitsHeld uint64
	// Instances is the most members any key leased in the last minute had
	// (1 before the first lease).
	Instances int64
	Keys      uint64 // entries held now (at most MaxKeys)
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalidOption, fmt.Sprintf(format, args...))
}
