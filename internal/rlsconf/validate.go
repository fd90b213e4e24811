package rlsconf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxFullKey bounds a descriptor's full key (FullKey: the domain and each
// key_value down to it, the reference's stats key), in bytes. Every key of
// a domain is spelled out once by Compile, so this bounds its memory.
const MaxFullKey = 4096

// Validate checks a File as the reference's loader checks what it decoded
// (loadConfig and loadDescriptors), plus Sluice's extras and the bounds
// MaxDepth, MaxDescriptors and MaxFullKey. Parse runs it on what it reads;
// call it on a File made in code. Any problem answers Problems.
func Validate(f *File) error {
	var probs Problems
	v := &validator{
		add: func(line int, field, format string, args ...any) {
			probs = append(probs, Problem{File: f.Name, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
		},
	}
	v.file(f)
	if len(probs) > 0 {
		return probs
	}
	return nil
}

type validator struct {
	add func(line int, field, format string, args ...any)
	// line answers where a field of descriptor d (nil: the file's own) was
	// written, 0 if unknown; nil when the File was not read from YAML.
	line func(d *Descriptor, rel string) int
	// unitText is each rate limit's unit as written, for messages.
	unitText map[*RateLimit]string
	domain   string
	keys     []string // the composite keys down to the descriptor at hand
	count    int
	tooMany  bool
	tooDeep  bool
}

// report adds a problem with a field rel of descriptor d, whose own field
// is df ("" and nil for the file's fields). The field is spelled out here,
// only for a problem.
func (v *validator) report(d *Descriptor, df, rel, format string, args ...any) {
	line := 0
	if v.line != nil {
		line = v.line(d, rel)
	}
	if line == 0 && d != nil {
		line = d.Line
	}
	v.add(line, join(df, rel), format, args...)
}

// fullKey spells out the full key of a descriptor with composite key ck
// below v.keys.
func (v *validator) fullKey(ck string) string {
	return strings.Join(append(append([]string{v.domain}, v.keys...), ck), ".")
}

func (v *validator) file(f *File) {
	if f.Domain == "" {
		v.report(nil, "", "domain", "config file cannot have empty domain")
	}
	v.domain = f.Domain
	v.descriptors(f.Descriptors, "descriptors", len(f.Domain), 1)
}

// descriptors checks one level of the tree: ds, at field, whose parent's
// full key is keyLen bytes long.
func (v *validator) descriptors(ds []*Descriptor, field string, keyLen, depth int) {
	if len(ds) > 0 && depth > MaxDepth {
		if !v.tooDeep {
			v.report(ds[0], field, "", "descriptors nest deeper than %d levels", MaxDepth)
		}
		v.tooDeep = true
		return
	}
	seen := map[string]int{}
	for i, d := range ds {
		df := index(field, i)
		if d == nil {
			v.report(nil, df, "", "is nil")
			continue
		}
		if v.count++; v.count > MaxDescriptors {
			if !v.tooMany {
				v.report(d, df, "", "the file has more than %d descriptors", MaxDescriptors)
			}
			v.tooMany = true
			return
		}
		ck := compositeKey(d.Key, d.Value)
		if d.Key == "" {
			v.report(d, df, "key", "descriptor has empty key")
		} else if j, dup := seen[ck]; dup {
			v.report(d, df, "", "duplicate descriptor composite key '%s' (also %s)", clip(v.fullKey(ck), 256), index(field, j))
		} else {
			seen[ck] = i
		}
		v.rateLimit(d, df)
		if d.ShareThreshold && !strings.Contains(ck, "*") {
			v.report(d, df, "share_threshold", "share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", clip(ck, 256))
		}
		v.metadata(d, df)
		v.extras(d, df)
		if n := keyLen + 1 + len(ck); n > MaxFullKey {
			v.report(d, df, "", "the full key %s is %d bytes; the most is %d", clip(v.fullKey(ck), 64), n, MaxFullKey)
			continue // nor its descriptors, whose keys are longer
		}
		v.keys = append(v.keys, ck)
		v.descriptors(d.Descriptors, df+".descriptors", keyLen+1+len(ck), depth+1)
		v.keys = v.keys[:len(v.keys)-1]
	}
}

const unitList = "second, minute, hour, day, week, month, year"

// maxSpecs bounds the limits of one rule's sluice.limits.
const maxSpecs = 16

func (v *validator) rateLimit(d *Descriptor, df string) {
	rl := d.RateLimit
	if rl == nil {
		return
	}
	switch {
	case rl.Unlimited && rl.Unit.Valid():
		v.report(d, df, "rate_limit.unit", "should not specify rate limit unit when unlimited")
	case !rl.Unlimited && !rl.Unit.Valid():
		text, ok := v.unitText[rl]
		if !ok && rl.Unit != UnitUnknown {
			text = rl.Unit.String()
		}
		v.report(d, df, "rate_limit.unit", "invalid rate limit unit '%s' (one of %s)", clip(text, 64), unitList)
	}
	for i, r := range rl.Replaces {
		switch r {
		case "":
			v.report(d, df, "rate_limit.replaces["+strconv.Itoa(i)+"].name", "should not have an empty replaces entry")
		case rl.Name:
			v.report(d, df, "rate_limit.replaces["+strconv.Itoa(i)+"].name", "replaces should not contain name of same descriptor (%q)", clip(r, 64))
		}
	}
}

// metadata checks what structpb.NewStruct would refuse, and, for a File
// made in code, the types Parse produces.
func (v *validator) metadata(d *Descriptor, df string) {
	if len(d.Metadata) == 0 {
		return
	}
	for _, k := range sortedKeys(d.Metadata) {
		if s, bad := badUTF8(map[string]any{k: d.Metadata[k]}); bad {
			v.report(d, df, "metadata."+clip(k, maxNameInPath), "error parsing metadata: invalid UTF-8 in string: %q", clip(s, 64))
			continue
		}
		if msg := metaType(d.Metadata[k], 1); msg != "" {
			v.report(d, df, "metadata."+clip(k, maxNameInPath), "%s", msg)
		}
	}
}

func metaType(x any, depth int) string {
	switch x.(type) {
	case []any, map[string]any:
		if depth > MaxDepth {
			return fmt.Sprintf("metadata nests deeper than %d levels", MaxDepth)
		}
	}
	switch x := x.(type) {
	case nil, bool, string, float64:
	case []any:
		for _, e := range x {
			if msg := metaType(e, depth+1); msg != "" {
				return msg
			}
		}
	case map[string]any:
		for _, e := range x {
			if msg := metaType(e, depth+1); msg != "" {
				return msg
			}
		}
	default:
		return fmt.Sprintf("a metadata value must be nil, bool, string, float64, []any or map[string]any, not %T", x)
	}
	return ""
}

func (v *validator) extras(d *Descriptor, df string) {
	e := d.Sluice
	if e == nil {
		return
	}
	rl := d.RateLimit
	if rl == nil && len(e.Limits) == 0 {
		v.report(d, df, "sluice", "a descriptor with sluice: needs a rate_limit unless it gives sluice.limits")
	}
	if rl != nil && rl.Unlimited && (e.Algorithm != "" || e.Burst != 0 || len(e.Limits) > 0) {
		v.report(d, df, "sluice", "an unlimited rate_limit takes no algorithm, burst or limits")
	}
	if e.Consistency != "" && e.Consistency != ConsistencyExact && e.Consistency != ConsistencyLocal {
		v.report(d, df, "sluice.consistency", "must be exact or local, not %q", clip(string(e.Consistency), 64))
	}
	if e.Denied != "" && e.Denied != DeniedCounted && e.Denied != DeniedUncounted {
		v.report(d, df, "sluice.denied", "must be counted or uncounted, not %q", clip(string(e.Denied), 64))
	}
	if len(e.Limits) > maxSpecs {
		v.report(d, df, "sluice.limits", "holds %d limits; a rule holds at most %d", len(e.Limits), maxSpecs)
		return
	}
	if rl != nil && !rl.Unlimited {
		v.spec(d, df, Spec{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit, Algorithm: e.Algorithm, Burst: e.Burst},
			"sluice.algorithm", "rate_limit.requests_per_unit", "sluice.burst", "")
	}
	names := map[string]string{}
	if rl != nil && rl.Name != "" {
		names[rl.Name] = df + ".rate_limit.name"
	}
	several := len(e.Limits)+btoi(rl != nil) > 1
	for i, s := range e.Limits {
		sf := "sluice.limits[" + strconv.Itoa(i) + "]"
		switch other, dup := names[s.Name]; {
		case s.Name == "" && several:
			v.report(d, df, sf+".name", "required when a rule holds several limits")
		case dup && s.Name != "":
			v.report(d, df, sf+".name", "%q is used twice (also %s)", clip(s.Name, 64), other)
		case s.Name != "":
			names[s.Name] = join(df, sf+".name")
		}
		v.spec(d, df, s, sf+".algorithm", sf+".requests_per_unit", sf+".burst", sf+".unit")
	}
}

// spec checks one limit of a rule with Sluice's extras, each problem under
// the field given for it (unitField "" when the unit is the rate_limit's,
// which rateLimit checks).
func (v *validator) spec(d *Descriptor, df string, s Spec, algField, rpuField, burstField, unitField string) {
	if !s.Algorithm.valid() {
		v.report(d, df, algField, "must be one of fixed_window, sliding_window, token_bucket, sliding_log, not %q", clip(string(s.Algorithm), 64))
	}
	switch {
	case s.Calendar != "":
		if !slices.Contains([]string{"day", "week", "month", "year"}, s.Calendar) {
			v.report(d, df, calendarField(unitField), "must be one of day, week, month, year, not %q", clip(s.Calendar, 64))
		}
		if s.Unit.Valid() {
			v.report(d, df, unitField, "must be empty with calendar: the calendar says when the count resets")
		}
		if s.Algorithm != "" && s.Algorithm != FixedWindow {
			v.report(d, df, algField, "must be fixed_window with calendar")
		}
	case unitField != "" && !s.Unit.Valid():
		v.report(d, df, unitField, "required: one of %s (or calendar: day, week, month or year)", unitList)
	}
	if s.RequestsPerUnit == 0 && (unitField != "" || (s.Algorithm != "" && s.Algorithm != FixedWindow)) {
		v.report(d, df, rpuField, "must be at least 1")
	}
	if s.Algorithm == SlidingLog && s.RequestsPerUnit > maxLogLimit {
		v.report(d, df, rpuField, "must be at most %d for sliding_log", maxLogLimit)
	}
	if s.Burst != 0 && s.Algorithm != TokenBucket {
		v.report(d, df, burstField, "only token_bucket takes a burst")
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// calendarField is the calendar's field beside a limit's unit field.
func calendarField(unitField string) string {
	if i := strings.LastIndex(unitField, "."); i >= 0 {
		return unitField[:i+1] + "calendar"
	}
	return "calendar"
}
