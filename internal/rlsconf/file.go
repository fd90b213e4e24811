package rlsconf

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds on what Parse reads. A file beyond them is refused with a problem
// before the work it would cost is done.
const (
	// MaxFileSize is the largest file Parse reads, in bytes.
	MaxFileSize = 1 << 20
	// MaxDepth bounds how deep descriptors nest, and how deep a metadata
	// value nests.
	MaxDepth = 64
	// MaxDescriptors bounds the descriptors of one file, at every level.
	MaxDescriptors = 10_000
	// MaxAliasFactor bounds YAML aliases (*name): the nodes a file stands
	// for once its aliases are expanded may be at most MaxAliasFactor times
	// the nodes written, plus aliasSlack for small files.
	MaxAliasFactor = 4
	aliasSlack     = 1024
	// maxYAMLDepth bounds the nesting of YAML lists and mappings anywhere,
	// checked before the file is walked: deep enough for MaxDepth levels of
	// descriptors (two YAML levels each) with their rate limits and metadata.
	maxYAMLDepth = 3*MaxDepth + 8
)

// File is one configuration file of the reference: a domain and its tree of
// descriptors.
type File struct {
	// Name is the file name problems are reported under.
	Name        string
	Domain      string
	Descriptors []*Descriptor
}

// Descriptor is one node of a domain's tree. Its composite key, the one
// siblings must not share, is Key, or Key_Value when Value is not empty.
type Descriptor struct {
	Key   string
	Value string
	// RateLimit is nil for a node that only groups the ones below it (or
	// that exempts a value from a wider rule, as a node without a limit that
	// matches first leaves the request unlimited).
	RateLimit   *RateLimit
	Descriptors []*Descriptor

	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	ShareThreshold bool
	// Metadata is passed on with the limit as the reference does: every
	// number a float64 (it becomes a protobuf Struct there), nested keys
	// strings, values string, float64, bool, nil, []any or map[string]any.
	// An empty mapping reads as nil.
	Metadata map[string]any

	// Sluice holds Sluice's own fields (the sluice: mapping), nil in a
	// reference file.
	Sluice *Extras

	// Line is the line the descriptor starts on in its file, 0 when it was
	// not read from one.
	Line int
}

// RateLimit is a descriptor's rate_limit.
type RateLimit struct {
	RequestsPerUnit uint32
	// Unit is UnitUnknown exactly when Unlimited is set.
	Unit      Unit
	Unlimited bool
	// Name is what other descriptors' Replaces refer to.
	Name string
	// Replaces names the limits that this one, when it applies, removes
	// from the request's other descriptors.
	Replaces []string
}

// Unit is a rate limit's time unit, numbered as Envoy's RateLimitUnit and
// the reference's RateLimitResponse.RateLimit.Unit (so WEEK, added last, is
// 7).
type Unit int32

// The units. UnitUnknown is not valid in a rate limit.
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = [...]string{"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"}

// ParseUnit reads a unit name as the reference does: upper-cased with
// strings.ToUpper and looked up among the enum's names. "unknown" is a
// name but not a valid unit, so ParseUnit answers false for it.
func ParseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for u := Second; u <= Week; u++ {
		if unitNames[u] == up {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Valid reports whether u is one of Second through Week.
func (u Unit) Valid() bool { return u >= Second && u <= Week }

// String returns the enum name ("SECOND", …), or "Unit(N)".
func (u Unit) String() string {
	if u >= UnitUnknown && u <= Week {
		return unitNames[u]
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// lower is the unit as files conventionally spell it.
func (u Unit) lower() string { return strings.ToLower(u.String()) }

// Seconds is the reference's divider for u (utils.UnitToDivider): a MONTH
// is 30 days and a YEAR 365. It is 0 for an invalid unit, where the
// reference panics.
func (u Unit) Seconds() int64 {
	switch u {
	case Second:
		return 1
	case Minute:
		return 60
	case Hour:
		return 60 * 60
	case Day:
		return 24 * 60 * 60
	case Week:
		return 7 * 24 * 60 * 60
	case Month:
		return 30 * 24 * 60 * 60
	case Year:
		return 365 * 24 * 60 * 60
	}
	return 0
}

// WindowStart is the start of the counting window that now falls in: the
// reference writes (now/divider)*divider, in unix seconds, into the cache
// key. Windows are aligned at multiples of the unit since the unix epoch,
// as Sluice's fixed windows are. For an instant before 1970 this floors
// where the reference's integer division truncates (its window would start
// after now). An invalid unit answers now.
func (u Unit) WindowStart(now time.Time) time.Time {
	d := u.Seconds()
	if d == 0 {
		return now
	}
	s := now.Unix()
	q := s / d
	if s%d < 0 {
		q--
	}
	return time.Unix(q*d, 0)
}

// ResetAfter is the reference's duration until reset (utils.CalculateReset):
// divider - now%divider whole seconds, from 1s to the unit's length, never
// 0. An invalid unit answers 0.
func (u Unit) ResetAfter(now time.Time) time.Duration {
	d := u.Seconds()
	if d == 0 {
		return 0
	}
	s := now.Unix()
	return time.Duration(u.WindowStart(now).Unix()+d-s) * time.Second
}

// Extras are Sluice's own fields of a descriptor, under its sluice: key. The
// reference refuses that key, so a file using them is a Sluice file; one
// without them stays a reference file.
type Extras struct {
	// Algorithm is how the rate_limit counts: "" (fixed_window, the
	// reference's) or one of the Algorithm constants.
	Algorithm Algorithm
	// Burst is a token bucket's capacity; 0 means the rate_limit's
	// requests_per_unit. Only token_bucket takes one.
	Burst uint32
	// Limits are further limits of the rule, each counted on its own; a
	// request is allowed only when all of them (and rate_limit, if any)
	// allow it.
	Limits []Spec
	// Consistency is "" (exact) or ConsistencyLocal.
	Consistency Consistency
	// Denied is what a request over the rule's limits counts: "" or
	// DeniedCounted, its hits (the reference's counting), or
	// DeniedUncounted, nothing.
	Denied Denied
}

// Denied says whether a denied request's hits count.
type Denied string

// The choices: "" means DeniedCounted.
const (
	// DeniedCounted counts every request's hits, allowed or not, as the
	// reference does: a caller over its limit stays over until the
	// window turns, and usage reported after a response (Envoy's
	// apply_on_stream_done) always counts.
	DeniedCounted Denied = "counted"
	// DeniedUncounted counts only what is allowed: a denied request takes
	// nothing, so a caller is admitted again as soon as what it asks fits.
	DeniedUncounted Denied = "uncounted"
)

// Spec is one limit a rule enforces: its rate_limit, or one of its
// sluice.limits.
type Spec struct {
	Name            string
	RequestsPerUnit uint32
	Unit            Unit
	// Calendar, instead of Unit, is "day", "week", "month" or "year": a
	// fixed-window count that resets at the start of each in the tenant's
	// time zone, and survives restarts (Sluice's calendar quotas).
	Calendar string
	// Algorithm is "" for fixed_window.
	Algorithm Algorithm
	Burst     uint32
}

// Algorithm names how a limit counts.
type Algorithm string

// The algorithms. The reference has only fixed windows.
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	TokenBucket   Algorithm = "token_bucket"
	SlidingLog    Algorithm = "sliding_log"
)

// maxLogLimit is Sluice's bound on a sliding log's limit (quota.MaxLogLimit):
// the log holds one instant per admitted request.
const maxLogLimit = 1000

func (a Algorithm) valid() bool {
	switch a {
	case "", FixedWindow, SlidingWindow, TokenBucket, SlidingLog:
		return true
	}
	return false
}

// Consistency says how exactly a limit is shared between Sluice's servers.
type Consistency string

// The consistencies: "" means ConsistencyExact.
const (
	ConsistencyExact Consistency = "exact"
	ConsistencyLocal Consistency = "local"
)

// Problem is one thing wrong with a file.
type Problem struct {
	File string
	// Line is 0 when the problem has no line (a File built in code).
	Line int
	// Field is a path such as descriptors[0].rate_limit.unit, "" for the
	// file as a whole.
	Field   string
	Message string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" || p.Line > 0 {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems is every problem found in a file, in the order of the file.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// compositeKey is the key siblings must not share and the request's
// key_value is looked up under: key, or key_value.
func compositeKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}
