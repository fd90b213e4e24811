package quota

// Calendar windows. A Limit with a Calendar is a fixed-window counter whose
// windows are local days, ISO weeks, months from an anchor day, or years in
// a time zone, instead of multiples of Period since the epoch.
//
// Boundaries. The window boundaries of a calendar are the instants
// time.Date gives for each local midnight that starts a window (a midnight
// that does not exist on a DST day normalizes as Go normalizes it, to a
// nearby instant). Boundaries increase strictly, so they partition time: the
// window of an instant is the pair of consecutive boundaries around it. The
// local date of the instant names a candidate pair, which is then moved by
// whole windows until it contains the instant, because a normalized midnight
// can fall on the local date before it (America/Sao_Paulo, 4 Nov 2018: the
// day starts at 23:00 on the 3rd).
//
// Window cache. Computing a window costs a few time.Date calls and zone
// lookups, far more than the rest of a check. But every check of a calendar
// limit falls in the same window for a day at least, so each Calendar keeps
// the last window it computed in an atomic pointer to an immutable span, and
// a check costs one atomic load and two compares. Windows never overlap, so
// whichever goroutine stores last, the span it stores is right for every
// instant inside it; a miss stores a new span (one small allocation per
// window change, not per check). The span also keeps the window before, so
// a bucket last used in the previous window (its expiry after a boundary,
// a server whose clock lags a little) is answered without replacing it.

import (
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// CalendarUnit is the length of a calendar window. The zero CalendarUnit is
// invalid.
type CalendarUnit uint8

// The units a Calendar can use.
const (
	// CalendarDay runs from local midnight to the next local midnight: 23 or
	// 25 hours on DST days.
	CalendarDay CalendarUnit = iota + 1
	// CalendarWeek runs from Monday 00:00 local (ISO weeks) to the next Monday.
	CalendarWeek
	// CalendarMonth runs from the anchor day 00:00 local to the next month's
	// anchor day, each clamped to its month's last day.
	CalendarMonth
	// CalendarYear runs from 1 January 00:00 local to the next 1 January.
	CalendarYear
)

var calendarUnitNames = [...]string{
	CalendarDay:   "day",
	CalendarWeek:  "week",
	CalendarMonth: "month",
	CalendarYear:  "year",
}

// String returns the API name of u ("day", "week", "month", "year"), or
// "calendar_unit(N)" for an invalid value.
func (u CalendarUnit) String() string {
	if u.Valid() {
		return calendarUnitNames[u]
	}
	return "calendar_unit(" + strconv.Itoa(int(u)) + ")"
}

// Valid reports whether u is one of the defined units.
func (u CalendarUnit) Valid() bool { return u >= CalendarDay && u <= CalendarYear }

// ParseCalendarUnit parses an API unit name, ignoring ASCII case. The error
// is a *FieldError for field "calendar".
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	for u := CalendarDay; u <= CalendarYear; u++ {
		if strings.EqualFold(s, calendarUnitNames[u]) {
			return u, nil
		}
	}
	return 0, &FieldError{Field: "calendar", Message: "must be one of day, week, month, year (got " + strconv.Quote(s) + ")"}
}

// MarshalText implements encoding.TextMarshaler with the API name.
func (u CalendarUnit) MarshalText() ([]byte, error) {
	if !u.Valid() {
		return nil, &FieldError{Field: "calendar", Message: "invalid value " + strconv.Itoa(int(u))}
	}
	return []byte(calendarUnitNames[u]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, as ParseCalendarUnit.
func (u *CalendarUnit) UnmarshalText(b []byte) error {
	v, err := ParseCalendarUnit(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// Calendar is a sequence of calendar windows in a time zone. It is immutable
// once made by NewCalendar (its window cache aside, which is internal and
// synchronised), and safe to share between goroutines and limits. The zero
// Calendar is not usable: a Limit with one fails Validate.
type Calendar struct {
	unit   CalendarUnit
	anchor int // 1..31 for a month, else 0
	loc    *time.Location
	last   atomic.Pointer[span] // the window computed last; nil before the first
}

// span is one cached window [start, end) and the start of the one before.
type span struct {
	prev, start, end int64
}

// NewCalendar returns the calendar of unit windows in loc (nil means UTC).
// anchor is a month's first day, 1..31, clamped to each month's last day (0
// means 1); day, week and year calendars take no anchor (0). The error is a
// *FieldError for field "calendar" or "anchor".
func NewCalendar(unit CalendarUnit, loc *time.Location, anchor int) (*Calendar, error) {
	if !unit.Valid() {
		return nil, &FieldError{Field: "calendar", Message: "must be one of day, week, month, year"}
	}
	switch {
	case unit != CalendarMonth && anchor != 0:
		return nil, &FieldError{Field: "anchor", Message: "only a month calendar takes an anchor day"}
	case anchor < 0 || anchor > 31:
		return nil, &FieldError{Field: "anchor", Message: "must be a day of the month, 1 to 31"}
	case unit == CalendarMonth && anchor == 0:
		anchor = 1
	}
	if loc == nil {
		loc = time.UTC
	}
	return &Calendar{unit: unit, anchor: anchor, loc: loc}, nil
}

// Unit returns c's unit.
func (c *Calendar) Unit() CalendarUnit { return c.unit }

// Location returns c's time zone.
func (c *Calendar) Location() *time.Location { return c.loc }

// Anchor returns a month calendar's anchor day (1..31), or 0.
func (c *Calendar) Anchor() int { return c.anchor }

// String describes c: "month@17 Europe/Paris", "day UTC".
func (c *Calendar) String() string {
	if c == nil {
		return "<nil>"
	}
	s := c.unit.String()
	if c.unit == CalendarMonth {
		s += "@" + strconv.Itoa(c.anchor)
	}
	if c.loc != nil {
		s += " " + c.loc.String()
	}
	return s
}

// Equal reports whether c and d define the same windows: the same unit,
// anchor and location name. Locations are compared by name, as LoadLocation
// names them (two fixed zones of one name are taken to be one zone). Two nil
// calendars are equal; nil and a non-nil calendar are not.
func (c *Calendar) Equal(d *Calendar) bool {
	if c == d {
		return true
	}
	if c == nil || d == nil || c.unit != d.unit || c.anchor != d.anchor {
		return false
	}
	return c.locName() == d.locName()
}

func (c *Calendar) locName() string {
	if c.loc == nil {
		return "UTC"
	}
	return c.loc.String()
}

// valid reports whether c was made by NewCalendar.
func (c *Calendar) valid() bool {
	return c.unit.Valid() && c.loc != nil && (c.unit == CalendarMonth) == (c.anchor != 0) && c.anchor <= 31
}

// Window returns the window that now (unix ns) falls in: start <= now < end,
// in unix ns. It is exact for every instant, but end is capped at
// math.MaxInt64 (in the year 2262) and start at math.MinInt64. In the
// steady state it costs an atomic load and two compares and allocates
// nothing.
func (c *Calendar) Window(now int64) (start, end int64) {
	if w := c.last.Load(); w != nil && now >= w.start && now < w.end {
		return w.start, w.end
	}
	return c.window(now)
}

// window is Window's miss: the window before the cached one is answered
// from the cache, any other is computed and cached.
func (c *Calendar) window(now int64) (start, end int64) {
	w := c.last.Load()
	if w != nil && now >= w.prev && now < w.start {
		return w.prev, w.start
	}
	w = c.compute(now)
	c.last.Store(w)
	return w.start, w.end
}

// compute finds the window of now from its local date.
func (c *Calendar) compute(now int64) *span {
	loc := c.loc
	if loc == nil {
		loc = time.UTC // the zero Calendar: never decided with, but must not panic
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	k := 0 // the candidate window is the k-th from the one named by y, m, d
	switch c.unit {
	case CalendarWeek:
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	case CalendarMonth:
		if d < min(c.anchor, daysIn(y, m)) {
			k = -1 // before this month's anchor: the window began last month
		}
	}
	// Boundaries are at least 22 hours apart and a normalized midnight moves
	// by an hour or two at most, so one step is the most either loop takes;
	// the bounds only guard the saturated boundaries at the ends of int64.
	for i := 0; i < 4 && now < c.bound(y, m, d, k); i++ {
		k--
	}
	for i := 0; i < 4; i++ {
		if b := c.bound(y, m, d, k+1); b > now || b == math.MaxInt64 {
			break
		}
		k++
	}
	return &span{prev: c.bound(y, m, d, k-1), start: c.bound(y, m, d, k), end: c.bound(y, m, d, k+1)}
}

// bound is the start of the k-th window from the one the local date y, m, d
// names (for a week, d is its Monday).
func (c *Calendar) bound(y int, m time.Month, d, k int) int64 {
	loc := c.loc
	if loc == nil {
		loc = time.UTC
	}
	var t time.Time
	switch c.unit {
	case CalendarWeek:
		t = time.Date(y, m, d+7*k, 0, 0, 0, 0, loc)
	case CalendarMonth:
		mi := int(m) - 1 + k
		y += mi / 12
		if mi %= 12; mi < 0 {
			mi += 12
			y--
		}
		mm := time.Month(mi + 1)
		t = time.Date(y, mm, min(c.anchor, daysIn(y, mm)), 0, 0, 0, 0, loc)
	case CalendarYear:
		t = time.Date(y+k, time.January, 1, 0, 0, 0, 0, loc)
	default:
		t = time.Date(y, m, d+k, 0, 0, 0, 0, loc)
	}
	return unixNanos(t)
}

var (
	minInstant = time.Unix(0, math.MinInt64)
	maxInstant = time.Unix(0, math.MaxInt64)
)

// unixNanos is t.UnixNano saturated at the ends of int64, where UnixNano's
// result is undefined.
func unixNanos(t time.Time) int64 {
	switch {
	case t.Before(minInstant):
		return math.MinInt64
	case t.After(maxInstant):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// daysIn returns the number of days in month m of year y.
func daysIn(y int, m time.Month) int {
	switch m {
	case time.February:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
