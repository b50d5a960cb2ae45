package ratelease

import (
	"strconv"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// Algorithm is how a Limit counts. The zero value is TokenBucket.
// docs/operations.md ("Choosing an algorithm") compares them.
type Algorithm int

const (
	// TokenBucket: a bucket of Burst units refilled at Rate per Period;
	// over any span T it admits at most Burst + Rate·T/Period.
	TokenBucket Algorithm = iota
	// FixedWindow: at most Rate units in each window of length Period,
	// aligned to the Unix epoch; up to 2·Rate across a window boundary.
	FixedWindow
	// SlidingWindowLog: at most Rate units in every span of length Period,
	// exactly, with one entry per admitted unit (at most 1000 units a
	// request).
	SlidingWindowLog
	// SlidingWindowCounter: the two-window weighted estimate of a sliding
	// window.
	SlidingWindowCounter
	// LeakyBucket: output smoothed to exactly Rate per Period; Allow admits
	// only when the queue is empty, Wait queues up to Burst units.
	LeakyBucket
	// CalendarWindow: at most Rate units in each day, week or month of a
	// calendar (Limit.Calendar), from local midnight to local midnight in
	// its time zone, whatever the window's length in hours. Period is left
	// 0: NewPolicy sets it to the nominal window (24h, 7 days, 31 days).
	// This host's clock must be within an hour of Redis's.
	CalendarWindow
)

// String returns the algorithm's name, such as "token bucket".
func (a Algorithm) String() string {
	if a < 0 || a > CalendarWindow {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return remote.Algorithm(a).String()
}

// MarshalText makes the algorithm a word in JSON, as String says it.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Limit is one rate limit: Rate events per Period. Its zero value is not a
// valid limit; PerSecond and its siblings make the common ones.
type Limit struct {
	// Rate is the number of events allowed per Period; > 0.
	Rate int
	// Period is the length of time Rate applies to: at least a
	// millisecond, a whole number of microseconds, with Rate·Period and
	// Burst·Period in µs below 2^53 (10^9 per second is fine).
	Period time.Duration
	// Burst is TokenBucket's capacity and LeakyBucket's queue; 0 means
	// Rate. The windows have none: 0 or Rate.
	Burst int
	// Algorithm is how the limit counts; the zero value is TokenBucket.
	Algorithm Algorithm
	// Calendar places a CalendarWindow's windows.
	Calendar Calendar
}

// CalendarUnit is the length of a CalendarWindow's windows.
type CalendarUnit string

// The calendar units.
const (
	// CalendarDay: from local midnight to the next (23 to 25 hours; where
	// a DST change skips midnight, from the day's first instant).
	CalendarDay CalendarUnit = "day"
	// CalendarWeek: from local midnight of Calendar.FirstDay, for 7 days.
	CalendarWeek CalendarUnit = "week"
	// CalendarMonth: from local midnight of the 1st to the next month's.
	CalendarMonth CalendarUnit = "month"
)

// calendarUnits are the engine's units by name.
var calendarUnits = map[CalendarUnit]remote.CalendarUnit{
	CalendarDay: remote.CalendarDay, CalendarWeek: remote.CalendarWeek, CalendarMonth: remote.CalendarMonth,
}

// Calendar says where a CalendarWindow's windows begin and end.
type Calendar struct {
	Unit CalendarUnit
	// Location is the time zone whose midnights start the windows; nil
	// means UTC. Load it by name: time.Local differs by machine.
	Location *time.Location
	// FirstDay is the day a CalendarWeek starts on.
	FirstDay time.Weekday
}

// PerCalendarDay returns a quota of n events per calendar day in loc
// (nil: UTC), reset at its local midnight.
func PerCalendarDay(n int, loc *time.Location) Limit {
	return Limit{Rate: n, Algorithm: CalendarWindow, Calendar: Calendar{Unit: CalendarDay, Location: loc}}
}

// PerCalendarWeek returns a quota of n events per calendar week in loc
// (nil: UTC), starting at local midnight of first.
func PerCalendarWeek(n int, loc *time.Location, first time.Weekday) Limit {
	return Limit{Rate: n, Algorithm: CalendarWindow, Calendar: Calendar{Unit: CalendarWeek, Location: loc, FirstDay: first}}
}

// PerCalendarMonth returns a quota of n events per calendar month in loc
// (nil: UTC), reset at local midnight of each month's 1st.
func PerCalendarMonth(n int, loc *time.Location) Limit {
	return Limit{Rate: n, Algorithm: CalendarWindow, Calendar: Calendar{Unit: CalendarMonth, Location: loc}}
}

// PerSecond returns a token bucket of rate events per second, burst rate.
func PerSecond(rate int) Limit { return Limit{Rate: rate, Period: time.Second, Burst: rate} }

// PerMinute returns a token bucket of rate events per minute, burst rate.
func PerMinute(rate int) Limit { return Limit{Rate: rate, Period: time.Minute, Burst: rate} }

// PerHour returns a token bucket of rate events per hour, burst rate.
func PerHour(rate int) Limit { return Limit{Rate: rate, Period: time.Hour, Burst: rate} }

// String formats the limit as "10 req/s (burst 10)", "100 req/min (fixed
// window)" or "5 req/s (leaky bucket, queue 10)".
func (l Limit) String() string { return tier.LimitName(l.resolved()) }

// calendarUnit returns the engine's unit u names; for a name it does not
// know, one that NewPolicy refuses.
func calendarUnit(u CalendarUnit) remote.CalendarUnit {
	if r, ok := calendarUnits[u]; ok || u == "" {
		return r
	}
	return remote.CalendarMonth + 1
}

// resolved returns l with Burst filled in, as the scripts see it.
func (l Limit) resolved() remote.Limit {
	r := remote.Limit{Algorithm: remote.Algorithm(l.Algorithm), Rate: int64(l.Rate), Period: l.Period, Burst: int64(l.Burst)}
	if l.Burst == 0 {
		r.Burst = r.Rate
	}
	if l.Calendar != (Calendar{}) {
		r.Calendar = remote.Calendar{Unit: calendarUnit(l.Calendar.Unit), Location: l.Calendar.Location, FirstDay: l.Calendar.FirstDay}
		if r.Calendar.Location == nil {
			r.Calendar.Location = time.UTC
		}
		if r.Period == 0 && l.Algorithm == CalendarWindow {
			r.Period = r.Calendar.Nominal()
		}
	}
	return r
}
