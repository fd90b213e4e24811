package rlsconf

// Parse reads a file in the three passes the reference makes, from one
// yaml.v3 node tree so that every problem names its line, and goes on
// after a problem so that all of them are reported at once:
//
//  1. checkKeys is the reference's validateYamlKeys, run on the file as
//     yaml.v2 decodes it into maps: every key a string and one the
//     reference knows, every list a list of mappings, every value outside
//     metadata a string, an integer, a boolean or null.
//  2. decode* is yaml.v2 decoding into the reference's structs: unknown
//     keys ignored, a value of the wrong type refused, a later key
//     overwriting an earlier one (into the same rate_limit and metadata,
//     as v2 reuses what the pointer or map holds).
//  3. validate is the reference's loadDescriptors, shared with Validate.
//
// Before any of this, measure bounds the work: the walks below follow
// aliases, so a file whose aliases expand too far, or that nests too deep,
// is refused first.

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

type parser struct {
	name  string
	probs Problems
	// dropped counts the problems past maxCollect, counted and not kept.
	dropped int
	// reported holds the fields the first two passes found wrong, so that
	// no pass reports them, or what they hold, a second time. Validation
	// problems are not added: they do not hide one another.
	reported map[string]bool
	within   map[string]bool // the fields holding a reported one
	frozen   bool
	// lines maps a field to the line it was written on, per descriptor.
	lines map[lineKey]int
	// unitText is the unit each rate_limit was written with.
	unitText map[*RateLimit]string
	count    int // descriptors decoded
	tooMany  bool
	tooDeep  bool
}

// lineKey names a field by its descriptor (nil for the file's own fields)
// and its path below it, so that no key holds a long path.
type lineKey struct {
	d   *Descriptor
	rel string
}

// maxCollect bounds the problems kept while reading (each spells out its
// path); maxProblems those reported, and past it one more says how many
// were left out.
const (
	maxCollect  = 1000
	maxProblems = 200
)

func (p *parser) add(line int, field, format string, args ...any) {
	for f := field; f != ""; f = parent(f) {
		if p.reported[f] {
			return
		}
	}
	if !p.frozen {
		// While reading, a problem inside a value (an unknown key in a
		// mapping where text belongs) also stands for the value's own.
		if p.within[field] {
			p.reported[field] = true // nor does validation report it
			return
		}
		p.reported[field] = true
		for f := parent(field); f != "" && !p.within[f]; f = parent(f) {
			p.within[f] = true
		}
	}
	if len(p.probs) >= maxCollect {
		p.dropped++
		return
	}
	line = max(line, 1) // a field never written, such as a missing domain
	p.probs = append(p.probs, Problem{File: p.name, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// addAt is add for a path, spelled out only when the problem may be kept.
func (p *parser) addAt(line int, at *path, format string, args ...any) {
	if len(p.probs) >= maxCollect {
		p.dropped++
		return
	}
	p.add(line, at.String(), format, args...)
}

func (p *parser) mark(at *path, n *yaml.Node) {
	d, rel := at.rel()
	k := lineKey{d, rel}
	if _, ok := p.lines[k]; !ok {
		p.lines[k] = n.Line
	}
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Parse reads and validates one configuration file of the reference. name
// is the file name problems are reported under. Any problem answers
// Problems with every problem found, in the order of the file, and no File.
//
// Parse refuses every file the reference refuses, and a file beyond the
// bounds MaxFileSize, MaxDepth, MaxDescriptors and MaxAliasFactor. The
// package comment lists where it knowingly differs.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{name: name, reported: map[string]bool{}, within: map[string]bool{}, lines: map[lineKey]int{}, unitText: map[*RateLimit]string{}}
	if len(data) > MaxFileSize {
		p.add(1, "", "the file is %d bytes; the most Sluice reads is %d (1 MiB)", len(data), MaxFileSize)
		return nil, p.probs
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		p.add(line, "", "error loading config file: %s", msg)
		return nil, p.probs
	}
	f := &File{Name: name}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if root != nil && !p.bounded(root) {
		return nil, p.probs
	}
	switch {
	case root == nil || isNull(root):
		// An empty file reads as an empty mapping: no domain.
	case root.Kind != yaml.MappingNode:
		p.add(root.Line, "", "the file must be a mapping of domain and descriptors, not %s", describe(root))
		return nil, p.probs
	default:
		p.checkKeys(root, rootPath, roleRoot)
		p.decodeRoot(root, f)
	}
	p.frozen = true
	p.resolveUnits()
	v := &validator{add: p.add, line: p.line, unitText: p.unitText}
	v.file(f)
	if len(p.probs) > 0 {
		slices.SortStableFunc(p.probs, func(a, b Problem) int { return a.Line - b.Line })
		if n := len(p.probs) + p.dropped; n > maxProblems {
			last := p.probs[min(maxProblems, len(p.probs)-1)].Line
			p.probs = append(p.probs[:maxProblems], Problem{File: name, Line: last, Message: fmt.Sprintf("and %d more problems", n-maxProblems)})
		}
		return nil, p.probs
	}
	return f, nil
}

// bounded refuses a document whose aliases expand too far, that contains
// itself, or that nests too deep.
func (p *parser) bounded(root *yaml.Node) bool {
	written, expanded, depth, cycle := measure(root)
	switch {
	case cycle != nil:
		p.add(cycle.Line, "", "the alias *%s names a node that contains itself (the reference refuses it)", cycle.Value)
	case expanded > MaxAliasFactor*written+aliasSlack:
		p.add(1, "", "aliases expand the file's %d nodes to more than %d: Sluice refuses aliases that repeat more than %d times what is written", written, MaxAliasFactor*written+aliasSlack, MaxAliasFactor)
	case depth > maxYAMLDepth:
		p.add(1, "", "the file nests lists and mappings deeper than %d levels", maxYAMLDepth)
	default:
		return true
	}
	return false
}

// line is the line a field of descriptor d (nil for the file's own) was
// written on, or that of the nearest enclosing field that was written; 0
// if none was.
func (p *parser) line(d *Descriptor, rel string) int {
	for ; rel != ""; rel = parent(rel) {
		if l, ok := p.lines[lineKey{d, rel}]; ok {
			return l
		}
	}
	return 0
}

// resolveUnits sets each rate limit's Unit from the text it was written
// with; a text that names no unit leaves UnitUnknown, which validation
// refuses unless the limit is unlimited (the reference ignores the unit
// of an unlimited limit unless it is a valid one).
func (p *parser) resolveUnits() {
	for rl, text := range p.unitText {
		rl.Unit, _ = ParseUnit(text)
	}
}

// The first pass: the reference's validateYamlKeys.

type role uint8

const (
	roleOther role = iota
	roleRoot
	roleDescriptor
)

// validKeys are the keys the reference accepts in any mapping, wherever
// they are: a known key in the wrong place passes this check and is then
// ignored by decoding, as in the reference.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// suggest names the known key a misspelled one most likely meant.
func suggest(key string) string {
	squash := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "") }
	for k := range validKeys {
		if squash(k) == squash(key) {
			return " (did you mean " + k + "?)"
		}
	}
	if key == "sluice" {
		return " (sluice: belongs to a descriptor)"
	}
	return ""
}

// checkKeys checks mapping n as the reference's validateYamlKeys checks
// the map yaml.v2 decodes it into: with merges applied and only the last
// value of a key kept.
func (p *parser) checkKeys(n *yaml.Node, at *path, r role) {
	ps := p.pairs(n, at)
	names := make([]string, len(ps))
	last := make(map[string]int, len(ps))
	for i, pr := range ps {
		k := follow(pr.k)
		if k.Kind != yaml.ScalarNode {
			p.addAt(k.Line, at, "a key must be a plain name, not %s", describe(k))
			continue
		}
		s, err := resolveScalar(k)
		if err != nil {
			p.addAt(k.Line, at.key(k.Value), "%v", err)
			continue
		}
		if s.kind != kStr {
			p.addAt(k.Line, at.key(k.Value), "config error, key is not of type string: %s reads as %s in YAML 1.1 (quote it if it is a name)", clip(k.Value, 64), kindNames[s.kind])
			continue
		}
		names[i] = s.s
		last[s.s] = i
	}
	for i, pr := range ps {
		key := names[i]
		if j, ok := last[key]; !ok || j != i {
			continue
		}
		if key == "sluice" && r == roleDescriptor {
			continue // Sluice's own fields, checked by decodeExtras
		}
		f := at.key(key)
		if !validKeys[key] {
			p.addAt(follow(pr.k).Line, f, "config error, unknown key '%s'%s", clip(key, 64), suggest(key))
			continue
		}
		if key == "metadata" {
			continue // arbitrary, as in the reference
		}
		v := follow(pr.v)
		switch v.Kind {
		case yaml.SequenceNode:
			er := roleOther
			if key == "descriptors" && r != roleOther {
				er = roleDescriptor
			}
			for j, e := range v.Content {
				e = follow(e)
				if e.Kind != yaml.MappingNode {
					p.addAt(e.Line, f.at(j), "config error, yaml file contains list of type other than map: %s", describe(e))
					continue
				}
				p.checkKeys(e, f.at(j), er)
			}
		case yaml.MappingNode:
			p.checkKeys(v, f, roleOther)
		case yaml.ScalarNode:
			s, err := resolveScalar(v)
			switch {
			case err != nil:
				p.addAt(v.Line, f, "%v", err)
			case s.kind == kFloat:
				p.addAt(v.Line, f, "%s reads as a float, which the reference refuses outside metadata (quote it if it is text)", clip(v.Value, 64))
			case s.kind == kUint:
				p.addAt(v.Line, f, "%s is beyond a 64-bit integer, which the reference refuses", clip(v.Value, 64))
			}
		}
	}
}

// The second pass: yaml.v2 decoding into the reference's structs.

// fieldName is the struct field a key names: its text (decoded, for
// !!binary), as yaml.v2 decodes a key into a string. Keys the first pass
// refused name none.
func fieldName(k *yaml.Node) (string, bool) {
	k = follow(k)
	if k.Kind != yaml.ScalarNode {
		return "", false
	}
	s, err := resolveScalar(k)
	if err != nil || s.kind == kNull {
		return "", false
	}
	return s.s, true
}

func (p *parser) decodeRoot(n *yaml.Node, f *File) {
	for _, pr := range p.pairs(n, rootPath) {
		name, ok := fieldName(pr.k)
		if !ok {
			continue
		}
		at := rootPath.key(name)
		switch name {
		case "domain":
			p.mark(at, follow(pr.k))
			f.Domain = p.str(pr.v, at)
		case "descriptors":
			p.mark(at, follow(pr.k))
			f.Descriptors = p.decodeList(pr.v, at, 1)
		}
	}
}

func (p *parser) decodeList(v *yaml.Node, at *path, depth int) []*Descriptor {
	v = follow(v)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.addAt(v.Line, at, "must be a list of descriptors, not %s", describe(v))
		return nil
	}
	var out []*Descriptor
	for i, e := range v.Content {
		e = follow(e)
		if e.Kind != yaml.MappingNode {
			p.addAt(e.Line, at.at(i), "a descriptor must be a mapping, not %s", describe(e))
			continue
		}
		if depth > MaxDepth {
			if !p.tooDeep {
				p.addAt(e.Line, at.at(i), "descriptors nest deeper than %d levels", MaxDepth)
			}
			p.tooDeep = true
			return out
		}
		if p.count >= MaxDescriptors {
			if !p.tooMany {
				p.addAt(e.Line, at.at(i), "the file has more than %d descriptors", MaxDescriptors)
			}
			p.tooMany = true
			return out
		}
		p.count++
		d := &Descriptor{Line: e.Line}
		da := at.at(i)
		da.desc = d
		p.decodeDescriptor(d, e, da, depth)
		out = append(out, d)
	}
	return out
}

func (p *parser) decodeDescriptor(d *Descriptor, n *yaml.Node, at *path, depth int) {
	for _, pr := range p.pairs(n, at) {
		name, ok := fieldName(pr.k)
		if !ok {
			continue
		}
		f := at.key(name)
		switch name {
		case "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
			"detailed_metric", "value_to_metric", "share_threshold", "metadata", "sluice":
			p.mark(f, follow(pr.k))
		}
		switch name {
		case "key":
			d.Key = p.str(pr.v, f)
		case "value":
			d.Value = p.str(pr.v, f)
		case "rate_limit":
			d.RateLimit = p.decodeRateLimit(d.RateLimit, pr.v, f)
		case "descriptors":
			d.Descriptors = p.decodeList(pr.v, f, depth+1)
		case "shadow_mode":
			d.ShadowMode = p.boolean(pr.v, f)
		case "quota_mode":
			d.QuotaMode = p.boolean(pr.v, f)
		case "detailed_metric":
			d.DetailedMetric = p.boolean(pr.v, f)
		case "value_to_metric":
			d.ValueToMetric = p.boolean(pr.v, f)
		case "share_threshold":
			d.ShareThreshold = p.boolean(pr.v, f)
		case "metadata":
			d.Metadata = p.decodeMetadata(d.Metadata, pr.v, f)
		case "sluice":
			d.Sluice = p.decodeExtras(pr.v, f)
		}
	}
	if len(d.Metadata) == 0 {
		d.Metadata = nil
	}
}

// decodeRateLimit decodes into rl, which a rate_limit given twice reuses,
// as yaml.v2 reuses what a pointer points to.
func (p *parser) decodeRateLimit(rl *RateLimit, v *yaml.Node, at *path) *RateLimit {
	v = follow(v)
	if isNull(v) {
		return nil
	}
	if rl == nil {
		rl = &RateLimit{}
		p.unitText[rl] = ""
	}
	if v.Kind != yaml.MappingNode {
		p.addAt(v.Line, at, "must be a mapping with unit and requests_per_unit, not %s", describe(v))
		return rl
	}
	for _, pr := range p.pairs(v, at) {
		name, ok := fieldName(pr.k)
		if !ok {
			continue
		}
		f := at.key(name)
		switch name {
		case "requests_per_unit":
			p.mark(f, follow(pr.k))
			rl.RequestsPerUnit = p.uint32(pr.v, f)
		case "unit":
			p.mark(f, follow(pr.k))
			p.unitText[rl] = p.str(pr.v, f)
		case "unlimited":
			p.mark(f, follow(pr.k))
			rl.Unlimited = p.boolean(pr.v, f)
		case "name":
			p.mark(f, follow(pr.k))
			rl.Name = p.str(pr.v, f)
		case "replaces":
			p.mark(f, follow(pr.k))
			rl.Replaces = p.decodeReplaces(pr.v, f)
		}
	}
	return rl
}

func (p *parser) decodeReplaces(v *yaml.Node, at *path) []string {
	v = follow(v)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.addAt(v.Line, at, "must be a list of {name: ...}, not %s", describe(v))
		return nil
	}
	var out []string
	for i, e := range v.Content {
		ea := at.at(i)
		e = follow(e)
		p.mark(ea, e)
		name := ""
		switch {
		case isNull(e):
		case e.Kind != yaml.MappingNode:
			p.addAt(e.Line, ea, "must be a mapping such as {name: other_limit}, not %s", describe(e))
		default:
			for _, pr := range p.pairs(e, ea) {
				if k, ok := fieldName(pr.k); ok && k == "name" {
					na := ea.key("name")
					p.mark(na, follow(pr.k))
					name = p.str(pr.v, na)
				}
			}
		}
		out = append(out, name)
	}
	return out
}

// str decodes a string field: any scalar's text, "" for null.
func (p *parser) str(v *yaml.Node, at *path) string {
	v = follow(v)
	if v.Kind != yaml.ScalarNode {
		p.addAt(v.Line, at, "must be text, not %s", describe(v))
		return ""
	}
	s, err := resolveScalar(v)
	if err != nil {
		p.addAt(v.Line, at, "%v", err)
		return ""
	}
	if s.kind == kNull {
		return ""
	}
	return s.s
}

func (p *parser) uint32(v *yaml.Node, at *path) uint32 {
	v = follow(v)
	if v.Kind == yaml.ScalarNode {
		s, err := resolveScalar(v)
		if err != nil {
			p.addAt(v.Line, at, "%v", err)
			return 0
		}
		switch {
		case s.kind == kNull:
			return 0
		case s.kind == kInt && s.i >= 0 && s.i <= math.MaxUint32:
			return uint32(s.i)
		case s.kind == kFloat && s.f >= 0 && s.f <= math.MaxUint32:
			// yaml.v2 truncates; the first pass has refused a float that
			// is this field's last value.
			return uint32(s.f)
		}
	}
	p.addAt(v.Line, at, "must be a whole number from 0 to %d, not %s", uint32(math.MaxUint32), describe(v))
	return 0
}

func (p *parser) boolean(v *yaml.Node, at *path) bool {
	v = follow(v)
	if v.Kind == yaml.ScalarNode {
		s, err := resolveScalar(v)
		if err != nil {
			p.addAt(v.Line, at, "%v", err)
			return false
		}
		switch s.kind {
		case kNull:
			return false
		case kBool:
			return s.b
		}
	}
	p.addAt(v.Line, at, "must be true or false, not %s", describe(v))
	return false
}

// decodeMetadata decodes into m, which a metadata given twice reuses, as
// yaml.v2 reuses a map. Top-level keys are their text; values are as the
// reference hands them to structpb.NewStruct.
func (p *parser) decodeMetadata(m map[string]any, v *yaml.Node, at *path) map[string]any {
	v = follow(v)
	if isNull(v) {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		p.addAt(v.Line, at, "must be a mapping, not %s", describe(v))
		return m
	}
	if m == nil {
		m = map[string]any{}
	}
	for _, pr := range p.pairs(v, at) {
		k := follow(pr.k)
		if k.Kind != yaml.ScalarNode {
			p.addAt(k.Line, at, "a key must be a plain name, not %s", describe(k))
			continue
		}
		s, err := resolveScalar(k)
		if err != nil {
			p.addAt(k.Line, at, "%v", err)
			continue
		}
		key := s.s
		if s.kind == kNull {
			key = ""
		}
		m[key] = p.metaValue(pr.v, at.key(key), 1)
	}
	return m
}

// metaValue decodes a metadata value as yaml.v2 decodes into interface{}
// and the reference then converts for structpb: numbers become float64,
// and the keys of nested mappings are printed with %v, so that a key true
// reads "true" and 1.50 reads "1.5".
func (p *parser) metaValue(v *yaml.Node, at *path, depth int) any {
	v = follow(v)
	if depth > MaxDepth && v.Kind != yaml.ScalarNode {
		p.addAt(v.Line, at, "metadata nests deeper than %d levels", MaxDepth)
		return nil
	}
	switch v.Kind {
	case yaml.ScalarNode:
		s, err := resolveScalar(v)
		if err != nil {
			p.addAt(v.Line, at, "%v", err)
			return nil
		}
		return s.value()
	case yaml.SequenceNode:
		out := make([]any, len(v.Content))
		for i, e := range v.Content {
			out[i] = p.metaValue(e, at.at(i), depth+1)
		}
		return out
	case yaml.MappingNode:
		out := map[string]any{}
		from := map[string]string{} // printed key → the key it was printed from
		for _, pr := range p.pairs(v, at) {
			k := follow(pr.k)
			if k.Kind != yaml.ScalarNode {
				p.addAt(k.Line, at, "invalid map key: %s", describe(k))
				continue
			}
			s, err := resolveScalar(k)
			if err != nil {
				p.addAt(k.Line, at, "%v", err)
				continue
			}
			key, id := s.printed()
			if prev, ok := from[key]; ok && prev != id {
				// Two distinct keys of the map yaml.v2 decodes print the
				// same: which one the reference keeps depends on Go's map
				// order.
				p.addAt(k.Line, at.key(key), "two keys of this mapping both read as %q", clip(key, 64))
			}
			from[key] = id
			out[key] = p.metaValue(pr.v, at.key(key), depth+1)
		}
		return out
	}
	return nil
}

// value is a scalar as the reference passes it to structpb: every number
// a float64.
func (s scalar) value() any {
	switch s.kind {
	case kBool:
		return s.b
	case kInt:
		return float64(s.i)
	case kUint:
		return float64(s.u)
	case kFloat:
		return s.f
	case kStr:
		return s.s
	}
	return nil
}

// printed is the key as the reference's convertMap prints it (%v of what
// yaml.v2 decoded), and an identity telling distinct decoded keys apart.
func (s scalar) printed() (key, id string) {
	switch s.kind {
	case kNull:
		key = "<nil>"
	case kBool:
		key = strconv.FormatBool(s.b)
	case kInt:
		key = strconv.FormatInt(s.i, 10)
	case kUint:
		key = strconv.FormatUint(s.u, 10)
	case kFloat:
		key = fmt.Sprint(s.f)
	default:
		key = s.s
	}
	return key, string(rune('0'+s.kind)) + key
}

// Sluice's extras.

var (
	extrasKeys = []string{"algorithm", "burst", "limits", "consistency", "denied"}
	specKeys   = []string{"name", "requests_per_unit", "unit", "calendar", "algorithm", "burst"}
)

// strict walks a mapping of Sluice's own fields: keys given once, each one
// of known.
func (p *parser) strict(n *yaml.Node, at *path, known []string, each func(key string, at *path, v *yaml.Node)) {
	n = follow(n)
	if n.Kind != yaml.MappingNode {
		p.addAt(n.Line, at, "must be a mapping of %s, not %s", strings.Join(known, ", "), describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := follow(n.Content[i])
		key, ok := fieldName(k)
		if !ok || k.Kind != yaml.ScalarNode {
			p.addAt(k.Line, at, "a key must be a plain name, not %s", describe(k))
			continue
		}
		f := at.key(key)
		if line, dup := seen[key]; dup {
			p.addAt(k.Line, f, "given twice (also on line %d)", line)
			continue
		}
		seen[key] = k.Line
		if !slices.Contains(known, key) {
			p.addAt(k.Line, f, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		p.mark(f, k)
		each(key, f, n.Content[i+1])
	}
}

func (p *parser) decodeExtras(v *yaml.Node, at *path) *Extras {
	e := &Extras{}
	p.strict(v, at, extrasKeys, func(key string, f *path, v *yaml.Node) {
		switch key {
		case "algorithm":
			e.Algorithm = Algorithm(p.word(v, f))
		case "burst":
			e.Burst = p.count32(v, f)
		case "consistency":
			e.Consistency = Consistency(p.word(v, f))
		case "denied":
			e.Denied = Denied(p.word(v, f))
		case "limits":
			v = follow(v)
			if v.Kind != yaml.SequenceNode {
				p.addAt(v.Line, f, "must be a list of limits, not %s", describe(v))
				return
			}
			for i, ev := range v.Content {
				var s Spec
				ea := f.at(i)
				p.mark(ea, follow(ev))
				p.strict(ev, ea, specKeys, func(key string, f *path, v *yaml.Node) {
					switch key {
					case "name":
						s.Name = p.word(v, f)
					case "requests_per_unit":
						s.RequestsPerUnit = p.count32(v, f)
					case "unit":
						unit := p.word(v, f)
						var ok bool
						if s.Unit, ok = ParseUnit(unit); !ok && unit != "" {
							p.addAt(follow(v).Line, f, "invalid unit '%s' (one of %s)", clip(unit, 64), unitList)
						}
					case "calendar":
						s.Calendar = p.word(v, f)
					case "algorithm":
						s.Algorithm = Algorithm(p.word(v, f))
					case "burst":
						s.Burst = p.count32(v, f)
					}
				})
				e.Limits = append(e.Limits, s)
			}
		}
	})
	return e
}

// word decodes one of Sluice's names: a string, compared ignoring case.
func (p *parser) word(v *yaml.Node, at *path) string {
	v = follow(v)
	if v.Kind == yaml.ScalarNode {
		if s, err := resolveScalar(v); err == nil && s.kind == kStr {
			return strings.ToLower(s.s)
		}
	}
	p.addAt(v.Line, at, "must be a name, not %s", describe(v))
	return ""
}

// count32 decodes one of Sluice's counts: an integer, no float.
func (p *parser) count32(v *yaml.Node, at *path) uint32 {
	v = follow(v)
	if v.Kind == yaml.ScalarNode {
		if s, err := resolveScalar(v); err == nil && s.kind == kInt && s.i >= 0 && s.i <= math.MaxUint32 {
			return uint32(s.i)
		}
	}
	p.addAt(v.Line, at, "must be a whole number from 0 to %d, not %s", uint32(math.MaxUint32), describe(v))
	return 0
}

// badUTF8 answers the first string in a metadata value that is not valid
// UTF-8 (structpb refuses it, and so the reference refuses the file).
func badUTF8(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			return v, true
		}
	case []any:
		for _, e := range v {
			if s, bad := badUTF8(e); bad {
				return s, true
			}
		}
	case map[string]any:
		for k, e := range v {
			if !utf8.ValidString(k) {
				return k, true
			}
			if s, bad := badUTF8(e); bad {
				return s, true
			}
		}
	}
	return "", false
}
