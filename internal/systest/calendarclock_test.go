package systest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ratelease/ratelease"
	"github.com/ratelease/ratelease/internal/redistest"
)

// Calendar windows on a real redis-server's clock, across a month's end
// and across a DST change that skips midnight (a day of 23 hours), each
// made to happen two seconds from now by a zone of its own: the quota's
// window ends when Redis's clock passes the zone's midnight, ResetAfter
// points at it, and the new window admits a quota again, in exact and in
// lease mode.
func TestCalendarBoundariesOnRedisClock(t *testing.T) {
	srv := redistest.Start(t)
	rc := dial(t, srv.Addr)
	ctx := context.Background()
	redisNow := func() time.Time {
		n, err := rc.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const quota = 5
	for _, exact := range []bool{true, false} {
		for _, kind := range []string{"month end", "DST at midnight"} {
			t.Run(fmt.Sprintf("%s, exact=%v", kind, exact), func(t *testing.T) {
				opts := []ratelease.Option{ratelease.WithRedisTimeout(2 * time.Second)}
				if exact {
					opts = append(opts, ratelease.WithExact())
				}
				l, err := ratelease.New(rc, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				// Up to three tries: a try whose first window's requests
				// end after its boundary (a stalled machine) says nothing.
				for try := 0; ; try++ {
					if try == 3 {
						t.Fatal("three tries ran past their boundary")
					}
					boundary := redisNow().Add(2 * time.Second).Truncate(time.Second)
					name := fmt.Sprintf("ratelease-test-%d-%v-%d", len(kind), exact, try)
					var p *ratelease.Policy
					var next time.Duration // the new window's length
					if kind == "month end" {
						// Local time 2026-01-31 24:00 at the boundary.
						feb := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
						loc := time.FixedZone(name, int(feb.Sub(boundary).Seconds()))
						p = policy(t, "cal", ratelease.PerCalendarMonth(quota, loc))
						next = 28 * 24 * time.Hour
					} else {
						loc := skippedMidnight(t, name, boundary)
						p = policy(t, "cal", ratelease.PerCalendarDay(quota, loc))
						next = 23 * time.Hour
					}
					// A key of its own: a member of an earlier Limiter
					// on the key would keep its part for a while.
					key := name
					// Asks quota + 3 times: how many were admitted, the
					// last admission and the last denial.
					ask := func() (admitted int, ok, denied ratelease.Result) {
						for range quota + 3 {
							res, err := l.Allow(ctx, p, key)
							if err != nil {
								t.Fatal(err)
							}
							if res.Allowed {
								admitted, ok = admitted+1, res
							} else {
								denied = res
							}
						}
						return admitted, ok, denied
					}
					admitted, _, last := ask()
					if !redisNow().Before(boundary.Add(-100 * time.Millisecond)) {
						continue
					}
					if admitted != quota || last.RetryAfter <= 0 || last.RetryAfter > 2*time.Second {
						t.Fatalf("before the boundary: %d admitted, denied with %+v; want %d, RetryAfter up to the boundary", admitted, last, quota)
					}
					time.Sleep(time.Until(boundary.Add(100 * time.Millisecond)))
					admitted, res, _ := ask()
					if admitted != quota || res.ResetAfter > next || res.ResetAfter < next-time.Minute {
						t.Fatalf("after the boundary: %d admitted, the last with ResetAfter %v; want the new window's %d, its end %v away",
							admitted, res.ResetAfter, quota, next)
					}
					return
				}
			})
		}
	}
}

// skippedMidnight returns a zone named name whose clocks go from 23:59:59
// to 01:00 at at (a DST change at midnight, as Havana's): the day that
// begins at at has 23 hours. Its offset before is between 0 and 24 hours
// east, so that time.Date places the skipped midnight at at.
func skippedMidnight(t *testing.T, name string, at time.Time) *time.Location {
	std := int32((86400 - at.Unix()%86400) % 86400)
	if std == 0 {
		t.Fatalf("%v is midnight UTC: pick another instant", at)
	}
	// TZif version 1: a header, one transition (to type 1), two types.
	abbrs := []byte("TST\x00TDT\x00")
	var b bytes.Buffer
	b.WriteString("TZif")
	b.Write(make([]byte, 16))                                       // version 1 and reserved
	for _, n := range []uint32{0, 0, 0, 1, 2, uint32(len(abbrs))} { // isut, isstd, leap, time, type, char
		_ = binary.Write(&b, binary.BigEndian, n)
	}
	_ = binary.Write(&b, binary.BigEndian, int32(at.Unix()))
	b.WriteByte(1)
	for _, z := range []struct {
		off  int32
		dst  byte
		abbr byte
	}{{std, 0, 0}, {std + 3600, 1, 4}} {
		_ = binary.Write(&b, binary.BigEndian, z.off)
		b.WriteByte(z.dst)
		b.WriteByte(z.abbr)
	}
	b.Write(abbrs)
	loc, err := time.LoadLocationFromTZData(name, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	// What the test relies on: midnight is skipped at at.
	if d := time.Date(at.In(loc).Year(), at.In(loc).Month(), at.In(loc).Day(), 0, 0, 0, 0, loc); !d.Equal(at) || at.Add(-time.Second).In(loc).Hour() != 23 {
		t.Fatalf("zone %s: the day of %v begins at %v", name, at.In(loc), d)
	}
	return loc
}
