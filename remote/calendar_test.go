package remote_test

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // every zone, whatever the machine has

	"github.com/ratelease/ratelease/clock"
	"github.com/ratelease/ratelease/remote"
)

// zoneNames returns the name of every zone in Go's time zone database:
// the files of $GOROOT/lib/time/zoneinfo.zip, the zip that time/tzdata
// embeds. The test fails, never skips, when it cannot read them.
func zoneNames(t *testing.T) []string {
	t.Helper()
	roots := []string{os.Getenv("GOROOT")}
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	for _, root := range roots {
		if root == "" {
			continue
		}
		z, err := zip.OpenReader(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
		if err != nil {
			continue
		}
		defer z.Close()
		var names []string
		for _, f := range z.File {
			if !strings.HasSuffix(f.Name, "/") {
				names = append(names, f.Name)
			}
		}
		if len(names) < 300 {
			t.Fatalf("%s: only %d zones", root, len(names))
		}
		return names
	}
	t.Fatalf("no zoneinfo.zip under GOROOT (tried %q)", roots)
	return nil
}

// civilDay numbers u's local date in days since 1970-01-01, by Go's
// calendar (the midnight of that date in UTC, which has no DST).
func civilDay(u time.Time) int64 {
	y, m, d := u.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// firstDate returns the first date (see civilDay) of the window of c
// that holds the date day, and of the window after it, by the calendar's
// rules written out: a day; back to FirstDay and 7 days on; the 1st of
// the month and of the next.
func firstDate(c remote.Calendar, day int64) (int64, int64) {
	noon := time.Unix(day*86400+12*3600, 0).UTC()
	switch c.Unit {
	case remote.CalendarWeek:
		d := day - int64((int(noon.Weekday())-int(c.FirstDay)+7)%7)
		return d, d + 7
	case remote.CalendarMonth:
		y, m, _ := noon.Date()
		return civilDay(time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)), civilDay(time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC))
	}
	return day, day + 1
}

// checkWindow checks the window of c holding u: it holds u (so it is not
// empty), begins at the first instant of its first civil date (the first
// whose local date is that date, or a later one where the zone skips the
// date), ends at the first instant of the next window's, and the next
// window begins exactly there. Its first date is that of u's date's
// window; but where the local date went back (a fall back across
// midnight: an instant up to u, the window's start, had a later date) it
// is the window of the latest date reached, the one that began last.
func checkWindow(c remote.Calendar, u time.Time) error {
	s, e := remote.CalendarBounds(c, u)
	if u.Before(s) || !u.Before(e) {
		return fmt.Errorf("window [%v, %v) does not hold %v", s, e, u)
	}
	w, next := firstDate(c, max(civilDay(u.In(c.Location)), civilDay(s.In(c.Location))))
	if before, at := civilDay(s.Add(-1).In(c.Location)), civilDay(s.In(c.Location)); before >= w || at < w {
		return fmt.Errorf("window [%v, %v) holding %v: its start is not the first instant of %v", s, e, u, time.Unix(w*86400, 0).UTC().Format(time.DateOnly))
	}
	if before, at := civilDay(e.Add(-1).In(c.Location)), civilDay(e.In(c.Location)); before >= next || at < next {
		return fmt.Errorf("window [%v, %v) holding %v: its end is not the first instant of %v", s, e, u, time.Unix(next*86400, 0).UTC().Format(time.DateOnly))
	}
	if s2, _ := remote.CalendarBounds(c, e); !s2.Equal(e) {
		return fmt.Errorf("window [%v, %v) holding %v: the next begins at %v", s, e, u, s2)
	}
	return nil
}

// Every zone Go knows, every offset change from 1970 to 2037 (the instant
// before it and the instant of it) and a sample of ordinary instants: the
// day, week (from each first day) and month window holding each is not
// empty, holds it, begins at the first instant of its civil date (a day
// whose midnight a DST change skips, west of UTC, begins at 01:00, not
// at the eve's 23:00 that time.Date gives) and ends exactly where the
// next begins. With -short, a sample of the changes.
func TestCalendarWindowEveryZone(t *testing.T) {
	names := zoneNames(t)
	from := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	to := time.Date(2038, 1, 1, 0, 0, 0, 0, time.UTC)
	every := 1
	if testing.Short() {
		every = 7
	}
	var zones, changes, checked int
	for zi, name := range names {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Errorf("zone %s: %v", name, err)
			continue
		}
		zones++
		cals := []remote.Calendar{{Unit: remote.CalendarDay, Location: loc}, {Unit: remote.CalendarMonth, Location: loc}}
		for d := time.Sunday; d <= time.Saturday; d++ {
			cals = append(cals, remote.Calendar{Unit: remote.CalendarWeek, Location: loc, FirstDay: d})
		}
		var instants []time.Time
		rng := rand.New(rand.NewPCG(uint64(zi), 38))
		for i := 0; i < 16; i++ {
			instants = append(instants, from.Add(time.Duration(rng.Int64N(int64(to.Sub(from))))).Truncate(time.Microsecond))
		}
		for u, k := from, 0; u.Before(to); k++ {
			_, end := u.In(loc).ZoneBounds()
			if end.IsZero() || !end.Before(to) {
				break
			}
			changes++
			if (k+zi)%every == 0 {
				instants = append(instants, end.Add(-time.Microsecond), end)
			}
			u = end
		}
		failed := 0
		for _, u := range instants {
			for _, c := range cals {
				checked++
				if err := checkWindow(c, u.In(loc)); err != nil {
					t.Errorf("%s %v (first day %v): %v", name, c.Unit, c.FirstDay, err)
					if failed++; failed == 3 {
						break
					}
				}
			}
			if failed >= 3 {
				break
			}
		}
	}
	if zones < 300 || changes < 10_000 {
		t.Fatalf("%d zones, %d offset changes: the database is not all there", zones, changes)
	}
	t.Logf("%d zones, %d offset changes 1970-2037, %d windows checked", zones, changes, checked)
}

// wallClock is a host's wall clock, which an operator (or NTP) may set
// back: Now is whatever was set last.
type wallClock struct {
	*clock.Manual // its timers; none is used
	now           time.Time
}

func (c *wallClock) Now() time.Time { return c.now }

// A host clock days ahead of Redis's, then set right: the windows its
// calls named while ahead are not used once it is back (the cache of a
// policy's window arguments holds only from its windows' start, not just
// up to their end). Ahead by 3 days, the script takes Redis's time for
// the window before the host's (it cannot tell a window from 3 days
// ahead); set right, the next call names Redis's own day and counts there.
func TestCalendarWindowClockSetBack(t *testing.T) {
	f := newFake(t)
	f.Advance(14 * time.Hour) // 2023-11-15 12:00 UTC
	redisNow := f.Now()
	host := &wallClock{Manual: clock.NewManual(redisNow), now: redisNow.Add(3 * 24 * time.Hour)}
	f.s.SetClock(host)
	l := win(remote.CalendarWindow, 5, 24*time.Hour)
	l.Calendar = remote.Calendar{Unit: remote.CalendarDay, Location: time.UTC}
	p := mustPolicy(t, "quota", l)
	ahead := acquire(t, f.s, p, "k", 1, 1, false)
	if want := 60 * time.Hour; ahead.ResetAfter != want {
		t.Fatalf("the host 3 days ahead: %+v; want the window ending a day before the host's, reset after %v", ahead, want)
	}
	host.now = redisNow.Add(time.Minute) // set right
	d := acquire(t, f.s, p, "k", 1, 1, false)
	if d.ResetAfter != 12*time.Hour || d.Remaining != 4 { // Redis's time has not moved
		t.Fatalf("the host set right: %+v; want Redis's day, reset after 12h, 4 left", d)
	}
}

// A call whose calendar window does not hold Redis's time (this host's
// clock 5 days ahead) fails with an error wrapping ErrClock, which says
// so and names the server; other script errors do not wrap it.
func TestCalendarWindowErrClock(t *testing.T) {
	ctx := context.Background()
	f := newFake(t)
	f.s.SetClock(&wallClock{Manual: clock.NewManual(f.Now()), now: f.Now().Add(5 * 24 * time.Hour)})
	l := win(remote.CalendarWindow, 5, 24*time.Hour)
	l.Calendar = remote.Calendar{Unit: remote.CalendarDay, Location: time.UTC}
	p := mustPolicy(t, "quota", l)
	_, err := f.s.Acquire(ctx, remote.Request{Policy: p, Key: "k", Min: 1, Max: 1})
	if !errors.Is(err, remote.ErrClock) || !strings.Contains(err.Error(), "far from Redis") {
		t.Fatalf("Acquire with the host 5 days ahead: %v; want ErrClock, naming the clocks", err)
	}
	other := mustPolicy(t, "other", tb(5, 5, time.Second))
	f.HSet(other.Keys("test", "k")[0], "a", "b") // the wrong type for the script's GET
	_, err = f.s.Acquire(ctx, remote.Request{Policy: other, Key: "k", Min: 1, Max: 1})
	if err == nil {
		t.Fatal("Acquire on a key of the wrong type succeeded")
	}
	if errors.Is(err, remote.ErrClock) {
		t.Fatalf("another error wraps ErrClock: %v", err)
	}
}

// A refund of a calendar window's grant goes back only to the window that
// granted it, by the count's first grant (f) and, from the window's known
// start on, by that start: a grant time read a little before f (a lease's
// receipt) is taken; one from the window before, in the last hour of the
// next (where the call names the window after), is not; and a count kept
// before f was (no field) takes refunds from its window's start when it
// is known, from now when not.
func TestCalendarRefundFindsItsWindow(t *testing.T) {
	ctx := context.Background()
	l := win(remote.CalendarWindow, 10, 24*time.Hour)
	l.Calendar = remote.Calendar{Unit: remote.CalendarDay, Location: time.UTC}
	count := func(f *fake, p *remote.Policy) string { return f.HGet(p.Keys("test", "k")[0], "c") }
	for _, c := range []struct {
		name      string
		into      time.Duration // Redis's time into the day of the grant, at the refund
		at        time.Duration // the refunded grant's time, from that day's start
		dropF     bool          // the count has no f
		wantCount string
	}{
		{"the same day, a receipt read before f", 10 * time.Hour, 9 * time.Hour, false, "0"},
		{"the same day, the last hour, at f", 23*time.Hour + 30*time.Minute, 10 * time.Hour, false, "0"},
		{"the day before, in the next day's last hour", 23*time.Hour + 30*time.Minute, -time.Hour, false, "4"},
		{"the day before, the next day's first hours", 2 * time.Hour, -time.Hour, false, "4"},
		{"no f, the day before, the next day's first hours", 2 * time.Hour, -time.Hour, true, "4"},
		{"no f, the same day", 2 * time.Hour, time.Hour, true, "0"},
		{"no f, the day before, the next day's last hour", 23*time.Hour + 30*time.Minute, -time.Hour, true, "4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t)
			day := f.Now().Truncate(24 * time.Hour).Add(24 * time.Hour)
			f.Advance(day.Sub(f.Now()) + 10*time.Hour) // 10:00 of the day: the first grant (f)
			f.s.SetClock(clock.NewManual(f.Now()))
			p := mustPolicy(t, "quota", l)
			acquire(t, f.s, p, "k", 4, 4, false)
			if c.dropF {
				f.HDel(p.Keys("test", "k")[0], "f")
			}
			f.Advance(c.into - 10*time.Hour)
			f.s.SetClock(clock.NewManual(f.Now()))
			if err := f.s.Refund(ctx, p, "k", 4, day.Add(c.at).UnixMicro()); err != nil {
				t.Fatal(err)
			}
			if got := count(f, p); got != c.wantCount {
				t.Fatalf("the count after the refund: %s, want %s", got, c.wantCount)
			}
		})
	}
}
