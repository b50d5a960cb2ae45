package ratelease

import (
	"strconv"
	"time"

	"github.com/ratelease/ratelease/remote"
	"github.com/ratelease/ratelease/tier"
)

// Algorithm is how a Limit counts. The zero value is TokenBucket.
type Algorithm int

const (
	// TokenBucket: a bucket of Burst units refilled at Rate per Period.
	// Allows bursts up to Burst; over any span T admits at most
	// Burst + Rate·T/Period. One integer of state per key (GCRA).
	TokenBucket Algorithm = iota
	// FixedWindow: at most Rate units in each window of length Period,
	// aligned to the Unix epoch. Cheapest; admits up to 2·Rate across a
	// window boundary.
	FixedWindow
	// SlidingWindowLog: at most Rate units in every span of length Period,
	// exactly. Keeps one entry per admitted unit: memory grows with Rate.
	SlidingWindowLog
	// SlidingWindowCounter: the two-window weighted estimate of a sliding
	// window; two counters per key, close to the log's accuracy.
	SlidingWindowCounter
	// LeakyBucket: output smoothed to exactly Rate per Period. Allow admits
	// only when the queue is empty; Wait queues up to Burst units and
	// sleeps until its slot.
	LeakyBucket
	// CalendarWindow: at most Rate units in each day, week or month of a
	// calendar (Limit.Calendar), from local midnight to local midnight in
	// its time zone, whatever the window's length in hours (a day of a DST
	// change, a month of 28 to 31 days). A window begins at the first
	// instant of its first civil date (on a day whose midnight a DST change
	// skips, as where DST begins at 00:00 in Santiago, the first instant
	// that exists: 01:00) and ends where the next begins. A quota: "10,000 calls per
	// calendar month". Period is left 0: NewPolicy sets it to the nominal
	// window (24h, 7 days, 31 days), which stands in where one length must
	// do (the outage fallback's share, a header's window), never for a
	// boundary. Decided on Redis's clock, as
	// every limit is; each call names the window that holds this host's
	// time plus an hour, as its calendar places it, and Redis's clock picks
	// that window or the one before, so the host's clock must be no more
	// than an hour behind Redis's, nor almost a window ahead (a call then
	// fails, whatever is decided, but is not counted against Redis's
	// breaker). Its Rate may be any count below 2^53. In lease mode it is
	// leased as a FixedWindow is: a lease ends at the window's end.
	CalendarWindow
)

// String returns the algorithm's name, such as "token bucket".
func (a Algorithm) String() string {
	if a < 0 || a > CalendarWindow {
		return "Algorithm(" + strconv.Itoa(int(a)) + ")"
	}
	return remote.Algorithm(a).String()
}

// MarshalText makes the algorithm a word in JSON and logs, as String says
// it.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Limit is one rate limit: Rate events per Period. Its zero value is not a
// valid limit; PerSecond, PerMinute and PerHour make the common ones.
type Limit struct {
	// Rate is the number of events allowed per Period; > 0.
	Rate int
	// Period is the length of time Rate applies to; > 0, at least a
	// millisecond, and a whole number of microseconds. Rate·Period and
	// Burst·Period in µs must stay below 2^53 (10^9 per second is fine);
	// a SlidingWindowLog, which keeps one entry per unit, takes at most one
	// unit per microsecond.
	Period time.Duration
	// Burst is the bucket capacity of TokenBucket (the most admitted at
	// once) and the queue length of LeakyBucket; 0 means Rate. The window
	// algorithms have no burst of their own: Burst must be 0 or Rate.
	Burst int
	// Algorithm is how the limit counts; the zero value is TokenBucket.
	Algorithm Algorithm
	// Calendar places a CalendarWindow's windows; the other algorithms
	// have none.
	Calendar Calendar
}

// CalendarUnit is the length of a CalendarWindow's windows.
type CalendarUnit int

// The calendar units. The zero value is none.
const (
	// CalendarDay: from local midnight to the next (23 to 25 hours; a
	// midnight a DST change skips is the day's first instant, 01:00).
	CalendarDay CalendarUnit = iota + 1
	// CalendarWeek: from local midnight of Calendar.FirstDay, for 7 days.
	CalendarWeek
	// CalendarMonth: from local midnight of the 1st to that of the next
	// month's.
	CalendarMonth
)

// String returns "day", "week" or "month".
func (u CalendarUnit) String() string { return remote.CalendarUnit(u).String() }

// MarshalText makes the unit a word in JSON and logs, as String says it.
func (u CalendarUnit) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// Calendar says where a CalendarWindow's windows begin and end.
type Calendar struct {
	// Unit is the window's length: CalendarDay, CalendarWeek or
	// CalendarMonth.
	Unit CalendarUnit
	// Location is the time zone whose midnights start the windows; nil
	// means UTC. Not time.Local, whose zone differs by machine: load the
	// zone by name (time.LoadLocation("Europe/Berlin")).
	Location *time.Location
	// FirstDay is the day a CalendarWeek starts on (time.Sunday is the
	// zero value); ignored for the others.
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

// resolved returns l with Burst filled in, as the scripts see it.
func (l Limit) resolved() remote.Limit {
	r := remote.Limit{Algorithm: remote.Algorithm(l.Algorithm), Rate: int64(l.Rate), Period: l.Period, Burst: int64(l.Burst)}
	if l.Burst == 0 {
		r.Burst = r.Rate
	}
	if l.Calendar != (Calendar{}) {
		r.Calendar = remote.Calendar{Unit: remote.CalendarUnit(l.Calendar.Unit), Location: l.Calendar.Location, FirstDay: l.Calendar.FirstDay}
		if r.Calendar.Location == nil {
			r.Calendar.Location = time.UTC
		}
		if r.Period == 0 && l.Algorithm == CalendarWindow {
			r.Period = r.Calendar.Nominal()
		}
	}
	return r
}
