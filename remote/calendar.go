package remote

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CalendarUnit is the length of a CalendarWindow's windows: a day, a week
// or a month of a calendar.
type CalendarUnit uint8

// The calendar units. The zero value is none (not a calendar limit).
const (
	CalendarDay CalendarUnit = iota + 1
	CalendarWeek
	CalendarMonth
)

func (u CalendarUnit) String() string {
	switch u {
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	}
	return "CalendarUnit(" + strconv.Itoa(int(u)) + ")"
}

// Calendar aligns a CalendarWindow's windows to the calendar of Location:
// each day, week (starting on FirstDay) or month begins at the first
// instant of its first civil date (local midnight; on a day whose midnight
// a DST change skips, the first instant that exists) and ends where the
// next begins, whatever its length in hours (a day of a DST change has 23
// or 25, a month 28 to 31 days).
type Calendar struct {
	Unit     CalendarUnit
	Location *time.Location
	// FirstDay is the day a Week starts on; ignored for the others.
	FirstDay time.Weekday
}

// Nominal is the calendar's usual window length: 24 hours, 7 days or 31
// days. It stands in for a window's length where one number must do (a
// limit's Period: its rate per second, the outage fallback's share, a
// header's window), never for a boundary.
func (c Calendar) Nominal() time.Duration {
	switch c.Unit {
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 31 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// next returns the end of the window holding t: the start of the next.
func (c Calendar) next(t time.Time) time.Time {
	_, e := c.window(t)
	return e
}

// window returns the start and end of the window holding t: s <= t < e.
// The windows are placed by civil dates, never by the date of a
// normalized instant (time.Date's midnight of a day without one may be
// the eve's 23:00): the window's first date is t's local date, less the
// days back to FirstDay (a week) or to the 1st (a month), and it begins at
// the first instant whose local date is that date or later (a date a zone
// skips, as Samoa skipped 2011-12-30, begins where the next date does).
// It ends where the window of the next first date (a day, 7 days or a
// month on) begins; should the local date go back across a boundary, the
// instant is in the window that began last.
func (c Calendar) window(t time.Time) (s, e time.Time) {
	d := civil(t.In(c.Location))
	switch c.Unit {
	case CalendarWeek:
		d -= (int64(weekday(d)) - int64(c.FirstDay) + 7) % 7
	case CalendarMonth:
		y, m, _ := date(d)
		d = days(y, m, 1)
	}
	s = firstInstant(d, c.Location)
	for {
		next := c.after(d)
		e = firstInstant(next, c.Location)
		if e.After(t) {
			return s, e
		}
		d, s = next, e
	}
}

// after returns the first date of the window after the one whose first
// date is d.
func (c Calendar) after(d int64) int64 {
	switch c.Unit {
	case CalendarWeek:
		return d + 7
	case CalendarMonth:
		y, m, _ := date(d)
		return days(y, m+1, 1)
	}
	return d + 1
}

// civil returns t's date on its own clock (t's location), in days since
// 1970-01-01.
func civil(t time.Time) int64 {
	y, m, d := t.Date()
	return days(y, m, d)
}

// days numbers the civil date y-m-d (normalized as time.Date does: month
// 13 is January of the next year) in days since 1970-01-01. UTC has no
// offset changes: its midnights are the calendar's own arithmetic.
func days(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// date returns the civil date numbered d (see days).
func date(d int64) (int, time.Month, int) {
	return time.Unix(d*86400, 0).UTC().Date()
}

// weekday is the day of the week of the date numbered d (1970-01-01 was
// a Thursday).
func weekday(d int64) time.Weekday {
	return time.Weekday(((d+4)%7 + 7) % 7)
}

// firstInstant returns the first instant whose date in loc is the date
// numbered d, or later. Within one of the zone's periods of constant
// offset o, the local date reaches d at the instant midnight - o (its
// wall clock read as UTC): the answer is the first period, from two days
// before that instant at the offset of the midnight read as UTC (no zone's
// offset changes by that much; time.FixedZone's may be days), in which
// that instant, or the period's start if later, falls.
func firstInstant(d int64, loc *time.Location) time.Time {
	midnight := d * 86400 // the date's midnight, as UTC seconds
	_, off := time.Unix(midnight, 0).In(loc).Zone()
	t := time.Unix(midnight-int64(max(0, off))-48*3600, 0).In(loc)
	for {
		_, off := t.Zone()
		at := t
		if reach := time.Unix(midnight-int64(off), 0).In(loc); reach.After(t) {
			at = reach
		}
		_, end := t.ZoneBounds()
		if end.IsZero() || at.Before(end) || !end.After(t) {
			return at
		}
		t = end
	}
}

// maxOffset is the farthest a calendar's zone may be from UTC, in seconds.
const maxOffset = 366 * 86400

// validate reports why c cannot place windows, or nil.
func (c Calendar) validate() error {
	switch {
	case c.Unit < CalendarDay || c.Unit > CalendarMonth:
		return fmt.Errorf("unknown calendar unit %d", c.Unit)
	case c.Location == nil:
		return fmt.Errorf("a calendar needs a Location")
	case c.Location == time.Local:
		// Its name is "Local" on every machine, whatever zone it is: two
		// machines in different zones would share a key's state and
		// disagree on its windows.
		return fmt.Errorf("a calendar in time.Local differs by machine: name its zone (time.LoadLocation)")
	case c.FirstDay < time.Sunday || c.FirstDay > time.Saturday:
		return fmt.Errorf("first day %d is not a weekday", c.FirstDay)
	}
	// (time.FixedZone takes any offset: a year of it keeps every date's
	// arithmetic far from overflowing.)
	if _, off := time.Now().In(c.Location).Zone(); off < -maxOffset || off > maxOffset {
		return fmt.Errorf("zone %q is %v from UTC, more than a year", c.Location, time.Duration(off)*time.Second)
	}
	return nil
}

// code names the calendar inside a Redis key: unit, zone (and first day
// of a week), so that a changed zone or week never reads another's count.
// A zone of one offset (time.FixedZone, UTC) is named with it: its name
// is anybody's ("" too). Two zones of the tz database's kind (with
// transitions) that share a name share a count.
func (c Calendar) code() string {
	zone, t := c.Location.String(), time.Unix(0, 0).In(c.Location)
	if start, end := t.ZoneBounds(); start.IsZero() && end.IsZero() {
		_, off := t.Zone()
		zone += "@" + strconv.Itoa(off)
	}
	s := c.Unit.String() + ":" + zone
	if c.Unit == CalendarWeek {
		s += ":" + strconv.Itoa(int(c.FirstDay))
	}
	return s
}

// skew is how far this host's clock may be behind Redis's for a calendar
// limit's windows to be placed right: the scripts get the start and end of
// the window holding this host's now plus skew, and pick by Redis's TIME
// (calendarwindow.lua): that window, or the one before it. Ahead of
// Redis's, the host's clock may be almost as far as that window is long.
// So Redis's time is in the window whose both ends the script has, but in
// the last skew of a window (by this host's clock).
const skew = time.Hour

// calendarWindow returns the start and end, in µs since the Unix epoch,
// of the window holding now + skew.
func (c Calendar) calendarWindow(now time.Time) (int64, int64) {
	s, e := c.window(now.Add(skew))
	return s.UnixMicro(), e.UnixMicro()
}

// ErrClock is wrapped by the error of a call whose script could not place
// Redis's TIME in the calendar windows this host's clock named
// (calendarwindow.lua): Redis answered; this host's clock is far from
// Redis's. It is not Redis failing, and a caller should not count it
// against Redis's health.
var ErrClock = errors.New("remote: this host's clock is too far from Redis's to place a calendar window")

// clockScriptError begins calendarwindow.lua's error.
const clockScriptError = "ratelease: calendar window "

// clockError is calendarwindow.lua's error, wrapping ErrClock.
type clockError struct{ err error }

func (e *clockError) Error() string   { return e.err.Error() }
func (e *clockError) Unwrap() []error { return []error{e.err, ErrClock} }

// clockErr returns err wrapping ErrClock when it is calendarwindow.lua's
// error, else err.
func clockErr(err error) error {
	var re redis.Error
	if errors.As(err, &re) && strings.Contains(re.Error(), clockScriptError) {
		return &clockError{err}
	}
	return err
}
