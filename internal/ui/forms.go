package ui

// Form parsing shared by the policy and key pages, and the mapping of the
// worker's validation messages to the inputs they are about.
//
// The worker answers the first problem it finds as "<json path>: <what is
// wrong>", e.g. "tiers.pro[1].period: must be a duration such as \"60s\"".
// The form's inputs have their own names ("tier.2.limit.1.period") because
// a tier's name is itself an input that may be blank or mistyped; each form
// therefore records, for every tier (or overridden policy) it submitted,
// which inputs its limits came from, so a message can be put next to the
// input it names even after blank rows were dropped.

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// limitGroup is one submitted tier or override: the input prefix of the
// group itself and of each limit, in the order they were sent.
type limitGroup struct {
	key    string
	limits []string
}

// fieldErrors collects errors by input name.
type fieldErrors map[string]string

func (fe fieldErrors) add(name, msg string) {
	if _, ok := fe[name]; !ok {
		fe[name] = msg
	}
}

// check puts err, a domain validation error such as "email: required",
// on the input named name, without the domain's field name. Forms check
// every input this way before asking the worker, which answers only the
// first problem it finds, so that one submit shows every problem.
func (fe fieldErrors) check(name string, err error) {
	if err == nil {
		return
	}
	_, text, _ := splitMessage(errs.Message(err))
	fe.add(name, text)
}

// splitMessage cuts "path: message" at the first ": ".
func splitMessage(msg string) (path, text string, ok bool) {
	path, text, ok = strings.Cut(msg, ": ")
	if !ok || path == "" || strings.ContainsAny(path, " \"") {
		return "", msg, false
	}
	return path, text, true
}

// mapGroupPath maps "<name>", "<name>.<field>" or "<name>[k].<field>"
// (path without the "tiers." or "overrides." prefix) to an input name.
// Names may contain dots (policy names do), so the longest submitted name
// that fits wins.
func mapGroupPath(rest string, groups map[string]limitGroup) (string, bool) {
	best := ""
	for name := range groups {
		if len(name) <= len(best) || !strings.HasPrefix(rest, name) {
			continue
		}
		if tail := rest[len(name):]; tail == "" || tail[0] == '.' || tail[0] == '[' {
			best = name
		}
	}
	g, ok := groups[best]
	if !ok {
		return "", false
	}
	tail := rest[len(best):]
	switch {
	case tail == "":
		return g.key, true
	case tail[0] == '.':
		if len(g.limits) == 0 {
			return g.key, true
		}
		return g.limits[0] + calendarInput(tail), true
	default: // "[k]..."
		end := strings.IndexByte(tail, ']')
		if end < 0 {
			return "", false
		}
		k, err := strconv.Atoi(tail[1:end])
		if err != nil || k < 0 || k >= len(g.limits) {
			return g.key, true
		}
		field := tail[end+1:]
		if field == "" {
			field = ".name"
		}
		return g.limits[k] + calendarInput(field), true
	}
}

// limitFromRow converts a limit row, reporting number errors under prefix.
func limitFromRow(r views.LimitRow, prefix string, fe fieldErrors) tenants.LimitSpec {
	l := tenants.LimitSpec{Name: strings.TrimSpace(r.Name), Algorithm: r.Algorithm, Period: strings.TrimSpace(r.Period)}
	if r.Per != tenants.PerKey { // "key" is the default, stored as none
		l.Per = r.Per
	}
	// The period input takes a calendar too: "month" resets on the 1st.
	if c := strings.ToLower(l.Period); slices.Contains(calendarWords, c) {
		l.Calendar, l.Period = c, ""
	}
	if s := strings.TrimSpace(r.Limit); s != "" {
		n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil {
			fe.add(prefix+".limit", "must be a whole number such as 100")
		}
		l.Limit = n
	} else {
		fe.add(prefix+".limit", "required")
	}
	if s := strings.TrimSpace(r.Burst); s != "" {
		n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
		if err != nil {
			fe.add(prefix+".burst", "must be a whole number, or empty")
		}
		l.Burst = n
	}
	return l
}

// blankLimit reports whether a row was left empty (its algorithm select
// always has a value, so it does not count).
func blankLimit(r views.LimitRow) bool {
	return strings.TrimSpace(r.Name+r.Limit+r.Period+r.Burst) == ""
}

func readLimitRow(form url.Values, prefix string) views.LimitRow {
	alg := form.Get(prefix + ".algorithm")
	if !slices.Contains(algorithms, alg) {
		alg = tenants.TokenBucket
	}
	return views.LimitRow{
		Name:      form.Get(prefix + ".name"),
		Algorithm: alg,
		Limit:     form.Get(prefix + ".limit"),
		Period:    form.Get(prefix + ".period"),
		Burst:     form.Get(prefix + ".burst"),
		Per:       form.Get(prefix + ".per"),
	}
}

func limitRowOf(l tenants.LimitSpec) views.LimitRow {
	r := views.LimitRow{Name: l.Name, Algorithm: l.Algorithm, Limit: strconv.FormatInt(l.Limit, 10), Period: l.Period, Per: l.Per}
	if l.Calendar != "" {
		r.Period = l.Calendar
	}
	if l.Burst != 0 {
		r.Burst = strconv.FormatInt(l.Burst, 10)
	}
	return r
}

// calendarInput maps a limit's calendar field to the input that takes it.
func calendarInput(field string) string {
	if field == ".calendar" {
		return ".period"
	}
	return field
}

// calendarWords are what the period input takes for a calendar limit.
var calendarWords = []string{tenants.CalendarDay, tenants.CalendarWeek, tenants.CalendarMonth, tenants.CalendarYear}

var algorithms = []string{tenants.TokenBucket, tenants.SlidingWindow, tenants.SlidingLog, tenants.FixedWindow, tenants.Concurrency}

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// count reads a row count from a hidden input, bounded.
func count(form url.Values, name string, most int) int {
	n, err := strconv.Atoi(form.Get(name))
	if err != nil || n < 0 {
		return 0
	}
	return min(n, most)
}

// action reads the form's "do" button: "save", or a row edit such as
// "add-limit:2" with its numeric arguments.
func action(form url.Values) (string, []int) {
	parts := strings.Split(form.Get("do"), ":")
	var args []int
	for _, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "save", nil
		}
		args = append(args, n)
	}
	if parts[0] == "" {
		return "save", nil
	}
	return parts[0], args
}

// isInvalid reports whether err is a validation error worth showing in a
// form (rather than an error page).
func isInvalid(err error) bool {
	c := errs.Code(err)
	return c == errs.Invalid || c == errs.Conflict
}

// formStatus is the status of a form shown again with err: 409 for a
// tenant cap, 400 for the rest.
func formStatus(err error) int {
	if tenants.CapReached(err) {
		return http.StatusConflict
	}
	return http.StatusBadRequest
}

// sortedTiers orders tier names as people read them: anonymous, default,
// then the rest alphabetically.
func sortedTiers[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	rank := func(n string) int {
		switch n {
		case "anonymous":
			return 0
		case "default":
			return 1
		}
		return 2
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}
