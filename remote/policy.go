package remote

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxNameLen is the longest policy name, in bytes.
const MaxNameLen = 128

// MaxKeyLen is the longest key, in bytes. Keys may hold any bytes.
const MaxKeyLen = 1024

// MaxLimits is the most limits one policy may have.
const MaxLimits = 16

// Policy is a validated, named set of limits, compiled once for the scripts.
// All its limits must grant for a request to be granted. A Policy is
// immutable and safe for concurrent use.
type Policy struct {
	name     string
	limits   []Limit
	capacity int64
	// rate is the smallest sustained rate of the limits, in units per second.
	rate float64
	// unitNs is, per limit, the ns a token bucket takes to refill one unit
	// (0 for the other algorithms: their reset does not move with units).
	unitNs []int64
	// args are the scripts' per-limit ARGV, converted to strings once;
	// a CalendarWindow's last two are set per window (calendarArgs).
	args []any
	// calendars are the indices of the CalendarWindow limits; cal, their
	// ARGV for the windows of the latest call (see calendarArgs).
	calendars []int
	cal       atomic.Pointer[calendarArgs]
	// tails are the part of each key after the caller's key: "}:" + suffix
	// per limit, then membersTail and blockTail; tailsLen is the limits'
	// tails' length.
	tails    []string
	tailsLen int
	// uses has bit a set for each Algorithm a of the policy's limits.
	uses uint8
	// scripts are assembled for exactly the algorithms the policy uses.
	scripts *scripts
	// oneBucket: the policy is one token or leaky bucket (bucket.lua).
	oneBucket bool
	// id is the policy's number (see ID).
	id int
	// slot is where the last user of the policy to record one keeps its
	// state of it (see Slot).
	slot atomic.Pointer[Slot]
	// limitsSig spells the limits, in a canonical order (see LimitsKey).
	limitsSig string
	// pooled is the policy of this one's regional pools, made once (see
	// Pooled); global, of a pooled policy, the policy it pools.
	poolOnce sync.Once
	pooled   *Policy
	global   *Policy
}

// policies counts the policies NewPolicy has made (see Policy.ID).
var policies atomic.Int64

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// ID returns the policy's number: NewPolicy numbers the policies of a
// process 0, 1, 2, … in the order it makes them, so that of two policies
// the later made is known. Numbers are never reused. (Where a user keeps
// its state of a policy is its own: see Slot.)
func (p *Policy) ID() int { return p.id }

// Slot is where a user of policies (a Limiter's engine) keeps its state
// of one: Owner names the user, Index the place in the user's own
// numbering. Each user numbers the policies it sees itself, so that what
// it does never depends on the policies other code made.
type Slot struct {
	Owner *Owner
	Index int
}

// Owner names a user of policies in its Slots: each user makes one of its
// own (it is never empty, so that two are never one).
type Owner struct{ _ byte }

// Slot returns where the last user to record one (SetSlot) keeps its
// state of p, or nil: one atomic load, so that a user finds its state of
// p without hashing while it is the last to have recorded it.
func (p *Policy) Slot() *Slot { return p.slot.Load() }

// SetSlot records where a user keeps its state of p.
func (p *Policy) SetSlot(s *Slot) { p.slot.Store(s) }

// NewPolicy validates name and limits and compiles them. The name must be 1
// to MaxNameLen bytes without ':', '{', '}' or whitespace (it is part of
// every key, and the ':' after it ends it); errors wrap ErrName. Limits: 1 to
// MaxLimits, each valid (see Limit.validate), no two with the same algorithm
// and period (they would share state); errors wrap ErrLimit.
func NewPolicy(name string, limits []Limit) (*Policy, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if len(limits) == 0 || len(limits) > MaxLimits {
		return nil, fmt.Errorf("%w: a policy needs 1 to %d limits, got %d", ErrInvalidLimit, MaxLimits, len(limits))
	}
	p := &Policy{name: name, limits: append([]Limit(nil), limits...)}
	seen := make(map[string]int, len(limits))
	var mask uint8
	for i, l := range p.limits {
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		sfx := l.suffix()
		if j, dup := seen[sfx]; dup {
			return nil, fmt.Errorf("%w: limits %d and %d are both a %s per %v", ErrInvalidLimit, j, i, l.Algorithm, l.Period)
		}
		seen[sfx] = i
		mask |= 1 << l.Algorithm
		if i == 0 || l.capacity() < p.capacity {
			p.capacity = l.capacity()
		}
		if r := float64(l.Rate) / l.Period.Seconds(); i == 0 || r < p.rate {
			p.rate = r
		}
		var unit int64
		if l.Algorithm == TokenBucket {
			unit = int64(l.Period) / l.Rate
		}
		p.unitNs = append(p.unitNs, unit)
		if l.Algorithm == CalendarWindow {
			p.calendars = append(p.calendars, i)
		}
		p.args = append(p.args,
			strconv.Itoa(int(l.Algorithm)),
			strconv.FormatInt(l.Rate, 10),
			strconv.FormatInt(l.Period.Microseconds(), 10),
			strconv.FormatInt(l.Burst, 10))
		tail := "}:" + sfx
		p.tails = append(p.tails, tail)
		p.tailsLen += len(tail)
	}
	p.tails = append(p.tails, membersTail, blockTail) // once here, not per lease
	sigs := make([]string, 0, len(p.limits))
	for _, l := range p.limits {
		sig := fmt.Sprintf("%s %d per %v, burst %d", l.Algorithm, l.Rate, l.Period, l.Burst)
		if l.Algorithm == CalendarWindow {
			sig = fmt.Sprintf("%s %d per %s", l.Algorithm, l.Rate, l.Calendar.code())
		}
		sigs = append(sigs, sig)
	}
	slices.Sort(sigs)
	p.limitsSig = strings.Join(sigs, "; ")
	p.uses = mask
	p.oneBucket = len(p.limits) == 1 && (mask == 1<<TokenBucket || mask == 1<<LeakyBucket)
	p.scripts = scriptsFor(mask)
	p.id = int(policies.Add(1) - 1)
	return p, nil
}

// calendarArgs are a policy's limits' ARGV with its CalendarWindows' for
// the windows of host times from from up to until (µs).
type calendarArgs struct {
	from, until int64
	args        []any
}

// calendarArgs returns p's limits' ARGV for a call at this host's time
// now: a CalendarWindow's rate is followed by the start and end (µs) of
// the window holding now + skew (in place of its period and burst), for
// the script to place Redis's TIME (calendarwindow.lua). They are made
// again once now + skew is out of any of those windows: past its end, or
// before its start (a host clock set back, after it ran ahead).
func (p *Policy) calendarArgs(now time.Time) []any {
	us := now.UnixMicro()
	if c := p.cal.Load(); c != nil && c.from <= us && us < c.until {
		return c.args
	}
	c := &calendarArgs{from: math.MinInt64, until: math.MaxInt64, args: slices.Clone(p.args)}
	for _, i := range p.calendars {
		b1, b2 := p.limits[i].Calendar.calendarWindow(now)
		c.args[4*i+2], c.args[4*i+3] = strconv.FormatInt(b1, 10), strconv.FormatInt(b2, 10)
		c.from = max(c.from, b1-skew.Microseconds())
		c.until = min(c.until, b2-skew.Microseconds())
	}
	p.cal.Store(c)
	return c.args
}

// CheckName reports why name cannot name a policy or a concurrency limit,
// as an error wrapping ErrName, or nil: it must be 1 to MaxNameLen bytes
// without ':', '{', '}' or whitespace (it is part of every key, and the
// ':' after it ends it).
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen || strings.ContainsAny(name, ":{} \t\r\n") {
		return fmt.Errorf("%w: %q (1 to %d bytes, no ':', '{', '}' or whitespace)", ErrInvalidPolicy, name, MaxNameLen)
	}
	return nil
}

// LimitsKey spells p's limits in a canonical order: two policies have
// the same limits, in any order, when their LimitsKeys are equal.
func (p *Policy) LimitsKey() string { return p.limitsSig }

// UnitRefill returns how long (ns) limit i takes to refill one unit, when it
// is a token bucket, and 0 otherwise.
func (p *Policy) UnitRefill(i int) int64 { return p.unitNs[i] }

// Uses reports whether any of the policy's limits counts with a.
func (p *Policy) Uses(a Algorithm) bool { return p.uses&(1<<a) != 0 }

// Limits returns the policy's limits. The slice must not be modified.
func (p *Policy) Limits() []Limit { return p.limits }

// Capacity is the most units one request can ever be granted: the smallest
// capacity of the policy's limits.
func (p *Policy) Capacity() int64 { return p.capacity }

// Rate is the most units per second the policy admits in the long run: the
// smallest Rate/Period of its limits.
func (p *Policy) Rate() float64 { return p.rate }

// Refundable reports whether a refund of units granted at Redis time at
// (µs) would give anything back at Redis time now: whether any limit of the
// policy would take some of them back (see refund.lua). A token bucket takes
// back only what could not have refilled meanwhile; a fixed window only
// into the window of the grant; a sliding window counter into that window or
// the next; a log and a leaky bucket exactly.
func (p *Policy) Refundable(units, at, now int64) bool {
	for _, l := range p.limits {
		period := int64(l.Period / time.Microsecond)
		switch l.Algorithm {
		case TokenBucket:
			// The refund gives back units·period - elapsed·rate, in the
			// debt's 1/rate µs: something when positive.
			if elapsed := max(0, now-at); float64(elapsed)*float64(l.Rate) < float64(units)*float64(period) {
				return true
			}
		case FixedWindow:
			if at/period == now/period {
				return true
			}
		case SlidingWindowCounter:
			if at/period >= now/period-1 {
				return true
			}
		case CalendarWindow:
			c := l.Calendar
			if c.next(time.UnixMicro(at)).Equal(c.next(time.UnixMicro(now))) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// MaxCapacity is the largest capacity of the policy's limits: the most
// units a refund can give back to any of them.
func (p *Policy) MaxCapacity() int64 {
	var c int64
	for _, l := range p.limits {
		c = max(c, l.capacity())
	}
	return c
}
