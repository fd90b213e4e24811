package e2e

// A history of check answers and the checks every fault test applies to it.
// The recorder keeps every answer the clients got (who asked, which server,
// when the request started and ended, and what came back); the checker
// knows nothing of Sluice's internals, only of a token bucket's arithmetic:
//
//   - admitted: a caller is never admitted more than its limit, plus what
//     refills over the run, plus the documented loss bound;
//   - remaining: no answer reports more remaining than an answer that had
//     completed before it started allows, given the refill between them plus
//     the loss bound (old state never comes back);
//   - agreement: once the faults are healed every server reports the same
//     remaining for a caller (peeks, which consume nothing);
//   - durability: after every server and the worker restart, a peek reports
//     what it reported before (SQLite holds the state the servers decided).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is one check's request and what came back.
type answer struct {
	Caller     string
	Server     string
	Start, End time.Time
	Status     int    // HTTP status; 0 when no answer came
	Err        string // transport error or the error body
	Peek       bool
	Allowed    bool
	Remaining  int64
	ResetMS    int64
}

func (a answer) ok() bool { return a.Status == 200 }

// history collects answers from many goroutines.
type history struct {
	mu      sync.Mutex
	answers []answer
}

func (h *history) add(a answer) {
	h.mu.Lock()
	h.answers = append(h.answers, a)
	h.mu.Unlock()
}

// all is a copy of the answers, ordered by start.
func (h *history) all() []answer {
	h.mu.Lock()
	out := append([]answer(nil), h.answers...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// checkClient is the HTTP client the fault tests send checks with: a
// request that gets no answer within 5 s is recorded as unanswered.
var checkClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 400, MaxConnsPerHost: 400, IdleConnTimeout: 30 * time.Second},
}

// record sends one check (or peek) for caller to the server at base and
// records the answer.
func (h *history) record(serverName, base string, tn tenant, caller, path string, peek bool) answer {
	body := map[string]any{"ip": caller, "path": path}
	if peek {
		body["peek"] = true
	}
	data, _ := json.Marshal(body)
	a := answer{Caller: caller, Server: serverName, Peek: peek, Start: time.Now()}
	req, _ := http.NewRequest("POST", base+"/v1/check", bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tn.Key)
	resp, err := checkClient.Do(req)
	if err != nil {
		a.End, a.Err = time.Now(), err.Error()
		h.add(a)
		return a
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.End, a.Status = time.Now(), resp.StatusCode
	if resp.StatusCode != 200 {
		a.Err = strings.TrimSpace(string(raw))
	} else {
		var c checkResult
		if err := json.Unmarshal(raw, &c); err != nil {
			a.Status, a.Err = 0, "undecodable answer: "+err.Error()
		} else {
			a.Allowed, a.Remaining, a.ResetMS = c.Allowed, c.Remaining, c.ResetMS
		}
	}
	h.add(a)
	return a
}

// bucketModel is what the checker knows of a caller's limit: a token bucket
// of Limit tokens refilled at Limit per Period, and the number of
// acknowledged admissions a fault may forget (Bound).
type bucketModel struct {
	Limit  int64
	Period time.Duration
	Bound  int64
}

// refill is the tokens that come back over d.
func (m bucketModel) refill(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(m.Limit) * d.Seconds() / m.Period.Seconds()
}

// violation is one thing the checker found wrong.
type violation struct {
	Kind   string // "admitted", "remaining", "agreement", "durability"
	Caller string
	Excess float64 // by how much the bound was passed
	Detail string
}

func (v violation) String() string {
	return fmt.Sprintf("%s, caller %s: %s (%.1f over the bound)", v.Kind, v.Caller, v.Detail, v.Excess)
}

// callerStat is a caller's admissions against its bound.
type callerStat struct {
	Caller   string
	Admitted int64
	Bound    float64 // limit + refill over the caller's run + the loss bound
	Answers  int
	Failed   int
}

// checkAdmitted checks, per caller, that the allowed answers are at most the
// limit plus the refill from the caller's first request to its last answer
// plus the loss bound. The bucket is full when a caller first comes, and
// never holds more than the limit, so nothing else can have been admitted.
// It returns the callers' figures too, worst (closest to its bound) first.
func checkAdmitted(answers []answer, m bucketModel) ([]violation, []callerStat) {
	type span struct {
		first, last time.Time
		stat        callerStat
	}
	per := map[string]*span{}
	for _, a := range answers {
		s := per[a.Caller]
		if s == nil {
			s = &span{first: a.Start, last: a.End, stat: callerStat{Caller: a.Caller}}
			per[a.Caller] = s
		}
		if a.Start.Before(s.first) {
			s.first = a.Start
		}
		if a.End.After(s.last) {
			s.last = a.End
		}
		s.stat.Answers++
		if !a.ok() {
			s.stat.Failed++
		} else if a.Allowed && !a.Peek {
			s.stat.Admitted++
		}
	}
	var out []violation
	var stats []callerStat
	for caller, s := range per {
		s.stat.Bound = float64(m.Limit) + m.refill(s.last.Sub(s.first)) + float64(m.Bound)
		stats = append(stats, s.stat)
		if ex := float64(s.stat.Admitted) - s.stat.Bound; ex > 1e-9 {
			out = append(out, violation{Kind: "admitted", Caller: caller, Excess: ex,
				Detail: fmt.Sprintf("%d admitted, bound %.1f (limit %d + refill over %s + loss bound %d)", s.stat.Admitted, s.stat.Bound, m.Limit, s.last.Sub(s.first).Round(time.Millisecond), m.Bound)})
		}
	}
	sort.Slice(stats, func(i, j int) bool {
		ri, rj := float64(stats[i].Admitted)-stats[i].Bound, float64(stats[j].Admitted)-stats[j].Bound
		if ri != rj {
			return ri > rj
		}
		return stats[i].Caller < stats[j].Caller
	})
	sortViolations(out)
	return out, stats
}

// checkRemaining checks that no answer reports more remaining than an
// earlier completed answer allows. Answer a completed before b started, so
// a's decision came first. After a the bucket held less than
// a.Remaining + 1 tokens (a consuming check reports the floor of what it
// left; a denial reports the floor of what there was, under one token; a
// peek reports what a check would leave, so the bucket held less than
// a.Remaining + 2). Until b was decided at most refill(b.End - a.Start) came
// back, and b reports at most what it found minus the one it takes (a
// denial reports 0). So
//
//	b.Remaining <= a.Remaining + slack(a) + refill(b.End - a.Start) - 1 + Bound
//
// where slack is 1, or 2 after a peek. A fault may forget up to Bound
// acknowledged admissions, which can come back as remaining.
// Only answered checks (200) are considered. The worst case per caller is
// reported, with the two answers.
func checkRemaining(answers []answer, m bucketModel) []violation {
	per := map[string][]answer{}
	for _, a := range answers {
		if a.ok() {
			per[a.Caller] = append(per[a.Caller], a)
		}
	}
	rate := float64(m.Limit) / m.Period.Seconds() // tokens per second
	var out []violation
	for caller, as := range per {
		// key(a) = a.Remaining + slack(a) - rate*a.Start; the bound for b is
		// min over a completed before b.Start of key(a), + rate*b.End - 1 +
		// Bound. Sort by End and keep a running minimum.
		byEnd := append([]answer(nil), as...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End.Before(byEnd[j].End) })
		t0 := byEnd[0].Start
		key := func(a answer) float64 {
			slack := 1.0
			if a.Peek {
				slack = 2
			}
			return float64(a.Remaining) + slack - rate*a.Start.Sub(t0).Seconds()
		}
		minKey := make([]float64, len(byEnd))
		minAt := make([]int, len(byEnd))
		for i, a := range byEnd {
			minKey[i], minAt[i] = key(a), i
			if i > 0 && minKey[i-1] <= minKey[i] {
				minKey[i], minAt[i] = minKey[i-1], minAt[i-1]
			}
		}
		var worst *violation
		for _, b := range as {
			// The answers that had completed before b started.
			n := sort.Search(len(byEnd), func(i int) bool { return !byEnd[i].End.Before(b.Start) })
			if n == 0 {
				continue
			}
			limit := minKey[n-1] + rate*b.End.Sub(t0).Seconds() - 1 + float64(m.Bound)
			if ex := float64(b.Remaining) - limit; ex > 1e-9 && (worst == nil || ex > worst.Excess) {
				a := byEnd[minAt[n-1]]
				worst = &violation{Kind: "remaining", Caller: caller, Excess: ex, Detail: fmt.Sprintf(
					"%s answered remaining %d (allowed %v, peek %v) at %s, after %s had answered remaining %d (allowed %v, peek %v) at %s, %s earlier; at most %.1f can be reported",
					b.Server, b.Remaining, b.Allowed, b.Peek, b.End.Format("15:04:05.000"), a.Server, a.Remaining, a.Allowed, a.Peek,
					a.End.Format("15:04:05.000"), b.Start.Sub(a.End).Round(time.Millisecond), limit)}
			}
		}
		if worst != nil {
			out = append(out, *worst)
		}
	}
	sortViolations(out)
	return out
}

// checkAgreement checks one round of peeks per caller taken on every server
// one after the other: they must all report the same remaining. A refill
// tick between two peeks can add one, so a round that differs by one is
// only flagged when the caller's previous round (if any) differed as well:
// the callers are peeked in rounds until two in a row disagree or one agrees.
func checkAgreement(rounds [][]answer) []violation {
	per := map[string][]answer{} // the last round of each caller
	disagreed := map[string]int{}
	for _, round := range rounds {
		byCaller := map[string][]answer{}
		for _, a := range round {
			byCaller[a.Caller] = append(byCaller[a.Caller], a)
		}
		for caller, as := range byCaller {
			per[caller] = as
			if spreadOf(as) != 0 {
				disagreed[caller]++
			} else {
				disagreed[caller] = 0
			}
		}
	}
	var out []violation
	for caller, as := range per {
		sp := spreadOf(as)
		if sp == 0 || (sp == 1 && disagreed[caller] < 2) {
			continue
		}
		var parts []string
		for _, a := range as {
			if a.ok() {
				parts = append(parts, fmt.Sprintf("%s %d", a.Server, a.Remaining))
			} else {
				parts = append(parts, fmt.Sprintf("%s failed (%s)", a.Server, firstLine(a.Status, a.Err)))
			}
		}
		out = append(out, violation{Kind: "agreement", Caller: caller, Excess: float64(sp),
			Detail: "servers report different remaining: " + strings.Join(parts, ", ")})
	}
	sortViolations(out)
	return out
}

// spreadOf is the largest difference between the remaining of a round's
// peeks; a failed peek counts as a disagreement of 1000.
func spreadOf(as []answer) int64 {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, a := range as {
		if !a.ok() {
			return 1000
		}
		lo, hi = min(lo, a.Remaining), max(hi, a.Remaining)
	}
	if len(as) == 0 {
		return 0
	}
	return hi - lo
}

// checkDurable compares each caller's peek before every process was
// restarted with the one after: the bucket only refilled in between, so
// after is before plus at most the refill over the gap (rounded up), and
// never less.
func checkDurable(before, after []answer, m bucketModel) []violation {
	prev := map[string]answer{}
	for _, a := range before {
		prev[a.Caller] = a
	}
	var out []violation
	for _, b := range after {
		a, ok := prev[b.Caller]
		if !ok {
			continue
		}
		if !a.ok() || !b.ok() {
			out = append(out, violation{Kind: "durability", Caller: b.Caller, Excess: 1000,
				Detail: fmt.Sprintf("peek failed: before %d %s, after %d %s", a.Status, a.Err, b.Status, b.Err)})
			continue
		}
		up := math.Ceil(m.refill(b.End.Sub(a.Start)))
		switch {
		case float64(b.Remaining) > float64(a.Remaining)+up:
			out = append(out, violation{Kind: "durability", Caller: b.Caller, Excess: float64(b.Remaining) - float64(a.Remaining) - up,
				Detail: fmt.Sprintf("remaining %d before the restart, %d after (refill in between: %.0f): SQLite held older state", a.Remaining, b.Remaining, up)})
		case b.Remaining < a.Remaining:
			out = append(out, violation{Kind: "durability", Caller: b.Caller, Excess: float64(a.Remaining - b.Remaining),
				Detail: fmt.Sprintf("remaining %d before the restart, %d after: tokens taken that nobody was admitted with", a.Remaining, b.Remaining)})
		}
	}
	sortViolations(out)
	return out
}

func sortViolations(v []violation) {
	sort.Slice(v, func(i, j int) bool {
		if v[i].Excess != v[j].Excess {
			return v[i].Excess > v[j].Excess
		}
		return v[i].Caller < v[j].Caller
	})
}

// window is a stretch of time in which a server answered no check.
type window struct {
	Server     string
	From, To   time.Time // first failed request's start, last failed answer's end
	Failed     int
	FirstError string
}

// failureWindows groups each server's failed answers (anything but 200)
// into windows: failures with no successful answer between them, by start
// time, are one window, and windows that overlap are one.
func failureWindows(answers []answer) []window {
	byServer := map[string][]answer{}
	for _, a := range answers {
		if !a.Peek {
			byServer[a.Server] = append(byServer[a.Server], a)
		}
	}
	var out []window
	for srv, as := range byServer {
		sort.SliceStable(as, func(i, j int) bool { return as[i].Start.Before(as[j].Start) })
		var cur *window
		for _, a := range as {
			if a.ok() {
				if cur != nil && a.End.After(cur.To) {
					out = append(out, *cur)
					cur = nil
				}
				continue
			}
			if cur == nil {
				cur = &window{Server: srv, From: a.Start, To: a.End, FirstError: firstLine(a.Status, a.Err)}
			}
			cur.Failed++
			if a.End.After(cur.To) {
				cur.To = a.End
			}
		}
		if cur != nil {
			out = append(out, *cur)
		}
	}
	// A failure that began before the success that closed a window ended
	// starts a window overlapping it: merge them.
	sort.Slice(out, func(i, j int) bool {
		if out[i].Server != out[j].Server {
			return out[i].Server < out[j].Server
		}
		return out[i].From.Before(out[j].From)
	})
	merged := out[:0]
	for _, w := range out {
		if n := len(merged); n > 0 && merged[n-1].Server == w.Server && !w.From.After(merged[n-1].To) {
			last := &merged[n-1]
			last.Failed += w.Failed
			if w.To.After(last.To) {
				last.To = w.To
			}
			continue
		}
		merged = append(merged, w)
	}
	out = merged
	sort.Slice(out, func(i, j int) bool {
		if out[i].Server != out[j].Server {
			return out[i].Server < out[j].Server
		}
		return out[i].From.Before(out[j].From)
	})
	return out
}

func firstLine(status int, err string) string {
	if len(err) > 80 {
		err = err[:80] + "…"
	}
	return fmt.Sprintf("%d %s", status, err)
}

// TestHistoryCheckerFlagsStaleState runs the checker on made-up histories:
// a clean one passes, and one where an old state came back (the issue's
// "remaining 0, later remaining 57") and one with too many admissions are
// flagged, as are servers that disagree and a restart that forgot.
func TestHistoryCheckerFlagsStaleState(t *testing.T) {
	m := bucketModel{Limit: 10, Period: time.Hour, Bound: 1}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ans := func(srv string, start, end int, allowed bool, remaining int64) answer {
		return answer{Caller: "c", Server: srv, Start: at(start), End: at(end), Status: 200, Allowed: allowed, Remaining: remaining}
	}
	// Clean: ten admitted, remaining counting down, then denials; two
	// overlapping requests may finish in either order.
	var clean []answer
	for i := range 10 {
		clean = append(clean, ans("s1", i*100, i*100+10, true, int64(9-i)))
	}
	clean = append(clean, ans("s2", 1000, 1050, false, 0), ans("s3", 1010, 1020, false, 0))
	clean = append(clean, answer{Caller: "c", Server: "s2", Start: at(1100), End: at(3100), Status: 503, Err: "unavailable"})
	if v, stats := checkAdmitted(clean, m); len(v) != 0 || stats[0].Admitted != 10 {
		t.Fatalf("clean history flagged: %v %+v", v, stats)
	}
	if v := checkRemaining(clean, m); len(v) != 0 {
		t.Fatalf("clean history flagged: %v", v)
	}
	// Overlapping answers are not ordered: a slow answer reporting more
	// than one that completed while it was in flight is fine.
	overlap := []answer{ans("s1", 0, 500, true, 5), ans("s2", 10, 20, true, 4), ans("s1", 30, 40, true, 3)}
	if v := checkRemaining(overlap, m); len(v) != 0 {
		t.Fatalf("overlapping answers flagged: %v", v)
	}

	// Stale state: remaining 0 on a healthy server, then remaining 7.
	stale := append(append([]answer(nil), clean...), ans("s1", 5000, 5010, true, 7))
	v := checkRemaining(stale, m)
	if len(v) != 1 || v[0].Kind != "remaining" || v[0].Excess < 5 {
		t.Fatalf("stale state not flagged: %v", v)
	}
	t.Logf("flagged: %s", v[0])
	// The same history admits 11 > 10 + bound 1 (refill over 5 s: 0.01).
	stale = append(stale, ans("s1", 5100, 5110, true, 6))
	v, _ = checkAdmitted(stale, m)
	if len(v) != 1 || v[0].Kind != "admitted" {
		t.Fatalf("excess admissions not flagged: %v", v)
	}
	t.Logf("flagged: %s", v[0])
	// Refill makes room: a day later the bucket is full again, and
	// reporting 9 is right.
	later := append(append([]answer(nil), clean...), ans("s1", 86_400_000, 86_400_010, true, 9))
	if v := checkRemaining(later, m); len(v) != 0 {
		t.Fatalf("refilled bucket flagged: %v", v)
	}
	// The bound absorbs what a fault may forget: one admission.
	forgot := append(append([]answer(nil), clean...), ans("s1", 2000, 2010, true, 0))
	if v := checkRemaining(forgot, m); len(v) != 0 {
		t.Fatalf("an answer within the loss bound flagged: %v", v)
	}
	if v, _ := checkAdmitted(forgot, m); len(v) != 0 {
		t.Fatalf("an admission within the loss bound flagged: %v", v)
	}

	// Agreement: equal peeks pass; one apart passes once (a refill tick)
	// but not twice in a row; a failed peek is a disagreement.
	peek := func(srv string, r int64) answer {
		return answer{Caller: "c", Server: srv, Status: 200, Peek: true, Remaining: r}
	}
	if v := checkAgreement([][]answer{{peek("s1", 3), peek("s2", 3), peek("s3", 3)}}); len(v) != 0 {
		t.Fatalf("agreeing servers flagged: %v", v)
	}
	if v := checkAgreement([][]answer{{peek("s1", 3), peek("s2", 4), peek("s3", 4)}}); len(v) != 0 {
		t.Fatalf("a refill tick flagged: %v", v)
	}
	if v := checkAgreement([][]answer{{peek("s1", 3), peek("s2", 4), peek("s3", 4)}, {peek("s1", 3), peek("s2", 4), peek("s3", 4)}}); len(v) != 1 {
		t.Fatalf("a lasting difference of one not flagged: %v", v)
	}
	if v := checkAgreement([][]answer{{peek("s1", 0), peek("s2", 57), peek("s3", 0)}}); len(v) != 1 || v[0].Excess != 57 {
		t.Fatalf("disagreeing servers not flagged: %v", v)
	}
	failed := peek("s3", 0)
	failed.Status = 503
	if v := checkAgreement([][]answer{{peek("s1", 0), peek("s2", 0), failed}}); len(v) != 1 {
		t.Fatalf("a failed peek not flagged: %v", v)
	}

	// Durability: the same after a restart, or refilled by the time between.
	before := []answer{{Caller: "c", Start: at(0), End: at(1), Status: 200, Remaining: 2}}
	after := []answer{{Caller: "c", Start: at(10_000), End: at(10_001), Status: 200, Remaining: 2}}
	if v := checkDurable(before, after, m); len(v) != 0 {
		t.Fatalf("unchanged state flagged: %v", v)
	}
	after[0].Remaining = 3 // refill over 10 s at 10/h is 0.03: up to one
	if v := checkDurable(before, after, m); len(v) != 0 {
		t.Fatalf("one refilled token flagged: %v", v)
	}
	after[0].Remaining = 6
	if v := checkDurable(before, after, m); len(v) != 1 || v[0].Excess != 3 {
		t.Fatalf("older state after the restart not flagged: %v", v)
	}
	after[0].Remaining = 1
	if v := checkDurable(before, after, m); len(v) != 1 {
		t.Fatalf("lost tokens after the restart not flagged: %v", v)
	}

	// Failure windows: failures with no success between them are one.
	fw := failureWindows([]answer{
		ans("s1", 0, 10, true, 5),
		{Caller: "c", Server: "s1", Start: at(100), End: at(2100), Status: 503},
		{Caller: "c", Server: "s1", Start: at(200), End: at(2200), Status: 503},
		ans("s1", 2300, 2310, true, 4),
		{Caller: "c", Server: "s1", Start: at(5000), End: at(5001), Err: "timeout"},
	})
	if len(fw) != 2 || fw[0].Failed != 2 || fw[0].To.Sub(fw[0].From) != 2100*time.Millisecond || fw[1].Failed != 1 {
		t.Fatalf("failure windows: %+v", fw)
	}
}
