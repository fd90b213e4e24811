package views

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
)

// FormatCount writes n with thin separators between thousands: 12 345.
func FormatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FormatRatio writes a share as a percentage with one decimal.
func FormatRatio(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 1, 64) + "%"
}

// FormatTime writes an instant in UTC, to the minute.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// FormatOptTime writes an optional instant, or what its absence means.
func FormatOptTime(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return FormatTime(*t)
}

// isoTime is the machine-readable form for <time datetime>.
func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func ratioWidth(r float64) string {
	return strconv.FormatFloat(min(max(r, 0), 1)*100, 'f', 0, 64)
}

func itoa(n int) string { return strconv.Itoa(n) }

func int64s(n int64) string { return strconv.FormatInt(n, 10) }

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// fieldID is the id of the input posting name: "tier.0.name" → "f-tier-0-name".
func fieldID(name string) string {
	return "f-" + strings.NewReplacer(".", "-", "[", "-", "]", "", ":", "-").Replace(name)
}

func errOf(m map[string]string, name string) string { return m[name] }

func kindLabel(kind string) string {
	switch kind {
	case "key":
		return "Key"
	case "descriptor":
		return "Descriptor"
	case "jwt":
		return "JWT subject"
	}
	return "IP"
}

func statusClass(status string) string {
	switch status {
	case "active", "delivered":
		return "badge badge-ok"
	case "revoked", "failed", "dropped":
		return "badge badge-denied"
	default:
		return "badge badge-muted"
	}
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int { return cmp.Compare(fieldOrder(a), fieldOrder(b)) })
	return ks
}

// fieldOrder sorts form errors in the order the inputs appear.
func fieldOrder(k string) string {
	top := map[string]string{"name": "0", "method": "1", "path": "2", "query": "3", "consistency": "4", "tiers": "5"}
	if o, ok := top[k]; ok {
		return o
	}
	// Pad indexes so that tier.10 sorts after tier.9.
	parts := strings.Split(k, ".")
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil {
			parts[i] = strings.Repeat("0", max(0, 4-len(p))) + p
		}
	}
	return "6" + strings.Join(parts, ".")
}

// describeField names an input in words: "tier.0.limit.1.period" is
// "Tier 1, limit 2, period".
func describeField(k string) string {
	parts := strings.Split(k, ".")
	var out []string
	for i := 0; i < len(parts); i++ {
		p := parts[i]
		if i+1 < len(parts) {
			if n, err := strconv.Atoi(parts[i+1]); err == nil {
				out = append(out, p+" "+strconv.Itoa(n+1))
				i++
				continue
			}
		}
		out = append(out, p)
	}
	s := strings.Join(out, ", ")
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// FormatWait writes a duration for people, rounded up to a whole second
// below a day ("0s", "45s", "2m 5s", "1h 0m 3s"), in days and hours above.
func FormatWait(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	secs := int64((d + time.Second - 1) / time.Second)
	days, h, m, s := secs/86400, secs/3600%24, secs/60%60, secs%60
	switch {
	case days > 0:
		return strconv.FormatInt(days, 10) + "d " + strconv.FormatInt(h, 10) + "h"
	case secs >= 3600:
		return strconv.FormatInt(secs/3600, 10) + "h " + strconv.FormatInt(m, 10) + "m " + strconv.FormatInt(s, 10) + "s"
	case secs >= 60:
		return strconv.FormatInt(secs/60, 10) + "m " + strconv.FormatInt(s, 10) + "s"
	}
	return strconv.FormatInt(secs, 10) + "s"
}

// FormatPeriod writes a limit's period in the unit it was most likely
// given in: "60s" stays "1m", "1d" stays "1d", "1500ms" is "1.5s".
func FormatPeriod(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// indent pads a descriptor tree's node by its depth.
func indent(depth int) templ.SafeCSS {
	return templ.SafeCSS("padding-left:" + strconv.Itoa(depth*24) + "px")
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// joinEvents lists event types.
func joinEvents(es []string) string { return strings.Join(es, ", ") }

// eventHint says what an event type is about.
func eventHint(e string) string {
	switch e {
	case "quota.threshold":
		return "a key passed a percent of a calendar quota"
	case "quota.reset":
		return "a period ended for a key that had used its whole quota"
	case "caller.top_offender":
		return "a caller entered the top 10 by denials of the last hour"
	case "key.created":
		return "a consumer key was issued"
	case "key.revoked":
		return "a consumer key was revoked"
	case "config.changed":
		return "any configuration change (its audit log entry)"
	}
	return ""
}

// ManagesWebhooks reports whether the signed-in user may change the
// tenant's webhooks: its owners, and the operator in its dashboard.
func ManagesWebhooks(p Page) bool { return p.User.Owner || p.User.Operator }

// pausedWhy says why an endpoint is paused.
func pausedWhy(reason string) string {
	switch reason {
	case "creator_removed":
		return "The dashboard user who added this endpoint was removed from the tenant; an owner checks where it points and resumes it, or deletes it."
	case "paused":
		return "An owner paused this endpoint."
	}
	return "This endpoint is paused."
}

// identMax is the longest identifier shown whole: an IPv4 address, a key
// prefix and most ids fit; a key id or an IPv6 /64 is shortened.
const identMax = 20

// shortIdent answers v's start and end around an ellipsis when it is
// longer than identMax runes, and whether it cut anything.
func shortIdent(v string) (string, bool) {
	r := []rune(v)
	if len(r) <= identMax {
		return v, false
	}
	return string(r[:11]) + "…" + string(r[len(r)-6:]), true
}

// FormatAgo writes how long before now t was, to the minute: "now",
// "12 min ago", "3 h ago", "5 days ago".
func FormatAgo(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 2*time.Minute:
		return "now"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h ago"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " days ago"
}

// FormatSpan writes a range of activity relative to now: "12 min ago –
// now", or one phrase when both ends read the same.
func FormatSpan(first, last, now time.Time) string {
	a, b := FormatAgo(first, now), FormatAgo(last, now)
	if a == b {
		return a
	}
	return a + " – " + b
}
