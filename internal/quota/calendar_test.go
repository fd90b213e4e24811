package quota

import (
	"errors"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// loadLoc loads a zone from the system's tzdata; the package embeds none.
func loadLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no tzdata for %s: %v", name, err)
	}
	return loc
}

func newCal(t testing.TB, u CalendarUnit, zone string, anchor int) *Calendar {
	t.Helper()
	c, err := NewCalendar(u, loadLoc(t, zone), anchor)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ts parses an RFC 3339 instant into unix ns.
func ts(t testing.TB, s string) int64 {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

func fmtNanos(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

func TestCalendarUnitText(t *testing.T) {
	for u := CalendarDay; u <= CalendarYear; u++ {
		b, err := u.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var v CalendarUnit
		if err := v.UnmarshalText(b); err != nil || v != u || u.String() != string(b) {
			t.Fatalf("%v: %q %v %v", u, b, v, err)
		}
	}
	if u, err := ParseCalendarUnit("Month"); err != nil || u != CalendarMonth {
		t.Fatalf("Month: %v %v", u, err)
	}
	var fe *FieldError
	if _, err := ParseCalendarUnit("fortnight"); !errors.As(err, &fe) || fe.Field != "calendar" {
		t.Fatalf("fortnight: %v", err)
	}
	if _, err := CalendarUnit(0).MarshalText(); err == nil || CalendarUnit(9).String() != "calendar_unit(9)" {
		t.Fatal("an invalid unit marshals")
	}
}

func TestNewCalendar(t *testing.T) {
	for _, tc := range []struct {
		unit   CalendarUnit
		anchor int
		field  string // "" when valid
	}{
		{CalendarDay, 0, ""},
		{CalendarWeek, 0, ""},
		{CalendarMonth, 0, ""},
		{CalendarMonth, 1, ""},
		{CalendarMonth, 31, ""},
		{CalendarYear, 0, ""},
		{0, 0, "calendar"},
		{CalendarYear + 1, 0, "calendar"},
		{CalendarDay, 1, "anchor"},
		{CalendarWeek, 3, "anchor"},
		{CalendarYear, 1, "anchor"},
		{CalendarMonth, 32, "anchor"},
		{CalendarMonth, -1, "anchor"},
	} {
		c, err := NewCalendar(tc.unit, nil, tc.anchor)
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%v anchor %d: %v", tc.unit, tc.anchor, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%v anchor %d: %v, want a %q error", tc.unit, tc.anchor, err, tc.field)
		case err == nil && c.Location() != time.UTC:
			t.Errorf("a nil location is %v, want UTC", c.Location())
		}
	}
	c, _ := NewCalendar(CalendarMonth, nil, 0)
	if c.Anchor() != 1 || c.Unit() != CalendarMonth || c.String() != "month@1 UTC" {
		t.Fatalf("anchor 0: %v", c)
	}
}

// The window of an instant, for each unit, in UTC and in zones with DST,
// including DST changes at midnight, across month lengths, leap years,
// anchors and year boundaries. Instants carry their offset, so a case does
// not depend on how the code under test reads the zone.
func TestCalendarWindow(t *testing.T) {
	const (
		day   = CalendarDay
		week  = CalendarWeek
		month = CalendarMonth
		year  = CalendarYear
	)
	for _, tc := range []struct {
		zone       string
		unit       CalendarUnit
		anchor     int
		at         string
		start, end string
	}{
		// UTC: lengths, leap years, the last nanosecond of a window.
		{"UTC", day, 0, "2028-02-29T13:00:00Z", "2028-02-29T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"UTC", day, 0, "2023-12-31T23:59:59.999999999Z", "2023-12-31T00:00:00Z", "2024-01-01T00:00:00Z"},
		{"UTC", week, 0, "2023-12-31T12:00:00Z", "2023-12-25T00:00:00Z", "2024-01-01T00:00:00Z"}, // a Sunday
		{"UTC", week, 0, "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z", "2024-01-08T00:00:00Z"}, // a Monday
		{"UTC", week, 0, "2026-01-01T08:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z"}, // ISO week 1 of 2026
		{"UTC", month, 0, "2028-02-29T23:59:59.999999999Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{"UTC", month, 0, "2027-02-28T23:59:59.999999999Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"},
		{"UTC", month, 0, "2024-04-30T23:59:59.999999999Z", "2024-04-01T00:00:00Z", "2024-05-01T00:00:00Z"},
		{"UTC", month, 0, "2023-12-31T23:59:59.999999999Z", "2023-12-01T00:00:00Z", "2024-01-01T00:00:00Z"},
		{"UTC", year, 0, "2023-12-31T23:59:59.999999999Z", "2023-01-01T00:00:00Z", "2024-01-01T00:00:00Z"},
		{"UTC", year, 0, "2028-07-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"},
		{"UTC", year, 0, "1900-02-28T00:00:00Z", "1900-01-01T00:00:00Z", "1901-01-01T00:00:00Z"},
		{"UTC", day, 0, "2200-06-15T12:00:00Z", "2200-06-15T00:00:00Z", "2200-06-16T00:00:00Z"},
		{"UTC", day, 0, "1700-03-01T06:00:00Z", "1700-03-01T00:00:00Z", "1700-03-02T00:00:00Z"},

		// Anchors across January, February and March, in common and leap years.
		{"UTC", month, 1, "2023-02-10T00:00:00Z", "2023-02-01T00:00:00Z", "2023-03-01T00:00:00Z"},
		{"UTC", month, 15, "2023-02-14T23:59:59.999999999Z", "2023-01-15T00:00:00Z", "2023-02-15T00:00:00Z"},
		{"UTC", month, 15, "2023-02-15T00:00:00Z", "2023-02-15T00:00:00Z", "2023-03-15T00:00:00Z"},
		{"UTC", month, 15, "2024-01-10T00:00:00Z", "2023-12-15T00:00:00Z", "2024-01-15T00:00:00Z"},
		{"UTC", month, 29, "2023-01-29T00:00:00Z", "2023-01-29T00:00:00Z", "2023-02-28T00:00:00Z"},
		{"UTC", month, 29, "2023-02-28T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-29T00:00:00Z"},
		{"UTC", month, 29, "2028-02-28T23:59:59.999999999Z", "2028-01-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"UTC", month, 29, "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-29T00:00:00Z"},
		{"UTC", month, 30, "2023-02-10T00:00:00Z", "2023-01-30T00:00:00Z", "2023-02-28T00:00:00Z"},
		{"UTC", month, 30, "2023-03-01T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-30T00:00:00Z"},
		{"UTC", month, 30, "2028-02-28T23:59:59.999999999Z", "2028-01-30T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"UTC", month, 30, "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-30T00:00:00Z"},
		{"UTC", month, 31, "2023-01-31T00:00:00Z", "2023-01-31T00:00:00Z", "2023-02-28T00:00:00Z"},
		{"UTC", month, 31, "2023-02-05T00:00:00Z", "2023-01-31T00:00:00Z", "2023-02-28T00:00:00Z"}, // early February starts on Jan 31
		{"UTC", month, 31, "2023-02-28T00:00:00Z", "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
		{"UTC", month, 31, "2023-03-30T23:59:59.999999999Z", "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
		{"UTC", month, 31, "2023-04-30T12:00:00Z", "2023-04-30T00:00:00Z", "2023-05-31T00:00:00Z"},
		{"UTC", month, 31, "2028-02-05T00:00:00Z", "2028-01-31T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"UTC", month, 31, "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z"},
		{"UTC", month, 31, "2023-12-30T23:59:59.999999999Z", "2023-11-30T00:00:00Z", "2023-12-31T00:00:00Z"},
		{"UTC", month, 31, "2024-01-05T00:00:00Z", "2023-12-31T00:00:00Z", "2024-01-31T00:00:00Z"},

		// New York: 23- and 25-hour days, and the weeks, months and years
		// around them.
		{"America/New_York", day, 0, "2024-03-09T23:59:59.999999999-05:00", "2024-03-09T00:00:00-05:00", "2024-03-10T00:00:00-05:00"},
		{"America/New_York", day, 0, "2024-03-10T12:00:00-04:00", "2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00"},
		{"America/New_York", day, 0, "2024-11-03T01:30:00-05:00", "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"},
		{"America/New_York", week, 0, "2024-03-10T12:00:00-04:00", "2024-03-04T00:00:00-05:00", "2024-03-11T00:00:00-04:00"},
		{"America/New_York", month, 0, "2024-03-15T12:00:00-04:00", "2024-03-01T00:00:00-05:00", "2024-04-01T00:00:00-04:00"},
		{"America/New_York", month, 0, "2024-11-30T23:59:59.999999999-05:00", "2024-11-01T00:00:00-04:00", "2024-12-01T00:00:00-05:00"},
		{"America/New_York", month, 31, "2024-02-29T23:00:00-05:00", "2024-02-29T00:00:00-05:00", "2024-03-31T00:00:00-04:00"},
		{"America/New_York", year, 0, "2024-12-31T23:59:59.999999999-05:00", "2024-01-01T00:00:00-05:00", "2025-01-01T00:00:00-05:00"},
		{"America/New_York", year, 0, "2025-01-01T04:59:59Z", "2024-01-01T00:00:00-05:00", "2025-01-01T00:00:00-05:00"}, // still 2024 locally

		// London: BST starts and ends at 01:00 UTC.
		{"Europe/London", day, 0, "2024-03-31T12:00:00+01:00", "2024-03-31T00:00:00Z", "2024-04-01T00:00:00+01:00"},
		{"Europe/London", day, 0, "2024-10-27T12:00:00Z", "2024-10-27T00:00:00+01:00", "2024-10-28T00:00:00Z"},
		{"Europe/London", month, 0, "2024-05-31T23:30:00Z", "2024-06-01T00:00:00+01:00", "2024-07-01T00:00:00+01:00"},
		{"Europe/London", year, 0, "2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},

		// Sao Paulo, 2018-19: DST began at midnight (00:00 -03 became 01:00
		// -02) and ended at midnight (00:00 -02 became 23:00 -03). Go
		// normalizes the missing midnight of 4 Nov to 23:00 -03 on the 3rd,
		// so that is where the 4th's window starts.
		{"America/Sao_Paulo", day, 0, "2018-11-03T12:00:00-03:00", "2018-11-03T00:00:00-03:00", "2018-11-03T23:00:00-03:00"},
		{"America/Sao_Paulo", day, 0, "2018-11-03T23:30:00-03:00", "2018-11-03T23:00:00-03:00", "2018-11-05T00:00:00-02:00"},
		{"America/Sao_Paulo", day, 0, "2018-11-04T12:00:00-02:00", "2018-11-03T23:00:00-03:00", "2018-11-05T00:00:00-02:00"},
		{"America/Sao_Paulo", day, 0, "2019-02-16T23:30:00-03:00", "2019-02-16T00:00:00-02:00", "2019-02-17T00:00:00-03:00"},
		{"America/Sao_Paulo", week, 0, "2018-11-04T12:00:00-02:00", "2018-10-29T00:00:00-03:00", "2018-11-05T00:00:00-02:00"},
		{"America/Sao_Paulo", month, 0, "2018-11-01T00:00:00-03:00", "2018-11-01T00:00:00-03:00", "2018-12-01T00:00:00-02:00"},

		// Beirut, 2022: midnight did not exist on 27 Mar (Go normalizes it
		// to 01:00 +03, the instant of 00:00 +02), and on 30 Oct 00:00 +03
		// became 23:00 +02 on the 29th, a 25-hour day.
		{"Asia/Beirut", day, 0, "2022-03-26T23:59:59.999999999+02:00", "2022-03-26T00:00:00+02:00", "2022-03-27T00:00:00+02:00"},
		{"Asia/Beirut", day, 0, "2022-03-27T12:00:00+03:00", "2022-03-27T00:00:00+02:00", "2022-03-28T00:00:00+03:00"},
		{"Asia/Beirut", day, 0, "2022-10-29T23:30:00+02:00", "2022-10-29T00:00:00+03:00", "2022-10-30T00:00:00+02:00"},

		// Havana, 2022: midnight did not exist on 13 Mar (normalized to 23:00
		// on the 12th) and happened twice on 6 Nov (the first counts).
		{"America/Havana", day, 0, "2022-03-12T12:00:00-05:00", "2022-03-12T00:00:00-05:00", "2022-03-12T23:00:00-05:00"},
		{"America/Havana", day, 0, "2022-11-06T00:30:00-05:00", "2022-11-06T00:00:00-04:00", "2022-11-07T00:00:00-05:00"},
		{"America/Havana", day, 0, "2022-11-05T23:59:59.999999999-04:00", "2022-11-05T00:00:00-04:00", "2022-11-06T00:00:00-04:00"},

		// Zones east of UTC and off the hour.
		{"Asia/Tokyo", year, 0, "2023-12-31T14:59:59.999999999Z", "2023-01-01T00:00:00+09:00", "2024-01-01T00:00:00+09:00"},
		{"Asia/Tokyo", year, 0, "2023-12-31T15:00:00Z", "2024-01-01T00:00:00+09:00", "2025-01-01T00:00:00+09:00"},
		{"Asia/Kolkata", month, 0, "2024-02-29T18:30:00Z", "2024-03-01T00:00:00+05:30", "2024-04-01T00:00:00+05:30"},
	} {
		c := newCal(t, tc.unit, tc.zone, tc.anchor)
		now, start, end := ts(t, tc.at), ts(t, tc.start), ts(t, tc.end)
		name := tc.zone + " " + c.String() + " at " + tc.at
		checkWindow(t, name, c, now, start, end)
		// The same instants on a calendar whose cache holds another window,
		// and on fresh ones: the answer never depends on the cache.
		c.Window(start - 365*24*int64(time.Hour))
		checkWindow(t, name+" (cache elsewhere)", c, now, start, end)
		for _, x := range []int64{start, end - 1, now} {
			fresh := newCal(t, tc.unit, tc.zone, tc.anchor)
			if s, e := fresh.Window(x); s != start || e != end {
				t.Errorf("%s: fresh Window(%s) = [%s, %s)", name, fmtNanos(x), fmtNanos(s), fmtNanos(e))
			}
		}
	}
}

// checkWindow checks the window of now and its edges: the first and last
// nanosecond belong to it, the nanosecond before ends the window before and
// the end starts the next.
func checkWindow(t *testing.T, name string, c *Calendar, now, start, end int64) {
	t.Helper()
	for _, x := range []int64{now, start, end - 1} {
		if s, e := c.Window(x); s != start || e != end {
			t.Errorf("%s: Window(%s) = [%s, %s), want [%s, %s)", name, fmtNanos(x), fmtNanos(s), fmtNanos(e), fmtNanos(start), fmtNanos(end))
		}
	}
	if _, e := c.Window(start - 1); e != start {
		t.Errorf("%s: the window before ends at %s, want %s", name, fmtNanos(e), fmtNanos(start))
	}
	if s, e := c.Window(end); s != end || e <= end {
		t.Errorf("%s: the window after is [%s, %s)", name, fmtNanos(s), fmtNanos(e))
	}
}

// At the ends of int64 (1677 and 2262) windows are capped, not wrapped.
func TestCalendarWindowAtTheEndsOfTime(t *testing.T) {
	c, _ := NewCalendar(CalendarYear, nil, 0)
	if s, e := c.Window(math.MinInt64); s != math.MinInt64 || e != ts(t, "1678-01-01T00:00:00Z") {
		t.Fatalf("MinInt64: [%d, %s)", s, fmtNanos(e))
	}
	if s, e := c.Window(math.MaxInt64); s != ts(t, "2262-01-01T00:00:00Z") || e != math.MaxInt64 {
		t.Fatalf("MaxInt64: [%s, %d)", fmtNanos(s), e)
	}
	d := newCal(t, CalendarDay, "Pacific/Kiritimati", 0) // UTC+14
	for _, now := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, math.MinInt64 + 1} {
		if s, e := d.Window(now); s > now || e < now || s >= e {
			t.Fatalf("%d: [%d, %d)", now, s, e)
		}
	}
	l := Limit{Algorithm: FixedWindow, Limit: 2, Period: time.Hour, Calendar: c}
	var s State
	for range 3 {
		o := l.Decide(&s, math.MaxInt64-5, 1, true)
		if o.Reset != 5 || o.Allowed && o.RetryAfter != 0 || !o.Allowed && o.RetryAfter != 5 {
			t.Fatalf("%+v", o)
		}
	}
}

// The cache: a hit allocates nothing, and the window before the cached one
// is answered without replacing it.
func TestCalendarWindowCache(t *testing.T) {
	c := newCal(t, CalendarMonth, "Europe/Paris", 17)
	now := ts(t, "2024-03-20T12:00:00+01:00")
	start, end := c.Window(now)
	cached := c.last.Load()
	if n := testing.AllocsPerRun(1000, func() { c.Window(now) }); n != 0 {
		t.Fatalf("%v allocs per Window", n)
	}
	if s, e := c.Window(start - 1); e != start || s != ts(t, "2024-02-17T00:00:00+01:00") || c.last.Load() != cached {
		t.Fatalf("the window before: [%s, %s), cache replaced %v", fmtNanos(s), fmtNanos(e), c.last.Load() != cached)
	}
	if s, _ := c.Window(end); s != end || c.last.Load() == cached {
		t.Fatal("the next window did not replace the cache")
	}
}

// Random instants from 1900 to 2100 in zones with odd rules: windows
// partition time, and each starts on its unit's local midnight, or next to
// a zone transition where Go normalized a missing midnight.
func TestCalendarWindowProperties(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "America/Sao_Paulo", "Asia/Beirut", "America/Havana",
		"Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Asia/Tehran"}
	rng := rand.New(rand.NewSource(5))
	lo, hi := ts(t, "1900-01-01T00:00:00Z"), ts(t, "2100-01-01T00:00:00Z")
	for range 20_000 {
		u := CalendarUnit(1 + rng.Intn(4))
		anchor := 0
		if u == CalendarMonth {
			anchor = rng.Intn(32)
		}
		zone := zones[rng.Intn(len(zones))]
		c := newCal(t, u, zone, anchor)
		now := lo + rng.Int63n(hi-lo)
		start, end := c.Window(now)
		name := zone + " " + c.String() + " at " + fmtNanos(now)
		if !(start <= now && now < end) {
			t.Fatalf("%s: [%s, %s)", name, fmtNanos(start), fmtNanos(end))
		}
		checkWindow(t, name, c, now, start, end)
		loc := c.Location()
		ls := time.Unix(0, start).In(loc)
		if ls.Hour() != 0 || ls.Minute() != 0 || ls.Second() != 0 || ls.Nanosecond() != 0 {
			// A normalized midnight lies within the gap's length (an hour
			// or two, or minutes from a local mean time) of a transition.
			const near = 3 * int64(time.Hour)
			_, before := time.Unix(0, start-near).In(loc).Zone()
			if _, after := time.Unix(0, start+near).In(loc).Zone(); after == before {
				t.Fatalf("%s: starts at %v, neither midnight nor near a transition", name, ls)
			}
			continue
		}
		ok := true
		switch u {
		case CalendarWeek:
			ok = ls.Weekday() == time.Monday
		case CalendarMonth:
			ok = ls.Day() == min(max(anchor, 1), daysIn(ls.Year(), ls.Month()))
		case CalendarYear:
			ok = ls.YearDay() == 1
		}
		if !ok {
			t.Fatalf("%s: starts at %v", name, ls)
		}
	}
}

// Many goroutines share calendars at instants on both sides of boundaries:
// each gets the window of its own instant, whichever the cache holds.
func TestCalendarWindowConcurrent(t *testing.T) {
	c := newCal(t, CalendarDay, "America/New_York", 0)
	ref := newCal(t, CalendarDay, "America/New_York", 0)
	midnight := ts(t, "2024-03-10T00:00:00-05:00")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for range 2000 {
				now := midnight + rng.Int63n(4*int64(24*time.Hour)) - 2*int64(24*time.Hour)
				s, e := c.Window(now)
				// ref is not shared, and so is computed afresh more often.
				if ws, we := (&Calendar{unit: ref.unit, loc: ref.loc}).Window(now); s != ws || e != we {
					t.Errorf("Window(%s) = [%s, %s), want [%s, %s)", fmtNanos(now), fmtNanos(s), fmtNanos(e), fmtNanos(ws), fmtNanos(we))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// calStep is one request at an absolute instant.
type calStep struct {
	at   string
	cost int64
	peek bool
	want Outcome
}

// runCalSteps decides the steps with Limit.Decide and, side by side, on one
// key of a Cache (whose fast path takes the allowed consuming checks).
func runCalSteps(t *testing.T, l Limit, steps []calStep) {
	t.Helper()
	var s State
	c, limits, out := NewCache(), []Limit{l}, make([]Outcome, 1)
	for i, st := range steps {
		cost := max(st.cost, 1)
		now := ts(t, st.at)
		got := l.Decide(&s, now, cost, !st.peek)
		if got != st.want {
			t.Fatalf("step %d (%s, cost %d, peek %v):\n got %+v\nwant %+v", i, st.at, cost, st.peek, got, st.want)
		}
		if c.Check("k", limits, now, cost, !st.peek, out); out[0] != st.want {
			t.Fatalf("step %d (%s, cost %d, peek %v): cache %+v, want %+v", i, st.at, cost, st.peek, out[0], st.want)
		}
	}
}

// A month quota of 3 in New York: the last millisecond of February admits
// the third request and denies the fourth until local midnight of the 1st,
// and Reset counts to the real end of the window (March is an hour short).
func TestCalendarMonthDecisions(t *testing.T) {
	cal := newCal(t, CalendarMonth, "America/New_York", 0)
	l := Limit{Algorithm: FixedWindow, Limit: 3, Period: 30 * 24 * time.Hour, Calendar: cal}
	const ms = time.Millisecond
	march := 31*24*time.Hour - time.Hour // 1 Mar 00:00 EST to 1 Apr 00:00 EDT
	runCalSteps(t, l, []calStep{
		{at: "2024-02-29T23:59:59.997-05:00", want: ok(3, 2, 3*ms)},
		{at: "2024-02-29T23:59:59.998-05:00", want: ok(3, 1, 2*ms)},
		{at: "2024-02-29T23:59:59.999-05:00", want: ok(3, 0, ms)}, // the third
		{at: "2024-02-29T23:59:59.999-05:00", want: deny(3, 0, ms, ms)},
		{at: "2024-02-29T23:59:59.999999999-05:00", want: deny(3, 0, 1, 1)},
		{at: "2024-03-01T00:00:00-05:00", want: ok(3, 2, march)}, // a new month
		{at: "2024-03-01T00:00:00-05:00", cost: 3, peek: true, want: deny(3, 2, march, march)},
		{at: "2024-03-01T00:00:00-05:00", cost: 4, want: deny(3, 2, march, Never)},
		{at: "2024-03-31T23:59:59.999-04:00", cost: 2, want: ok(3, 0, ms)},
		{at: "2024-04-01T00:00:00-04:00", want: ok(3, 2, 30*24*time.Hour)},
	})
}

// An anchor of 31 clamps to 28 February: the window that began on 31 Jan
// ends there, and the next runs to 31 March.
func TestCalendarAnchorDecisions(t *testing.T) {
	cal := newCal(t, CalendarMonth, "UTC", 31)
	l := Limit{Algorithm: FixedWindow, Limit: 2, Period: 30 * 24 * time.Hour, Calendar: cal}
	const ms = time.Millisecond
	runCalSteps(t, l, []calStep{
		{at: "2023-02-05T00:00:00Z", want: ok(2, 1, 23*24*time.Hour)},
		{at: "2023-02-27T23:59:59.999Z", want: ok(2, 0, ms)},
		{at: "2023-02-27T23:59:59.999Z", want: deny(2, 0, ms, ms)},
		{at: "2023-02-28T00:00:00Z", want: ok(2, 1, 31*24*time.Hour)},
	})
}

// A day in a zone whose midnight did not exist: the window of 4 Nov 2018
// in Sao Paulo began at 23:00 on the 3rd, so a request at 23:30 local on
// the 3rd is in the new day.
func TestCalendarDayWithMissingMidnight(t *testing.T) {
	cal := newCal(t, CalendarDay, "America/Sao_Paulo", 0)
	l := Limit{Algorithm: FixedWindow, Limit: 1, Period: 24 * time.Hour, Calendar: cal}
	runCalSteps(t, l, []calStep{
		{at: "2018-11-03T22:59:59-03:00", want: ok(1, 0, time.Second)},
		{at: "2018-11-03T22:59:59.5-03:00", want: deny(1, 0, 500*time.Millisecond, 500*time.Millisecond)},
		{at: "2018-11-03T23:30:00-03:00", want: ok(1, 0, 23*time.Hour+30*time.Minute)},
	})
}

// States persist as (Tokens, At = window start). A restart loading them in
// the same window keeps the count, even on the last second of the month;
// one after the window's end starts from zero. Neither depends on the
// Calendar being the same object: a recompiled policy's equal calendar
// keeps the state.
func TestCalendarRestart(t *testing.T) {
	limits := []Limit{{Algorithm: FixedWindow, Limit: 3, Period: 30 * 24 * time.Hour, Calendar: newCal(t, CalendarMonth, "America/New_York", 0)}}
	recompiled := []Limit{{Algorithm: FixedWindow, Limit: 3, Period: 30 * 24 * time.Hour, Calendar: newCal(t, CalendarMonth, "America/New_York", 1)}}
	out := make([]Outcome, 1)
	last := ts(t, "2024-03-31T23:59:59-04:00")
	start, end := ts(t, "2024-03-01T00:00:00-05:00"), ts(t, "2024-04-01T00:00:00-04:00")

	c := NewCache()
	c.Check("k", limits, last, 2, true, out)
	d := drainAll(c)["k"]
	if len(d.states) != 1 || d.states[0].Tokens != 2 || d.states[0].At != start || d.fullAt != end {
		t.Fatalf("drained %+v, want 2 at %s, full at %s", d, fmtNanos(start), fmtNanos(end))
	}

	// Restarted half a second later, in the same month: the count holds.
	c2 := NewCache()
	c2.Load("k", limits, d.states, d.fullAt)
	if ok, _ := c2.Check("k", recompiled, last+int64(500*time.Millisecond), 1, true, out); !ok || out[0].Remaining != 0 || out[0].Reset != 500*time.Millisecond {
		t.Fatalf("same month: %+v", out[0])
	}
	if ok, _ := c2.Check("k", recompiled, last+int64(999*time.Millisecond), 1, true, out); ok || out[0].RetryAfter != time.Millisecond {
		t.Fatalf("same month, over: %+v", out[0])
	}
	if got := drainAll(c2)["k"]; got.states[0].At != start || got.states[0].Tokens != 3 {
		t.Fatalf("a recompiled policy changed the state: %+v", got)
	}

	// Restarted after the month's end: a new month.
	c3 := NewCache()
	if !c3.LoadIfAbsent("k", limits, d.states, d.fullAt) {
		t.Fatal("LoadIfAbsent")
	}
	if n := c3.Sweep(end - 1); n != 0 {
		t.Fatalf("swept %d buckets before the month's end", n)
	}
	if ok, _ := c3.Check("k", recompiled, end, 1, true, out); !ok || out[0].Remaining != 2 || out[0].Reset != 30*24*time.Hour {
		t.Fatalf("next month: %+v", out[0])
	}
	c4 := NewCache()
	c4.Load("k", limits, d.states, d.fullAt)
	if n := c4.Sweep(end); n != 1 {
		t.Fatalf("swept %d buckets at the month's end, want 1", n)
	}
}

func TestCalendarEqual(t *testing.T) {
	ny := newCal(t, CalendarMonth, "America/New_York", 0)
	for _, tc := range []struct {
		c    *Calendar
		want bool
	}{
		{ny, true},
		{newCal(t, CalendarMonth, "America/New_York", 1), true}, // 0 means 1
		{newCal(t, CalendarMonth, "America/New_York", 2), false},
		{newCal(t, CalendarMonth, "America/Chicago", 1), false},
		{newCal(t, CalendarWeek, "America/New_York", 0), false},
		{nil, false},
	} {
		if got := ny.Equal(tc.c); got != tc.want || tc.c.Equal(ny) != tc.want {
			t.Errorf("%v == %v: %v", ny, tc.c, got)
		}
		a := Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Hour, Calendar: ny}
		b := a
		b.Calendar = tc.c
		if a.Equal(b) != tc.want || equalLimits([]Limit{a}, []Limit{b}) != tc.want {
			t.Errorf("limits with %v and %v: %v", ny, tc.c, a.Equal(b))
		}
	}
	var none *Calendar
	if !none.Equal(nil) || none.String() != "<nil>" {
		t.Fatal("nil calendars")
	}
	a := Limit{Algorithm: FixedWindow, Limit: 5, Period: time.Hour, Calendar: ny}
	b := Limit{Algorithm: FixedWindow, Limit: 5, Period: 2 * time.Hour, Calendar: ny}
	if a.Equal(b) {
		t.Fatal("limits of other periods are equal")
	}
}

// Validate: a calendar needs a fixed window, one made by NewCalendar, and a
// Period within bounds (the nominal length callers report; no window uses
// it). A limit that fails is denied, never decided.
func TestCalendarValidate(t *testing.T) {
	cal := newCal(t, CalendarDay, "UTC", 0)
	for _, tc := range []struct {
		l     Limit
		field string
	}{
		{Limit{Algorithm: FixedWindow, Limit: 5, Period: 24 * time.Hour, Calendar: cal}, ""},
		{Limit{Algorithm: TokenBucket, Limit: 5, Period: 24 * time.Hour, Calendar: cal}, "calendar"},
		{Limit{Algorithm: SlidingWindow, Limit: 5, Period: 24 * time.Hour, Calendar: cal}, "calendar"},
		{Limit{Algorithm: SlidingLog, Limit: 5, Period: 24 * time.Hour, Calendar: cal}, "calendar"},
		{Limit{Algorithm: FixedWindow, Limit: 5, Period: 24 * time.Hour, Calendar: &Calendar{}}, "calendar"},
		{Limit{Algorithm: FixedWindow, Limit: 5, Calendar: cal}, "period"},
		{Limit{Algorithm: FixedWindow, Limit: 0, Period: time.Hour, Calendar: cal}, "limit"},
	} {
		err := tc.l.Validate()
		var fe *FieldError
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.l, err)
			}
			continue
		}
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want a %q error", tc.l, err, tc.field)
		}
		var s State
		if o := tc.l.Decide(&s, t0, 1, true); o.Allowed || o.RetryAfter != Never || s.At != 0 || s.Tokens != 0 {
			t.Errorf("%+v decided: %+v", tc.l, o)
		}
		if tc.l.FullAt(&State{Tokens: 1, At: t0}) != 0 {
			t.Errorf("%+v: FullAt", tc.l)
		}
	}
}

// Force, Refund, FullAt and the status of a limit that allowed when another
// denied all use the calendar's windows.
func TestCalendarForceRefundStatus(t *testing.T) {
	cal := newCal(t, CalendarMonth, "America/New_York", 0)
	l := Limit{Algorithm: FixedWindow, Limit: 3, Period: 30 * 24 * time.Hour, Calendar: cal}
	start, end := ts(t, "2024-03-01T00:00:00-05:00"), ts(t, "2024-04-01T00:00:00-04:00")
	now := ts(t, "2024-03-10T12:00:00-04:00")
	var s State
	l.Force(&s, now, 5)
	if s.Tokens != 5 || s.At != start || l.FullAt(&s) != end {
		t.Fatalf("forced: %+v, full at %s", s, fmtNanos(l.FullAt(&s)))
	}
	if o := l.Decide(&s, now, 1, true); o != deny(3, 0, time.Duration(end-now), time.Duration(end-now)) {
		t.Fatalf("over: %+v", o)
	}
	l.Refund(&s, now, 4)
	if o := l.Decide(&s, now, 1, true); o != ok(3, 1, time.Duration(end-now)) {
		t.Fatalf("refunded: %+v", o)
	}
	l.Refund(&s, end, 1) // nothing to give back in April
	if s.Tokens != 0 || s.At != end {
		t.Fatalf("refund in the next window: %+v", s)
	}
	l.Force(&s, end+1, 1)
	if s.Tokens != 1 || s.At != end {
		t.Fatalf("forced in April: %+v", s)
	}

	c, out := NewCache(), make([]Outcome, 2)
	limits := []Limit{l, {Name: "burst", Algorithm: TokenBucket, Limit: 1, Period: time.Hour}}
	c.Force("k", limits[:1], now, 2)
	if !c.Refund([]byte("k"), limits[:1], now, 1) {
		t.Fatal("refund of an existing bucket")
	}
	if d := drainAll(c)["k"]; d.states[0].Tokens != 1 || d.states[0].At != start || d.fullAt != end {
		t.Fatalf("cache force and refund: %+v", d)
	}
	c.Check("m", limits, now, 1, true, out)
	// The token bucket denies; the month describes its bucket unchanged.
	if allowed, report := c.Check("m", limits, now, 1, true, out); allowed || report != 1 || out[0] != ok(3, 2, time.Duration(end-now)) {
		t.Fatalf("status: %v %d %+v", allowed, report, out)
	}
}

// Changing a fixed window's windows carries the count of the old window at
// now into the new window that now falls in, as carry documents.
func TestCalendarRemap(t *testing.T) {
	utc := newCal(t, CalendarMonth, "UTC", 0)
	fw := func(c *Calendar, p time.Duration) Limit {
		return Limit{Algorithm: FixedWindow, Limit: 100, Period: p, Calendar: c}
	}
	month := 30 * 24 * time.Hour
	for _, tc := range []struct {
		name     string
		from, to Limit
		st       State
		now      string
		want     State
	}{
		{"an equal calendar keeps the state as it is", fw(utc, month), fw(newCal(t, CalendarMonth, "UTC", 1), time.Hour),
			State{Tokens: 7, At: ts(t, "2024-01-03T00:00:00Z")}, "2024-01-20T00:00:00Z", State{Tokens: 7, At: ts(t, "2024-01-03T00:00:00Z")}},
		{"an hour into its month: all", fw(nil, time.Hour), fw(utc, month),
			State{Tokens: 4, At: ts(t, "2024-01-20T10:00:00Z")}, "2024-01-20T10:30:00Z", State{Tokens: 4, At: ts(t, "2024-01-01T00:00:00Z")}},
		{"a day into its month: all", fw(newCal(t, CalendarDay, "UTC", 0), 24*time.Hour), fw(utc, month),
			State{Tokens: 5, At: ts(t, "2024-01-20T00:00:00Z")}, "2024-01-20T10:00:00Z", State{Tokens: 5, At: ts(t, "2024-01-01T00:00:00Z")}},
		{"a month to a zone whose month began earlier: all", fw(utc, month), fw(newCal(t, CalendarMonth, "Europe/Paris", 0), month),
			State{Tokens: 9, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-15T00:00:00Z", State{Tokens: 9, At: ts(t, "2023-12-31T23:00:00Z")}},
		// ceil(9 × 463 h / 468 h) = ceil(8.9)
		{"a month to a zone whose month began 5 h later: nearly all", fw(utc, month), fw(newCal(t, CalendarMonth, "America/New_York", 0), month),
			State{Tokens: 9, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-20T12:00:00Z", State{Tokens: 9, At: ts(t, "2024-01-01T05:00:00Z")}},
		// ceil(9 × 30 min / 30 d 23.5 h): January's usage does not fill February
		{"a month to a zone whose next month began 30 min ago: next to nothing", fw(utc, month), fw(newCal(t, CalendarMonth, "Europe/Paris", 0), month),
			State{Tokens: 9, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-31T23:30:00Z", State{Tokens: 1, At: ts(t, "2024-01-31T23:00:00Z")}},
		// ceil(10 × 5 d / 19 d) = ceil(2.6)
		{"another anchor", fw(utc, month), fw(newCal(t, CalendarMonth, "UTC", 15), month),
			State{Tokens: 10, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-20T00:00:00Z", State{Tokens: 3, At: ts(t, "2024-01-15T00:00:00Z")}},
		// ceil(10 × 10 h / 466 h)
		{"a month to a day", fw(utc, month), fw(newCal(t, CalendarDay, "UTC", 0), 24*time.Hour),
			State{Tokens: 10, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-20T10:00:00Z", State{Tokens: 1, At: ts(t, "2024-01-20T00:00:00Z")}},
		// ceil(10 × 30 min / 466.5 h)
		{"a month to an hour", fw(utc, month), fw(nil, time.Hour),
			State{Tokens: 10, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-20T10:30:00Z", State{Tokens: 1, At: ts(t, "2024-01-20T10:00:00Z")}},
		{"a new month at the change itself: nothing", fw(utc, month), fw(newCal(t, CalendarMonth, "Europe/Paris", 0), month),
			State{Tokens: 9, At: ts(t, "2024-01-01T00:00:00Z")}, "2024-01-31T23:00:00Z", State{}},
		{"an ended window carries nothing", fw(utc, month), fw(newCal(t, CalendarMonth, "Europe/Paris", 0), month),
			State{Tokens: 9, At: ts(t, "2023-12-01T00:00:00Z")}, "2024-01-20T00:00:00Z", State{}},
		{"periods keep their rule: all", fw(nil, time.Hour), fw(nil, time.Minute),
			State{Tokens: 50, At: ts(t, "2024-01-20T10:00:00Z")}, "2024-01-20T10:30:30Z", State{Tokens: 50, At: ts(t, "2024-01-20T10:30:00Z")}},
	} {
		if got := carry(&tc.from, &tc.to, tc.st, ts(t, tc.now)); got.Tokens != tc.want.Tokens || got.At != tc.want.At {
			t.Errorf("%s: %v at %s, want %v at %s", tc.name, got.Tokens, fmtNanos(got.At), tc.want.Tokens, fmtNanos(tc.want.At))
		}
	}

	// Through the cache: a zone change just after the new zone's midnight
	// leaves February nearly whole.
	c, out := NewCache(), make([]Outcome, 1)
	v1 := []Limit{{Algorithm: FixedWindow, Limit: 10, Period: month, Calendar: utc}}
	v2 := []Limit{{Algorithm: FixedWindow, Limit: 10, Period: month, Calendar: newCal(t, CalendarMonth, "Europe/Paris", 0)}}
	c.Check("k", v1, ts(t, "2024-01-31T22:00:00Z"), 10, true, out)
	now := ts(t, "2024-01-31T23:30:00Z")
	if ok, _ := c.Check("k", v2, now, 1, true, out); !ok || out[0].Remaining != 8 || out[0].Reset != time.Duration(ts(t, "2024-02-29T23:00:00Z")-now) {
		t.Fatalf("zone change: %+v", out[0])
	}
}

// Many goroutines decide keys of one day limit across a local midnight,
// sharing its calendar, while drains and sweeps run: meaningful under
// -race. Each key is checked by one goroutine, in order, so each window
// admits exactly its limit; a key shared by all, with instants out of
// order, admits at most a limit per window.
func TestCacheCalendarConcurrentAcrossBoundary(t *testing.T) {
	cal := newCal(t, CalendarDay, "America/New_York", 0)
	limits := []Limit{{Algorithm: FixedWindow, Limit: 10, Period: 24 * time.Hour, Calendar: cal}}
	midnight := ts(t, "2024-03-10T00:00:00-05:00")
	c := NewCache()
	const goroutines, keys, per = 8, 4, 30
	var wg sync.WaitGroup
	var shared [goroutines]int
	errs := make(chan string, goroutines+1)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]Outcome, 1)
			var before, after [keys]int
			for i := range 2 * per {
				now := midnight - int64(per*time.Millisecond) + int64(i)*int64(time.Millisecond)
				for j := range keys {
					allowed, _ := c.Check(fmtKey(g, j), limits, now, 1, true, out)
					switch {
					case !allowed && now < midnight && out[0].RetryAfter != time.Duration(midnight-now):
						errs <- "a denial before midnight waits " + out[0].RetryAfter.String()
						return
					case allowed && now < midnight:
						before[j]++
					case allowed:
						after[j]++
					}
				}
				if ok, _ := c.Check("shared", limits, now, 1, true, out); ok {
					shared[g]++
				}
			}
			for j := range keys {
				if before[j] != 10 || after[j] != 10 {
					errs <- fmtKey(g, j) + " admitted other than 10 a day"
					return
				}
			}
		}()
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
				c.DrainDirty(func(string, []Limit, []State, int64) {})
				if n := c.Sweep(midnight - int64(time.Second)); n != 0 {
					errs <- "swept a bucket in use"
					return
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	<-stopped
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	total := 0
	for _, n := range shared {
		total += n
	}
	if total < 10 || total > 20 {
		t.Errorf("the shared key admitted %d over two days of 10", total)
	}
}

func fmtKey(g, j int) string { return "k" + string(rune('a'+g)) + string(rune('a'+j)) }
