package rlsconf_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/rlsconf"
)

// The reference's windows are Sluice's fixed windows: aligned at multiples
// of the unit since the unix epoch, with the same reset at whole seconds.
func TestWindowsAreSluiceFixedWindows(t *testing.T) {
	instants := []time.Time{
		time.Date(2026, 3, 18, 13, 47, 29, 0, time.UTC),
		time.Date(2026, 3, 18, 13, 47, 29, 999_999_999, time.UTC),
		time.Date(2031, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Unix(400*86400+1, 0),
	}
	for u := rlsconf.Second; u <= rlsconf.Week; u++ {
		period := time.Duration(u.Seconds()) * time.Second
		l := quota.Limit{Algorithm: quota.FixedWindow, Limit: 10, Period: period}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, at := range instants {
			var s quota.State
			o := l.Decide(&s, at.UnixNano(), 1, true)
			if start := u.WindowStart(at); s.At != start.UnixNano() {
				t.Errorf("%v at %v: Sluice's window starts %v, the reference's %v", u, at, time.Unix(0, s.At).UTC(), start.UTC())
			}
			if at.Nanosecond() == 0 && o.Reset != u.ResetAfter(at) {
				t.Errorf("%v at %v: Sluice resets after %v, the reference after %v", u, at, o.Reset, u.ResetAfter(at))
			}
		}
	}
}
