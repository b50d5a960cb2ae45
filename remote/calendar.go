package remote

import (
	"fmt"
	"strconv"
	"time"
)

// CalendarUnit is the length of a CalendarWindow's windows: a day, a week
// or a month of a calendar.
type CalendarUnit uint8

// The calendar units. The zero value is none (not a calendar limit).
const (
	Day CalendarUnit = iota + 1
	Week
	Month
)

func (u CalendarUnit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return "CalendarUnit(" + strconv.Itoa(int(u)) + ")"
}

// Calendar aligns a CalendarWindow's windows to the calendar of Location:
// each day, week (starting on FirstDay) or month begins at local midnight,
// whatever its length in hours (a day of a DST change has 23 or 25, a
// month 28 to 31 days).
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
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 31 * 24 * time.Hour
	}
	return 24 * time.Hour
}

// Start returns the start of the window holding t: local midnight of t's
// day, of its week's FirstDay, or of its month's first day. (A midnight
// that a DST change skips is the day's first instant: time.Date's.)
func (c Calendar) Start(t time.Time) time.Time {
	t = t.In(c.Location)
	y, m, d := t.Date()
	switch c.Unit {
	case Week:
		d -= (int(t.Weekday()) - int(c.FirstDay) + 7) % 7
	case Month:
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, c.Location)
}

// Next returns the end of the window holding t: the start of the next.
func (c Calendar) Next(t time.Time) time.Time {
	s := c.Start(t)
	y, m, d := s.Date()
	switch c.Unit {
	case Day:
		d++
	case Week:
		d += 7
	case Month:
		m++
	}
	return time.Date(y, m, d, 0, 0, 0, 0, c.Location)
}

// validate reports why c cannot place windows, or nil.
func (c Calendar) validate() error {
	switch {
	case c.Unit < Day || c.Unit > Month:
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
	return nil
}

// code names the calendar inside a Redis key: unit, zone (and first day
// of a week), so that a changed zone or week never reads another's count.
func (c Calendar) code() string {
	s := c.Unit.String() + ":" + c.Location.String()
	if c.Unit == Week {
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
	t := now.Add(skew)
	return c.Start(t).UnixMicro(), c.Next(t).UnixMicro()
}
