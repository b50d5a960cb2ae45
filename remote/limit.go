package remote

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Algorithm selects the script logic of a limit. The values match the
// algorithm ids in lua/.
type Algorithm uint8

// The algorithms, in the order of the public API.
const (
	TokenBucket Algorithm = iota
	FixedWindow
	SlidingWindowLog
	SlidingWindowCounter
	LeakyBucket
	// CalendarWindow: a fixed window aligned to a calendar (Limit.Calendar)
	// instead of the Unix epoch: days, weeks or months of a time zone.
	CalendarWindow
	// Pool: a region's part of a worldwide key, in the region's Redis,
	// filled from the global Redis (pool.lua; see Policy.Pooled). Never a
	// limit of a policy a user makes.
	Pool
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"token bucket", "fixed window", "sliding window log", "sliding window counter", "leaky bucket", "calendar window", "regional pool"}

// algorithmCodes name an algorithm inside a Redis key; short and stable.
var algorithmCodes = [numAlgorithms]string{"tb", "fw", "swl", "swc", "lb", "cal", "pool"}

// String returns the algorithm's name, such as "token bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// windowed reports whether the algorithm counts units in windows, whose
// capacity is the rate (no separate burst).
func (a Algorithm) windowed() bool {
	return a == FixedWindow || a == SlidingWindowLog || a == SlidingWindowCounter || a == CalendarWindow
}

// ErrInvalidLimit is wrapped by every error about a limit's values.
var ErrInvalidLimit = errors.New("invalid limit")

// ErrInvalidPolicy is wrapped by every error about a policy's name, and
// by the engine's refusal of a policy that a later one redefined.
var ErrInvalidPolicy = errors.New("ratelease: invalid policy")

// maxExact is 2^53: every integer the scripts compute must stay below it to
// be exact in a Lua double.
const maxExact = 1 << 53

// Limit is one limit as the scripts see it: Rate units per Period, Burst
// units of capacity. Burst is resolved (never zero): windowed algorithms have
// Burst == Rate.
type Limit struct {
	Algorithm Algorithm
	Rate      int64
	Period    time.Duration
	Burst     int64
	// Calendar places a CalendarWindow's windows (its Period is then the
	// calendar's Nominal length); unset for the other algorithms.
	Calendar Calendar
}

// validate reports why the scripts cannot enforce l exactly, as an error
// wrapping ErrLimit, or nil.
//
// Rules: a known algorithm; Rate >= 1; Period a whole number of
// microseconds, at least one millisecond; for a SlidingWindowLog, at most
// one unit per microsecond (the log keeps one member per unit);
// Burst >= 1, equal to Rate for windowed algorithms;
// and Rate·Period and Burst·Period (in µs) below 2^53, so that the scripts'
// integer arithmetic stays exact (for a CalendarWindow, Rate alone; for a
// Pool, Rate and Burst alone).
func (l Limit) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidLimit, fmt.Sprintf(format, args...))
	}
	us := int64(l.Period / time.Microsecond)
	switch {
	case l.Algorithm >= numAlgorithms:
		return bad("unknown algorithm %d", l.Algorithm)
	case l.Rate <= 0:
		return bad("rate %d is not positive", l.Rate)
	case l.Period < time.Millisecond:
		return bad("period %v is shorter than 1ms", l.Period)
	case l.Period%time.Microsecond != 0:
		return bad("period %v is not a whole number of microseconds", l.Period)
	case l.Algorithm == SlidingWindowLog && l.Rate > us:
		// One sorted-set member per unit: past one per microsecond the log
		// is no longer a log of events but of bytes, and costs Redis
		// memory and time in proportion.
		return bad("rate %d per %v is more than one per microsecond, the most a %s keeps", l.Rate, l.Period, l.Algorithm)
	case l.Burst <= 0:
		return bad("burst %d is not positive", l.Burst)
	case l.Algorithm.windowed() && l.Burst != l.Rate:
		return bad("a %s has no burst of its own: burst %d must equal rate %d", l.Algorithm, l.Burst, l.Rate)
	case l.Algorithm == CalendarWindow:
		// Its script counts units and compares window ends, never
		// multiplying a rate by a period: only the count must stay exact.
		if l.Rate >= maxExact {
			return bad("rate %d reaches 2^53", l.Rate)
		}
		if err := l.Calendar.validate(); err != nil {
			return bad("%v", err)
		}
		if l.Period != l.Calendar.Nominal() {
			return bad("a calendar window's period is its calendar's nominal length %v, not %v", l.Calendar.Nominal(), l.Period)
		}
	case l.Algorithm == Pool:
		// pool.lua counts units and never multiplies a rate by a period
		// either; the rate and period are a worldwide limit's, possibly a
		// calendar's nominal one (Policy.Pooled).
		if l.Rate >= maxExact || l.Burst >= maxExact {
			return bad("rate %d or burst %d reaches 2^53", l.Rate, l.Burst)
		}
	case l.Rate > maxExact/us || l.Burst > maxExact/us:
		return bad("rate or burst times period (%d, %d × %dµs) reaches 2^53", l.Rate, l.Burst, us)
	case l.Calendar != (Calendar{}):
		return bad("a %s has no calendar: only a %s does", l.Algorithm, CalendarWindow)
	}
	return nil
}

// capacity is the most units one request can ever be granted.
func (l Limit) capacity() int64 {
	if l.Algorithm == SlidingWindowLog {
		return min(l.Burst, MaxLogUnits)
	}
	return l.Burst
}

// MaxLogUnits is the most units one request may take from a
// SlidingWindowLog: the log writes a member per unit, about a microsecond
// of Redis's time each, and Redis does nothing else meanwhile, for any
// client. 1000 units are about 2ms.
const MaxLogUnits = 1000

// suffix names the limit inside its key: algorithm and period, so that a
// changed rate keeps its state and a changed algorithm never reads another
// algorithm's value.
func (l Limit) suffix() string {
	if l.Algorithm == CalendarWindow {
		return algorithmCodes[l.Algorithm] + ":" + l.Calendar.code()
	}
	return algorithmCodes[l.Algorithm] + ":" + strconv.FormatInt(int64(l.Period/time.Microsecond), 10)
}
