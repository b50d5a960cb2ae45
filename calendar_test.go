package ratelease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/internal/redistest"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// newEnvAt is newEnv with both clocks at start, which may be before
// newEnv's.
func newEnvAt(t *testing.T, start time.Time, opts ...ratelease.Option) *env {
	t.Helper()
	mr := redistest.StartMini(t)
	mr.Advance(start.Sub(mr.Now())) // (back, maybe: no key is held yet)
	clk := clock.NewManual(mr.Now())
	client := mr.Client(t)
	l, err := ratelease.New(client, append([]ratelease.Option{ratelease.WithExact(), ratelease.WithClock(clk), ratelease.WithRedisTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return &env{mr: mr, clock: clk, l: l}
}

// at moves the env (Redis's TIME and the Limiter's clock) to u, later than
// its time now.
func (e *env) at(t *testing.T, u time.Time) {
	t.Helper()
	d := u.Sub(e.clock.Now())
	if d < 0 {
		t.Fatalf("cannot go back from %v to %v", e.clock.Now(), u)
	}
	e.advance(d)
}

// Calendar windows end at local midnight, whatever the day's length: a
// quota's ResetAfter and RetryAfter point at it, and a new window admits.
func TestCalendarWindowBoundaries(t *testing.T) {
	berlin, ny := zone(t, "Europe/Berlin"), zone(t, "America/New_York")
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		limit ratelease.Limit
		at    time.Time
		want  time.Duration // until the window's end
	}{
		// Spring forward: 2026-03-29 has 23 hours in Berlin.
		{"day of 23h", ratelease.PerCalendarDay(2, berlin), time.Date(2026, 3, 29, 0, 30, 0, 0, berlin), 22*time.Hour + 30*time.Minute},
		// Fall back: 2026-10-25 has 25 hours.
		{"day of 25h", ratelease.PerCalendarDay(2, berlin), time.Date(2026, 10, 25, 0, 30, 0, 0, berlin), 24*time.Hour + 30*time.Minute},
		{"month end", ratelease.PerCalendarMonth(2, nil), time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC), time.Hour},
		{"February", ratelease.PerCalendarMonth(2, berlin), time.Date(2026, 2, 28, 12, 0, 0, 0, berlin), 12 * time.Hour},
		{"leap February", ratelease.PerCalendarMonth(2, nil), time.Date(2028, 2, 28, 12, 0, 0, 0, time.UTC), 36 * time.Hour},
		{"year end", ratelease.PerCalendarMonth(2, ny), time.Date(2026, 12, 31, 18, 0, 0, 0, ny), 6 * time.Hour},
		// Thursday noon to Monday's midnight; to Sunday's.
		{"week from Monday", ratelease.PerCalendarWeek(2, ny, time.Monday), time.Date(2026, 11, 26, 12, 0, 0, 0, ny), 3*24*time.Hour + 12*time.Hour},
		{"week from Sunday", ratelease.PerCalendarWeek(2, ny, time.Sunday), time.Date(2026, 11, 26, 12, 0, 0, 0, ny), 2*24*time.Hour + 12*time.Hour},
		// A week over the fall back in New York (2026-11-01): 7 days and
		// an hour from Sunday's midnight.
		{"week of 169h", ratelease.PerCalendarWeek(2, ny, time.Sunday), time.Date(2026, 11, 1, 0, 0, 0, 0, ny), 7*24*time.Hour + time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.at(t, c.at)
			p := policy(t, "quota", c.limit)
			res, err := e.l.AllowN(ctx, p, "k", 2)
			if err != nil || !res.Allowed || res.ResetAfter != c.want {
				t.Fatalf("AllowN(2) at %v: %+v, %v; want admitted, reset after %v", c.at, res, err, c.want)
			}
			res, err = e.l.Allow(ctx, p, "k")
			if err != nil || res.Allowed || res.RetryAfter != c.want || res.Limit != p.Limits()[0] {
				t.Fatalf("a third at %v: %+v, %v; want denied until the window's end, %v", c.at, res, err, c.want)
			}
			e.advance(c.want - time.Microsecond)
			if res, _ := e.l.Allow(ctx, p, "k"); res.Allowed {
				t.Fatalf("admitted a microsecond before the window's end: %+v", res)
			}
			e.advance(time.Microsecond)
			if res, err := e.l.AllowN(ctx, p, "k", 2); err != nil || !res.Allowed {
				t.Fatalf("at the window's end: %+v, %v; want a fresh window", res, err)
			}
		})
	}
}

// A quota beside a rate limit: both decide, atomically; the quota names
// itself when it denies, and Refund and Charge reach it.
func TestCalendarWindowInAPolicy(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	ctx := context.Background()
	e := newEnv(t)
	e.at(t, time.Date(2026, 6, 1, 23, 0, 0, 0, berlin))
	p := policy(t, "api", ratelease.PerSecond(10), ratelease.PerCalendarDay(5, berlin))
	if got := p.Limits()[1].String(); got != "5 req/calendar day (Europe/Berlin)" {
		t.Errorf("String() = %q", got)
	}
	for i := 0; i < 5; i++ {
		if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
			t.Fatalf("request %d: %+v", i, res)
		}
	}
	e.advance(time.Second) // the rate limit has refilled; the day's quota has not
	res, _ := e.l.Allow(ctx, p, "k")
	if res.Allowed || res.Limit != p.Limits()[1] || res.RetryAfter != time.Hour-time.Second {
		t.Fatalf("the sixth: %+v; want the day's quota to deny until midnight", res)
	}
	if err := e.l.Refund(ctx, p, "k", 1); err != nil {
		t.Fatal(err)
	}
	if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("after a refund: %+v", res)
	}
	res, err := e.l.Charge(ctx, p, "k", 3)
	if err != nil || res.Debt != 3 || res.Limit != p.Limits()[1] {
		t.Fatalf("Charge(3): %+v, %v; want the quota 3 in debt", res, err)
	}
	e.advance(time.Hour) // a new day forgives it
	if res, _ := e.l.Allow(ctx, p, "k"); !res.Allowed {
		t.Fatalf("the next day: %+v", res)
	}
}

// In lease mode a calendar quota is leased like a fixed window: three
// instances flooding a key share it from leases that end at the calendar's
// boundary, so no window (a Berlin day of 23 hours, of 25, New York's
// months) admits more than its quota, and the flood takes nearly all of
// it, mostly from memory. Around each boundary, with the instances' clocks
// on Redis's, or half an hour ahead or behind (the scripts place Redis's
// time in the host's windows); between boundaries, time jumps (idle).
// Simulated time: Redis's TIME and the instances' clock move together.
func TestCalendarWindowInLeaseMode(t *testing.T) {
	berlin, ny := zone(t, "Europe/Berlin"), zone(t, "America/New_York")
	day := func(y int, m time.Month, d int, loc *time.Location) time.Time {
		return time.Date(y, m, d, 0, 0, 0, 0, loc)
	}
	for _, c := range []struct {
		name       string
		limits     []ratelease.Limit
		cal        calWindows // the quota's, to count admissions by window
		quota      int
		boundaries []time.Time
		skew       time.Duration // the instances' clocks ahead of Redis's
	}{
		{"Berlin days across DST", []ratelease.Limit{ratelease.PerCalendarDay(3000, berlin)},
			calWindows{ratelease.CalendarDay, berlin}, 3000,
			[]time.Time{day(2026, 3, 29, berlin), day(2026, 3, 30, berlin), day(2026, 3, 31, berlin)}, 0},
		{"Berlin day of 25h, with a rate limit, host ahead", []ratelease.Limit{ratelease.PerSecond(100), ratelease.PerCalendarDay(1500, berlin)},
			calWindows{ratelease.CalendarDay, berlin}, 1500,
			[]time.Time{day(2026, 10, 25, berlin), day(2026, 10, 26, berlin)}, 30 * time.Minute},
		{"New York months, host behind", []ratelease.Limit{ratelease.PerCalendarMonth(8000, ny)},
			calWindows{ratelease.CalendarMonth, ny}, 8000,
			[]time.Time{day(2026, 2, 1, ny), day(2026, 3, 1, ny), day(2026, 4, 1, ny)}, -30 * time.Minute},
		{"a small monthly quota", []ratelease.Limit{ratelease.PerCalendarMonth(2000, nil)},
			calWindows{ratelease.CalendarMonth, time.UTC}, 2000,
			[]time.Time{day(2026, 2, 1, time.UTC), day(2026, 3, 1, time.UTC)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			const (
				step      = 20 * time.Millisecond
				perStep   = 2 // requests per instance per step: 100/s each
				instances = 3
			)
			// Around each boundary: as long as the flood (or a rate limit
			// beside the quota, when slower) takes to use a whole quota,
			// and half as long again, so that every window opening at a
			// boundary has its quota taken, and is then denied a while.
			flood := float64(instances*perStep) / step.Seconds() // units/s
			for _, r := range c.limits {
				if r.Algorithm != ratelease.CalendarWindow {
					flood = min(flood, float64(r.Rate)/r.Period.Seconds())
				}
			}
			around := time.Duration(1.5 * float64(c.quota) / flood * float64(time.Second)).Truncate(step)
			mr := redistest.StartMini(t)
			mr.Advance(c.boundaries[0].Add(-around).Sub(mr.Now()))
			clk := clock.NewManual(mr.Now().Add(c.skew))
			e := &leaseEnv{mr: mr, clk: clk}
			p := policy(t, "q", c.limits...)
			ls := make([]*ratelease.Limiter, instances)
			for i := range ls {
				ls[i] = e.limiter(t)
			}
			ctx := context.Background()
			admitted := map[time.Time]int{} // by the window's start
			byInstance := make([]map[time.Time]int, len(ls))
			for i := range byInstance {
				byInstance[i] = map[time.Time]int{}
			}
			sources := map[ratelease.Source]int{}
			for _, b := range c.boundaries {
				if d := b.Add(-around).Sub(mr.Now()); d > 0 {
					mr.Advance(d)
					clk.Set(mr.Now().Add(c.skew))
				}
				for now := mr.Now(); now.Before(b.Add(around)); now = mr.Now() {
					end := c.cal.Next(now)
					for i, l := range ls {
						for r := 0; r < perStep; r++ {
							res, err := l.Allow(ctx, p, "k")
							if err != nil {
								t.Fatal(err)
							}
							if res.Allowed {
								admitted[c.cal.Start(now)]++
								byInstance[i][c.cal.Start(now)]++
								sources[res.Source]++
								// The quota's reset is its window's end, on
								// Redis's word; a hit counts it from when
								// its lease's answer was applied, which the
								// simulated clock, racing ahead of calls in
								// flight, may have passed by seconds (a
								// rate limit may reset later).
								late := time.Duration(0)
								if res.Source == ratelease.SourceLocal {
									late = end.Sub(c.cal.Start(now)) / 100
								}
								if len(c.limits) == 1 && res.ResetAfter > end.Sub(now)+late {
									t.Fatalf("at %v: ResetAfter %v (%v), past the window's end %v", now, res.ResetAfter, res.Source, end)
								}
							} else if res.RetryAfter <= 0 {
								t.Fatalf("at %v: denied with RetryAfter %v", now, res.RetryAfter)
							} else if len(c.limits) == 1 {
								// Never later than the quota's window's end
								// (to a step, and the answer's flight); once
								// every unit of it is used, the end, unless
								// the denial says it is the fair share's
								// (an instance held to its share tells its
								// share's wait, from memory, until its next
								// call learns better, within TTL).
								left := end.Sub(now)
								if res.RetryAfter > left+time.Second ||
									!res.FairShare && admitted[c.cal.Start(now)] == c.quota && res.RetryAfter < left-time.Second {
									t.Fatalf("at %v: denied (%v, %d of %d used) with RetryAfter %v; the window ends in %v",
										now, res.Source, admitted[c.cal.Start(now)], c.quota, res.RetryAfter, left)
								}
							}
						}
					}
					mr.Advance(step)
					clk.Set(mr.Now().Add(c.skew))
				}
			}
			for w, n := range admitted {
				if n > c.quota {
					t.Errorf("the window from %v admitted %d, past its quota %d", w, n, c.quota)
				}
			}
			for _, b := range c.boundaries {
				// The window opening at b: the flood wants it all within
				// the minutes seen (but a quota larger than the rest of
				// the policy lets through).
				want := c.quota
				if len(c.limits) > 1 {
					r := p.Limits()[1] // a rate limit: what it lets through in the minutes after b
					want = min(want, r.Rate*int(around/r.Period))
				}
				if got := admitted[b]; float64(got) < 0.97*float64(want) {
					t.Errorf("the window from %v admitted %d under a flood, want at least 0.97 × %d", b, got, want)
				}
				// And shared: no instance is left out of the new window
				// (a denial cached from the last, a debt carried over)
				// while the others take it.
				for i := range ls {
					if got := byInstance[i][b]; float64(got) < 0.8*float64(want)/float64(len(ls)) {
						t.Errorf("the window from %v: instance %d admitted %d, want at least 0.8 of its part of %d; all: %v",
							b, i, got, want, []int{byInstance[0][b], byInstance[1][b], byInstance[2][b]})
					}
				}
			}
			// Decided exactly, every grant would be Redis's. (Beside a
			// rate limit, the flood's leases are small: its share of the
			// rate limit, as beside a fixed window.)
			if local, all := sources[ratelease.SourceLocal], sources[ratelease.SourceLocal]+sources[ratelease.SourceRemote]; 3*local < all {
				t.Errorf("sources %v: want a third of the grants or more from leases", sources)
			}
			t.Logf("admitted by window %v, sources %v", admitted, sources)
		})
	}
}

// A quota is counted, never multiplied by its window's length: a month
// may hold any count below 2^53 (a fixed window of 31 days, at most 3362).
func TestCalendarWindowLargeQuota(t *testing.T) {
	const quota = 1 << 50
	e := newEnv(t)
	e.at(t, time.Date(2026, 2, 27, 0, 0, 0, 0, time.UTC))
	p := policy(t, "q", ratelease.PerCalendarMonth(quota, nil))
	ctx := context.Background()
	if res, err := e.l.AllowN(ctx, p, "k", quota-1); err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("AllowN(quota - 1): %+v, %v; want admitted, 1 left", res, err)
	}
	if res, err := e.l.AllowN(ctx, p, "k", 2); err != nil || res.Allowed || res.RetryAfter != 48*time.Hour {
		t.Fatalf("AllowN(2): %+v, %v; want denied until March", res, err)
	}
}

// calWindows places a day's or a month's windows from Go's civil dates.
type calWindows struct {
	unit ratelease.CalendarUnit
	loc  *time.Location
}

func (c calWindows) Start(t time.Time) time.Time {
	y, m, d := t.In(c.loc).Date()
	if c.unit == ratelease.CalendarMonth {
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, c.loc)
}

func (c calWindows) Next(t time.Time) time.Time {
	s := c.Start(t)
	if c.unit == ratelease.CalendarMonth {
		return s.AddDate(0, 1, 0)
	}
	return s.AddDate(0, 0, 1)
}

// fuzzUnits are the calendar units a fuzzed number picks: the three and
// one that is none.
var fuzzUnits = [4]ratelease.CalendarUnit{"", ratelease.CalendarDay, ratelease.CalendarWeek, ratelease.CalendarMonth}

// Calendars that cannot place windows are refused, by name.
func TestCalendarWindowBadInput(t *testing.T) {
	for _, l := range []ratelease.Limit{
		{Rate: 5, Algorithm: ratelease.CalendarWindow},
		{Rate: 5, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: "fortnight"}},
		{Rate: 5, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: "Day"}},
		{Rate: 5, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: ratelease.CalendarDay, Location: time.Local}},
		{Rate: 5, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: ratelease.CalendarWeek, FirstDay: 7}},
		{Rate: 5, Period: time.Hour, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: ratelease.CalendarDay}},
		{Rate: 5, Period: time.Hour, Algorithm: ratelease.FixedWindow, Calendar: ratelease.Calendar{Unit: ratelease.CalendarDay}},
		{Rate: 0, Algorithm: ratelease.CalendarWindow, Calendar: ratelease.Calendar{Unit: ratelease.CalendarDay}},
		ratelease.PerCalendarDay(5, time.FixedZone("far", 367*86400)),
	} {
		if _, err := ratelease.NewPolicy("p", l); !errors.Is(err, ratelease.ErrInvalidLimit) {
			t.Errorf("NewPolicy(%+v): %v, want ErrInvalidLimit", l, err)
		}
	}
	if _, err := ratelease.NewPolicy("p", ratelease.PerCalendarMonth(1<<53, nil)); !errors.Is(err, ratelease.ErrInvalidLimit) {
		t.Errorf("a quota of 2^53: %v, want ErrInvalidLimit", err)
	}
	// Two calendars of one unit and zone would share state.
	if _, err := ratelease.NewPolicy("p", ratelease.PerCalendarDay(5, nil), ratelease.PerCalendarDay(9, time.UTC)); !errors.Is(err, ratelease.ErrInvalidLimit) {
		t.Errorf("two UTC days: %v, want ErrInvalidLimit", err)
	}
}

// time.FixedZone takes any offset, days of it too: a day's window there
// still ends at its next local midnight, from random instants, east and
// west (a search for the window's start that began two days back found
// no midnight past +48h, and gave windows of three days).
func TestCalendarWindowFarFixedZones(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, hours := range []int{49, 100, 26, -26, -100, -7234} {
		loc := time.FixedZone(fmt.Sprintf("far%d", hours), hours*3600)
		for _, unit := range []string{"day", "month"} {
			at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(60 * 24 * time.Hour))))
			e := newEnvAt(t, at)
			lim := ratelease.PerCalendarDay(3, loc)
			local := at.In(loc)
			y, m, d := local.Date()
			next := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
			if unit == "month" {
				lim = ratelease.PerCalendarMonth(3, loc)
				next = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
			}
			p := policy(t, "far", lim)
			res, err := e.l.AllowN(context.Background(), p, "k", 3)
			if err != nil || !res.Allowed {
				t.Fatalf("%s at %v: %+v, %v", unit, local, res, err)
			}
			if want := next.Sub(at); (res.ResetAfter - want).Abs() >= time.Microsecond { // (Redis's time is in µs)
				t.Errorf("%s in a zone %dh from UTC, at %v: resets in %v, want %v", unit, hours, local, res.ResetAfter, want)
			}
		}
	}
}

// Fixed zones are told apart by their offset, whatever their names (the
// empty one too): a policy whose day moves to another fixed zone of the
// same name is a redefinition (the zone's own count, and the old policy
// refused after the grace), not the same count read by two clocks, each
// restarting it at its own midnight (which admitted 3 a day three times).
func TestCalendarFixedZonesOfOneName(t *testing.T) {
	for _, name := range []string{"", "X"} {
		e := newEnvAt(t, time.Date(2026, 6, 1, 13, 0, 0, 0, time.UTC))
		ctx := context.Background()
		east := policy(t, "quota", ratelease.PerCalendarDay(3, time.FixedZone(name, 0)))
		west := policy(t, "quota", ratelease.PerCalendarDay(3, time.FixedZone(name, 12*3600)))
		admitted := 0
		for range 3 {
			for _, p := range []*ratelease.Policy{east, east, east, west} {
				r, err := e.l.Allow(ctx, p, "user")
				if p == east && err != nil && !errors.Is(err, ratelease.ErrInvalidPolicy) {
					t.Fatal(err)
				}
				if r.Allowed && p == east {
					admitted++
				}
			}
		}
		if admitted > 3 {
			t.Errorf("zone %q: the +0 day admitted %d of a quota of 3", name, admitted)
		}
		e.advance(2 * time.Second) // past the redefinition's grace
		if _, err := e.l.Allow(ctx, east, "user"); !errors.Is(err, ratelease.ErrInvalidPolicy) {
			t.Errorf("zone %q: the policy at +0, after its redefinition at +12h: %v, want ErrInvalidPolicy", name, err)
		}
	}
}

// The oracle: a year of instants in five zones, for days, weeks and
// months; each decision's ResetAfter is the time to the first instant
// whose local date (day), week or month differs, found by bisection on
// Go's civil dates (not by computing the midnight).
func TestCalendarWindowOracle(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			units := []struct {
				limit ratelease.Limit
				key   func(u time.Time) int
			}{
				{ratelease.PerCalendarDay(1, loc), func(u time.Time) int { return civilDay(u.In(loc)) }},
				{ratelease.PerCalendarWeek(1, loc, time.Monday), func(u time.Time) int { return (civilDay(u.In(loc)) + 3) / 7 }}, // day 0 (1970-01-01) is a Thursday
				{ratelease.PerCalendarMonth(1, loc), func(u time.Time) int { y, m, _ := u.In(loc).Date(); return 12*y + int(m) }},
			}
			// (Whole microseconds: Redis's TIME has no finer.)
			e.at(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Hour))).Truncate(time.Microsecond)))
			end := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			checked := 0
			for i := 0; e.clock.Now().Before(end); i++ {
				now := e.clock.Now()
				for j, u := range units {
					p := policy(t, fmt.Sprintf("q%d", j), u.limit)
					want := firstChange(now, u.key).Sub(now)
					res, err := e.l.Allow(ctx, p, fmt.Sprint("k", i))
					if err != nil || !res.Allowed || res.ResetAfter != want {
						t.Fatalf("%v at %v: %+v, %v; want reset after %v", u.limit, now.In(loc), res, err, want)
					}
					checked++
				}
				e.advance(40*time.Hour + time.Duration(rng.Int64N(int64(24*time.Hour))).Truncate(time.Microsecond))
			}
			if checked < 400 {
				t.Fatalf("only %d decisions checked", checked)
			}
		})
	}
}

// civilDay numbers u's local date: days since 1970-01-01, by the calendar.
func civilDay(u time.Time) int {
	y, m, d := u.Date()
	return int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Unix() / 86400)
}

// firstChange returns the first instant (µs) after t whose key differs
// from t's, by bisection over the next 33 days.
func firstChange(t time.Time, key func(time.Time) int) time.Time {
	k := key(t)
	lo, hi := t, t.Add(33*24*time.Hour) // key(lo) == k, key(hi) != k
	for hi.Sub(lo) > time.Microsecond {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Microsecond)
		if key(mid) == k {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// A host whose clock is far from Redis's cannot place Redis's time in a
// window: the call fails, saying why, and the failure mode decides (here:
// FailClosed, an error). Up to an hour ahead, it is placed right.
func TestCalendarWindowClockSkew(t *testing.T) {
	ctx := context.Background()
	p := policy(t, "q", ratelease.PerCalendarDay(5, nil))
	for _, c := range []struct {
		name string
		skew time.Duration // Redis's clock ahead of the host's
	}{{"host a day behind", 27 * time.Hour}, {"host days ahead", -5 * 24 * time.Hour}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, ratelease.WithFailureMode(ratelease.FailClosed))
			if c.skew > 0 {
				e.mr.Advance(c.skew)
			} else {
				e.clock.Set(e.clock.Now().Add(-c.skew))
			}
			_, err := e.l.Allow(ctx, p, "k")
			if !errors.Is(err, ratelease.ErrUnavailable) || !strings.Contains(err.Error(), "far from Redis") {
				t.Fatalf("Allow with Redis %v ahead: %v; want ErrUnavailable naming the clocks", c.skew, err)
			}
		})
	}
	// Redis at 23:50, the host 30 minutes ahead, past its midnight: the
	// request counts in Redis's day, which ends in 10 minutes.
	e := newEnv(t)
	e.at(t, time.Date(2026, 5, 5, 23, 50, 0, 0, time.UTC))
	e.clock.Set(e.clock.Now().Add(30 * time.Minute))
	if res, err := e.l.Allow(ctx, p, "k"); err != nil || !res.Allowed || res.ResetAfter != 10*time.Minute {
		t.Fatalf("the host 30 minutes ahead: %+v, %v; want Redis's day, 10 minutes left", res, err)
	}
}

// While Redis is down, FailLocal admits this instance's share of a
// calendar quota: its Rate over the instances, as a bucket refilled over
// a nominal window (a day's here).
func TestCalendarWindowFailLocal(t *testing.T) {
	e := newEnv(t, ratelease.WithFailureMode(ratelease.FailLocal), ratelease.WithInstances(2), ratelease.WithRedisTimeout(200*time.Millisecond))
	p := policy(t, "q", ratelease.PerCalendarDay(8, nil))
	e.mr.Close()
	admitted := 0
	for i := 0; i < 10; i++ {
		res, err := e.l.Allow(context.Background(), p, "k")
		if err != nil || res.Source != ratelease.SourceFallback {
			t.Fatalf("request %d with Redis down: %+v, %v", i, res, err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d with Redis down, want this instance's share: 4 of 8", admitted)
	}
}

// FuzzCalendarWindow drives calendar limits with whatever a caller could
// pass: unit, zone, first day, rate, and the time of the call. Nothing may
// panic; an error is ErrInvalidLimit; a decision's ResetAfter is within
// the calendar's longest window, and its window's end is a midnight of
// the zone. More with
//
//	go test -run '^$' -fuzz FuzzCalendarWindow -fuzztime 1m .
func FuzzCalendarWindow(f *testing.F) {
	f.Add(1, "Europe/Berlin", 1, 500, int64(3*24*3600))
	f.Add(3, "America/New_York", 0, 10000, int64(200*24*3600+7))
	f.Add(2, "Australia/Lord_Howe", 6, 1, int64(-5))
	f.Add(0, "UTC", 9, -3, int64(1<<40))
	f.Fuzz(func(t *testing.T, unit int, zoneName string, first, rate int, offset int64) {
		loc, err := time.LoadLocation(zoneName)
		if err != nil || zoneName == "" || zoneName == "Local" {
			return // not a zone: LoadLocation's own business
		}
		l := ratelease.Limit{Rate: rate, Algorithm: ratelease.CalendarWindow,
			Calendar: ratelease.Calendar{Unit: fuzzUnits[unit&3], Location: loc, FirstDay: time.Weekday(first)}}
		p, err := ratelease.NewPolicy("q", l)
		if err != nil {
			if !errors.Is(err, ratelease.ErrInvalidLimit) {
				t.Fatalf("NewPolicy(%+v): %v", l, err)
			}
			return
		}
		e := newEnv(t)
		e.advance(time.Duration(max(0, offset%(10*365*86400))) * time.Second)
		res, err := e.l.Allow(context.Background(), p, "k")
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if res.Allowed && (res.ResetAfter <= 0 || res.ResetAfter > 31*24*time.Hour+time.Hour) {
			t.Fatalf("%v at %v: reset after %v", l, e.clock.Now(), res.ResetAfter)
		}
		if res.Allowed {
			end := e.clock.Now().Add(res.ResetAfter).In(loc)
			if h, m, s := end.Clock(); h > 1 || m != 0 || s != 0 { // (a midnight a DST change skips is 01:00)
				t.Fatalf("%v at %v: the window ends at %v, not at a midnight", l, e.clock.Now(), end)
			}
		}
	})
}

// Where DST begins at 00:00 west of UTC, the DST day has no midnight: its
// window begins at 01:00 and the eve's ends there. Through the public API,
// on the eve, the DST day and after, a quota of 2 admits 2 and denies the
// third until its window's end, each decided by Redis; an unrelated rate
// limit beside it is decided by Redis throughout, and no breaker opens
// (FailOpen would hide failures as admissions: the Source tells).
func TestCalendarWindowDSTAtMidnight(t *testing.T) {
	utc := func(mo time.Month, d, h, mi int, y int) time.Time { return time.Date(y, mo, d, h, mi, 0, 0, time.UTC) }
	for _, c := range []struct {
		zone  string
		limit func(*time.Location) ratelease.Limit
		at    []time.Time     // in order
		want  []time.Duration // until the window's end
	}{
		// Santiago, 2026-09-06 00:00 -04 is 01:00 -03 (04:00 UTC).
		{"America/Santiago", func(l *time.Location) ratelease.Limit { return ratelease.PerCalendarDay(2, l) },
			[]time.Time{
				utc(9, 6, 2, 30, 2026), // the eve, 22:30 -04
				utc(9, 6, 3, 30, 2026), // the eve, 23:30 -04
				utc(9, 6, 15, 0, 2026), // the DST day, 12:00 -03
				utc(9, 7, 2, 30, 2026), // the DST day, 23:30 -03
			},
			[]time.Duration{90 * time.Minute, 30 * time.Minute, 12 * time.Hour, 30 * time.Minute}},
		// Havana, 2026-03-08 (a Sunday) 00:00 CST is 01:00 CDT (05:00 UTC):
		// the week from Sunday begins then, and ends on the 15th at 00:00 CDT.
		{"America/Havana", func(l *time.Location) ratelease.Limit { return ratelease.PerCalendarWeek(2, l, time.Sunday) },
			[]time.Time{
				utc(3, 8, 4, 30, 2026), // Saturday 23:30 CST
				utc(3, 8, 16, 0, 2026), // Sunday 12:00 CDT
			},
			[]time.Duration{30 * time.Minute, 6*24*time.Hour + 12*time.Hour}},
		// Asuncion, 2023-10-01 00:00 -04 is 01:00 -03 (04:00 UTC): October
		// begins then and ends on November 1 at 00:00 -03, not on the 30th.
		{"America/Asuncion", func(l *time.Location) ratelease.Limit { return ratelease.PerCalendarMonth(2, l) },
			[]time.Time{
				utc(10, 1, 3, 30, 2023),  // September 30, 23:30 -04
				utc(10, 15, 15, 0, 2023), // October 15, 12:00 -03
				utc(10, 30, 15, 0, 2023), // October 30, 12:00 -03
			},
			[]time.Duration{30 * time.Minute, 16*24*time.Hour + 12*time.Hour, 36 * time.Hour}},
	} {
		t.Run(c.zone, func(t *testing.T) {
			ctx := context.Background()
			e := newEnvAt(t, c.at[0].Add(-48*time.Hour), ratelease.WithFailureMode(ratelease.FailOpen))
			quota := policy(t, "quota", c.limit(zone(t, c.zone)))
			rate := policy(t, "api", ratelease.PerSecond(1))
			for i, u := range c.at {
				e.at(t, u)
				key := fmt.Sprint("k", i)
				res, err := e.l.AllowN(ctx, quota, key, 2)
				if err != nil || !res.Allowed || res.Source != ratelease.SourceRemote || res.ResetAfter != c.want[i] {
					t.Errorf("at %v: AllowN(2) = %+v, %v; want admitted by Redis, reset after %v", u.In(zone(t, c.zone)), res, err, c.want[i])
				}
				res, err = e.l.Allow(ctx, quota, key)
				if err != nil || res.Allowed || res.Source != ratelease.SourceRemote || res.RetryAfter != c.want[i] {
					t.Errorf("at %v: a third = %+v, %v; want denied by Redis until %v", u.In(zone(t, c.zone)), res, err, c.want[i])
				}
				if res, err := e.l.Allow(ctx, rate, key); err != nil || !res.Allowed || res.Source != ratelease.SourceRemote {
					t.Errorf("at %v: the rate limit beside it = %+v, %v; want admitted by Redis", u.In(zone(t, c.zone)), res, err)
				}
			}
			if s := e.l.Stats(); s.BreakerOpens != 0 || s.Breaker != ratelease.BreakerClosed {
				t.Errorf("breaker %v, opened %d times; want closed, never opened", s.Breaker, s.BreakerOpens)
			}
		})
	}
}

// A host clock days ahead of Redis's fails its calendar quota's calls
// (the failure mode decides them), but that is the host's clock, not
// Redis failing: it counts as Redis answering, and the breaker stays
// closed for every other policy on that Redis.
func TestCalendarWindowClockSkewKeepsTheBreaker(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ratelease.WithFailureMode(ratelease.FailClosed))
	e.clock.Set(e.clock.Now().Add(5 * 24 * time.Hour))
	quota := policy(t, "quota", ratelease.PerCalendarDay(5, nil))
	rate := policy(t, "api", ratelease.PerSecond(100))
	for i := 0; i < 10; i++ {
		if _, err := e.l.Allow(ctx, quota, "k"); !errors.Is(err, ratelease.ErrUnavailable) || !strings.Contains(err.Error(), "far from Redis") {
			t.Fatalf("quota call %d with the host 5 days ahead: %v; want ErrUnavailable naming the clocks", i, err)
		}
	}
	if res, err := e.l.Allow(ctx, rate, "k"); err != nil || !res.Allowed || res.Source != ratelease.SourceRemote {
		t.Fatalf("the rate limit after 10 quota errors: %+v, %v; want admitted by Redis", res, err)
	}
	if s := e.l.Stats(); s.BreakerOpens != 0 || s.Breaker != ratelease.BreakerClosed {
		t.Errorf("breaker %v, opened %d times; want closed, never opened", s.Breaker, s.BreakerOpens)
	}
}
