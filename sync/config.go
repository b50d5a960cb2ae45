package sync

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a Leaser. New checks it (see Validate).
type Config struct {
	// Min bounds one lease from below, in units (>= 1); Max from above (0:
	// no bound but the policy's capacity and the fair share).
	Min, Max int64
	// Refresh: a lease is sized to last about this long at the key's
	// measured demand, and never less than a few measured lease round
	// trips. 0: three quarters of TTL, so that a lease serves most of its
	// life.
	Refresh time.Duration
	// TTL: leased units unused after this long are given back. It bounds
	// the overshoot of a token bucket over any window: Rate·TTL.
	TTL time.Duration
	// LowWater, in (0, 1): when fewer than LowWater × the last lease size
	// units are left (and never fewer than a few round trips' worth of
	// demand), the next lease is made ahead of need.
	LowWater float64
	// MaxKeys bounds the number of keys with local state.
	MaxKeys int
}

// Bounds of the durations: a TTL or Refresh past maxDuration would overflow
// the nanosecond arithmetic of expiry, and one under minDuration could not
// outlive a round trip.
const (
	minDuration = time.Millisecond
	maxDuration = 24 * time.Hour
)

// ErrInvalidOption is wrapped by Validate's errors.
var ErrInvalidOption = errors.New("invalid lease config")

// Validate reports what is wrong with c, as an error wrapping ErrConfig
// that names the field.
func (c Config) Validate() error {
	switch {
	case c.Min < 1:
		return errorf("Min %d must be at least 1", c.Min)
	case c.Max != 0 && c.Max < c.Min:
		return errorf("Max %d must be 0 (no bound) or at least Min %d", c.Max, c.Min)
	case c.TTL < minDuration || c.TTL > maxDuration:
		return errorf("TTL %v must be between %v and %v", c.TTL, minDuration, maxDuration)
	case c.Refresh != 0 && (c.Refresh < minDuration || c.Refresh > c.TTL):
		return errorf("Refresh %v must be 0 (automatic) or between %v and TTL %v: units held past TTL lapse", c.Refresh, minDuration, c.TTL)
	case c.LowWater <= 0 || c.LowWater >= 1:
		return errorf("LowWater %v must be in (0, 1)", c.LowWater)
	case c.MaxKeys < 1:
		return errorf("MaxKeys %d must be at least 1", c.MaxKeys)
	}
	return nil
}

// horizon is how long a lease is meant to last: Refresh, or three quarters
// of TTL.
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
	// RoundTrips counts pipelines sent (each one round trip per node),
	// and refunds of grants that came late; Errors the calls in them that
	// failed. The door counts them (door.Counts of Batch).
	RoundTrips, Errors uint64
	// UnitsLeased, UnitsRefunded: units granted by and given back to Redis.
	// UnitsExpired: units that lapsed unused (TTL or window end), given
	// back or, when a refund could no longer give anything back, dropped.
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
	// Keys is the number of entries in the key store now (its bound,
	// MaxKeys).
	Keys uint64
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}
