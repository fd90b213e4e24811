package quota

import (
	"testing"
	"time"
)

// A refund gives consumption back, never beyond a full bucket, for every
// algorithm; a later check sees it.
func TestRefund(t *testing.T) {
	const sec = int64(time.Second)
	t0 := int64(1_700_000_000) * sec
	for _, alg := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := []Limit{{Algorithm: alg, Limit: 10, Period: time.Hour}}
			c := NewCache()
			key := []byte("t/p/ip:1")
			out := make([]Outcome, 1)
			if c.Refund(key, lim, t0, 3) {
				t.Fatal("refund of an absent bucket reported one")
			}
			for i := 0; i < 10; i++ {
				if ok, _ := c.CheckBytes(key, lim, t0, 1, true, out); !ok {
					t.Fatalf("check %d denied", i)
				}
			}
			if ok, _ := c.CheckBytes(key, lim, t0, 1, true, out); ok {
				t.Fatal("11th check allowed")
			}
			if !c.Refund(key, lim, t0, 4) {
				t.Fatal("refund found no bucket")
			}
			c.CheckBytes(key, lim, t0, 1, false, out)
			// A peek of cost 1 reports what would remain after it.
			if out[0].Remaining != 3 {
				t.Fatalf("remaining after a refund of 4 and a peek of 1: %d, want 3", out[0].Remaining)
			}
			c.Refund(key, lim, t0, 100)
			c.CheckBytes(key, lim, t0, 1, false, out)
			if out[0].Remaining != 9 {
				t.Fatalf("remaining after a refund past full and a peek of 1: %d, want 9 (never above capacity)", out[0].Remaining)
			}
		})
	}
}

// A window's period ends at the next multiple of its period, or at its
// calendar's next boundary; a token bucket has no period to end.
func TestPeriodEnd(t *testing.T) {
	const sec = int64(time.Second)
	now := int64(1_800_000_030) * sec
	fw := Limit{Algorithm: FixedWindow, Limit: 1, Period: time.Minute}
	if got, want := fw.PeriodEnd(now), (now/(60*sec)+1)*60*sec; got != want {
		t.Errorf("fixed window: %d, want %d", got, want)
	}
	cal, err := NewCalendar(CalendarDay, time.UTC, 0)
	if err != nil {
		t.Fatal(err)
	}
	day := Limit{Algorithm: FixedWindow, Limit: 1, Period: 24 * time.Hour, Calendar: cal}
	if got, want := day.PeriodEnd(now), (now/(86400*sec)+1)*86400*sec; got != want {
		t.Errorf("calendar day: %d, want %d", got, want)
	}
	tb := Limit{Algorithm: TokenBucket, Limit: 1, Period: time.Minute}
	if tb.PeriodEnd(now) != 0 {
		t.Error("a token bucket has a period end")
	}
}

// A refund of units consumed at since gives back nothing from a window
// that began after since (a month quota's reservation settled in the next
// month leaves the new month's count alone), and answers what each limit
// gave back, capped by what it holds.
func TestRefundSince(t *testing.T) {
	const sec = int64(time.Second)
	utc, _ := NewCalendar(CalendarMonth, time.UTC, 1)
	jan31 := time.Date(2027, time.January, 31, 23, 59, 0, 0, time.UTC).UnixNano()
	feb1 := jan31 + 2*60*sec
	lim := []Limit{
		{Algorithm: FixedWindow, Limit: 100, Period: 30 * 24 * time.Hour, Calendar: utc},
		{Algorithm: TokenBucket, Limit: 10, Period: time.Hour},
		{Algorithm: SlidingLog, Limit: 10, Period: time.Hour},
	}
	c := NewCache()
	key := []byte("t/p/key:k")
	out := make([]Outcome, len(lim))
	given := make([]float64, len(lim))
	if ok, _ := c.CheckBytes(key, lim, jan31, 6, true, out); !ok {
		t.Fatalf("the reserve was denied: %+v", out)
	}
	if ok, _ := c.CheckBytes(key, lim, feb1, 2, true, out); !ok {
		t.Fatal("February's check was denied")
	}
	// Settle 0 of 6 in February: the month count is February's (2) and
	// keeps it; the token bucket takes back what fits; the log forgets the
	// 6 entries of January 31 but not February's 2.
	if !c.RefundSince(key, lim, feb1, 6, jan31, given) {
		t.Fatal("no bucket")
	}
	if given[0] != 0 || given[1] < 5.9 || given[1] > 6 || given[2] != 6 {
		t.Fatalf("given %v, want [0 ~6 6]", given)
	}
	c.CheckBytes(key, lim, feb1, 1, false, out) // a look at one unit: one less than is left
	if out[0].Remaining != 97 || out[2].Remaining != 7 {
		t.Fatalf("after the refund: %+v", out)
	}
	// A refund within the window gives back no more than it holds.
	if c.RefundSince(key, lim, feb1, 50, feb1-sec, given); given[0] != 2 || given[2] != 2 || given[1] > 4 {
		t.Fatalf("a refund larger than the count: given %v", given)
	}
}
