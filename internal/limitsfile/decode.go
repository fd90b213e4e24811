package limitsfile

// The file is decoded from yaml.v3's node tree rather than into structs:
// nodes carry line numbers, so every problem (an unknown field, a wrong
// type, a value the server's rules refuse) can name its line, and the walk
// goes on after a problem so that all of them are reported at once.

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

type decoder struct {
	f     *File
	probs Problems
	// reported holds the fields decoding found wrong, so validation does
	// not report them (or what they hold) a second time.
	reported map[string]bool
}

func (d *decoder) add(line int, field, format string, args ...any) {
	for f := field; f != ""; f = parent(f) {
		if d.reported[f] {
			return
		}
	}
	d.probs = append(d.probs, Problem{File: d.f.Name, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// addErr reports a validation error of the tenants package, whose message
// starts with a field path relative to prefix.
func (d *decoder) addErr(prefix string, err error) {
	field, msg, ok := strings.Cut(errs.Message(err), ": ")
	if !ok {
		field, msg = "", errs.Message(err)
	}
	full := prefix
	switch {
	case field != "" && prefix != "":
		full = prefix + "." + field
	case field != "":
		full = field
	}
	d.add(d.f.line(full), full, "%s", msg)
}

func (d *decoder) mark(field string, n *yaml.Node) { d.f.lines[field] = n.Line }

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Parse decodes and validates a limits file. name is the file name
// problems are reported under. now is the time expiries must be after.
// Any problem answers Problems with every problem found and no File.
func Parse(name string, data []byte, now time.Time) (*File, error) {
	f := &File{Name: name, lines: map[string]int{}}
	d := &decoder{f: f}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		if strings.Contains(msg, "did not find expected alphabetic or numeric character") {
			msg += ` (a value starting with "*" or "&" must be quoted, as in method: "*")`
		}
		d.add(line, "", "not valid YAML: %s", msg)
		return nil, d.probs
	}
	if a, self := aliasOverflow(&doc, maxAliasNodes); a != nil {
		if self {
			d.add(a.Line, "", "the alias *%s names a node that contains itself", a.Value)
		} else {
			d.add(a.Line, "", "aliases repeat more than %d nodes (here *%s): a file is refused before it expands without bound", maxAliasNodes, a.Value)
		}
		return nil, d.probs
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		d.add(1, "version", "required: the file is empty (start it with \"version: 1\")")
		return nil, d.probs
	}
	root := resolve(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		d.add(root.Line, "", "must be a mapping with version and policies")
		return nil, d.probs
	}
	sawVersion := false
	d.mapping(root, "", []string{"version", "policies", "keys", "blocks"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "version":
			sawVersion = true
			n, ok := d.integer(v, "version")
			if ok && n != Version {
				d.add(v.Line, "version", "must be %d (this sluice reads version %d files)", Version, Version)
			}
			f.Version = int(n)
		case "policies":
			d.policies(v)
		case "keys":
			f.HasKeys = true
			d.keys(v)
		case "blocks":
			f.HasBlocks = true
			d.blocks(v, now)
		}
	})
	if !sawVersion {
		d.add(root.Line, "version", "required: start the file with \"version: %d\"", Version)
	}
	d.reported = map[string]bool{}
	for _, p := range d.probs {
		d.reported[p.Field] = true
	}
	d.validate(now)
	if len(d.probs) > 0 {
		slices.SortStableFunc(d.probs, func(a, b Problem) int { return a.Line - b.Line })
		return nil, d.probs
	}
	return f, nil
}

// maxAliasNodes bounds the nodes that aliases (*name) may repeat in a
// file, in all: a short file whose aliases name aliases ("billion laughs")
// would otherwise expand past what memory holds.
const maxAliasNodes = 100_000

// aliasOverflow returns the first alias, in the order of the file, at which
// the nodes repeated by aliases exceed limit, or an alias that names a node
// containing it (self); nil if there is none. Each node's expanded size is
// computed once, so this costs a walk of the file as written.
func aliasOverflow(root *yaml.Node, limit int) (alias *yaml.Node, self bool) {
	const inProgress = -1
	size := map[*yaml.Node]int{} // nodes n stands for, capped at limit+1
	var expanded func(n *yaml.Node) int
	expanded = func(n *yaml.Node) int {
		if s, ok := size[n]; ok {
			return s
		}
		size[n] = inProgress
		s := 1
		if n.Kind == yaml.AliasNode {
			s = 0
			if n.Alias != nil {
				s = expanded(n.Alias)
			}
		}
		for _, c := range n.Content {
			if s == inProgress {
				break
			}
			if cs := expanded(c); cs == inProgress {
				s = inProgress
			} else {
				s = min(s+cs, limit+1)
			}
		}
		size[n] = s
		return s
	}
	repeated := 0
	var walk func(n *yaml.Node) (*yaml.Node, bool)
	walk = func(n *yaml.Node) (*yaml.Node, bool) {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return nil, false
			}
			s := expanded(n.Alias)
			if s == inProgress {
				return n, true
			}
			if repeated += s; repeated > limit {
				return n, false
			}
			return nil, false
		}
		for _, c := range n.Content {
			if a, self := walk(c); a != nil {
				return a, self
			}
		}
		return nil, false
	}
	return walk(root)
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// mapping walks a mapping node's pairs, reporting keys not in allowed
// (when allowed is not nil) and keys given twice.
func (d *decoder) mapping(n *yaml.Node, field string, allowed []string, each func(key string, k, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.add(n.Line, field, "must be a mapping")
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			d.add(k.Line, field, "keys must be plain names")
			continue
		}
		if line, dup := seen[key]; dup {
			d.add(k.Line, join(field, key), "given twice (also on line %d)", line)
			continue
		}
		seen[key] = k.Line
		if allowed != nil && !slices.Contains(allowed, key) {
			d.add(k.Line, join(field, key), "unknown field (known: %s)", strings.Join(allowed, ", "))
			continue
		}
		d.f.lines[join(field, key)] = k.Line
		each(key, k, v)
	}
	return true
}

func (d *decoder) sequence(n *yaml.Node, field string, each func(i int, field string, v *yaml.Node)) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // "policies:" with nothing under it is an empty list
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n.Line, field, "must be a list")
		return
	}
	for i, v := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		d.mark(f, v)
		each(i, f, resolve(v))
	}
}

func (d *decoder) str(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.add(n.Line, field, "must be a string%s", quoteHint(n))
		return "", false
	}
	return n.Value, true
}

// quoteHint suggests quoting a scalar that YAML read as another type.
func quoteHint(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
		return fmt.Sprintf(" (quote it: %q)", n.Value)
	}
	return ""
}

func (d *decoder) integer(n *yaml.Node, field string) (int64, bool) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.add(n.Line, field, "must be an integer")
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(n *yaml.Node, field string) (bool, bool) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.add(n.Line, field, "must be true or false")
		return false, false
	}
	return v, true
}

func (d *decoder) timestamp(n *yaml.Node, field string) (*time.Time, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, true
	}
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!str" || n.ShortTag() == "!!timestamp") {
		if t, err := time.Parse(time.RFC3339, n.Value); err == nil {
			t = t.UTC()
			return &t, true
		}
	}
	d.add(n.Line, field, "must be an RFC 3339 time such as 2027-01-01T00:00:00Z")
	return nil, false
}

var policyKeys = []string{"name", "method", "path", "query", "consistency", "shadow", "unlisted_tiers", "tiers"}

func (d *decoder) policies(n *yaml.Node) {
	d.sequence(n, "policies", func(_ int, field string, v *yaml.Node) {
		var p tenants.Policy
		d.mapping(v, field, policyKeys, func(key string, k, v *yaml.Node) {
			f := join(field, key)
			switch key {
			case "name":
				p.Name, _ = d.str(v, f)
			case "method":
				p.Method, _ = d.str(v, f)
			case "path":
				p.Path, _ = d.str(v, f)
			case "consistency":
				p.Consistency, _ = d.str(v, f)
			case "unlisted_tiers":
				p.UnlistedTiers, _ = d.str(v, f)
			case "shadow":
				p.Shadow, _ = d.boolean(v, f)
			case "query":
				p.Query = map[string]string{}
				d.mapping(v, f, nil, func(key string, _, v *yaml.Node) {
					if s, ok := d.str(v, join(f, key)); ok {
						p.Query[key] = s
					}
				})
			case "tiers":
				p.Tiers = map[string]tenants.Limits{}
				d.mapping(v, f, nil, func(key string, _, v *yaml.Node) {
					p.Tiers[key] = d.limits(v, join(f, key))
				})
			}
		})
		d.f.Policies = append(d.f.Policies, p)
	})
}

var limitKeys = []string{"name", "algorithm", "limit", "period", "burst", "calendar", "per"}

// limits reads a tier's (or an override's) limits: one mapping, or a list
// of mappings.
func (d *decoder) limits(n *yaml.Node, field string) tenants.Limits {
	if n.Kind == yaml.SequenceNode {
		var out tenants.Limits
		d.sequence(n, field, func(i int, f string, v *yaml.Node) {
			l := d.limit(v, f)
			if len(n.Content) == 1 && l.Name == "" {
				// The server names a lone unnamed limit as the tier itself.
				for _, k := range limitKeys {
					if line, ok := d.f.lines[f+"."+k]; ok {
						d.f.lines[field+"."+k] = line
					}
				}
			}
			out = append(out, l)
		})
		if out == nil {
			out = tenants.Limits{}
		}
		return out
	}
	return tenants.Limits{d.limit(n, field)}
}

func (d *decoder) limit(n *yaml.Node, field string) tenants.LimitSpec {
	var l tenants.LimitSpec
	d.mapping(n, field, limitKeys, func(key string, _, v *yaml.Node) {
		f := join(field, key)
		switch key {
		case "name":
			l.Name, _ = d.str(v, f)
		case "algorithm":
			l.Algorithm, _ = d.str(v, f)
		case "period":
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
				d.add(v.Line, f, `must be a duration such as "60s", "1m" or "1d"`)
				return
			}
			l.Period = v.Value
		case "calendar":
			l.Calendar, _ = d.str(v, f)
		case "per":
			l.Per, _ = d.str(v, f)
		case "limit":
			l.Limit, _ = d.integer(v, f)
		case "burst":
			l.Burst, _ = d.integer(v, f)
		}
	})
	return l
}

func (d *decoder) keys(n *yaml.Node) {
	d.sequence(n, "keys", func(_ int, field string, v *yaml.Node) {
		var k Key
		d.mapping(v, field, []string{"id", "name", "tier", "overrides", "customer"}, func(key string, _, v *yaml.Node) {
			f := join(field, key)
			switch key {
			case "id":
				k.ID, _ = d.str(v, f)
			case "name":
				k.Name, _ = d.str(v, f)
			case "tier":
				k.Tier, _ = d.str(v, f)
			case "customer":
				k.Customer, _ = d.str(v, f)
			case "overrides":
				k.Overrides = map[string]tenants.Limits{}
				if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
					return
				}
				d.mapping(v, f, nil, func(key string, _, v *yaml.Node) {
					k.Overrides[key] = d.limits(v, join(f, key))
				})
			}
		})
		d.f.Keys = append(d.f.Keys, k)
	})
}

func (d *decoder) blocks(n *yaml.Node, now time.Time) {
	d.sequence(n, "blocks", func(_ int, field string, v *yaml.Node) {
		var b Block
		d.mapping(v, field, []string{"identity", "reason", "expires_at"}, func(key string, _, v *yaml.Node) {
			f := join(field, key)
			switch key {
			case "identity":
				d.mapping(v, f, []string{"kind", "id"}, func(key string, _, v *yaml.Node) {
					if key == "kind" {
						b.Identity.Kind, _ = d.str(v, join(f, key))
					} else {
						b.Identity.ID, _ = d.str(v, join(f, key))
					}
				})
			case "reason":
				b.Reason, _ = d.str(v, f)
			case "expires_at":
				b.ExpiresAt, _ = d.timestamp(v, f)
			}
		})
		d.f.Blocks = append(d.f.Blocks, b)
	})
}

// validate applies the server's rules to what was decoded, and the file's
// own: names given once, tiers and policies referenced by keys defined.
func (d *decoder) validate(now time.Time) {
	f := d.f
	names := map[string]int{}
	tiers := map[string]bool{}
	for i, p := range f.Policies {
		field := fmt.Sprintf("policies[%d]", i)
		for _, err := range p.Problems() {
			d.addErr(field, err)
		}
		if j, dup := names[p.Name]; dup && p.Name != "" {
			d.add(f.line(field+".name"), field+".name", "%q is used twice (also policies[%d])", p.Name, j)
		} else {
			names[p.Name] = i
		}
		for t := range p.Tiers {
			tiers[t] = true
		}
		p.Normalize()
		f.Policies[i] = p
	}
	ids := map[string]int{}
	for i, k := range f.Keys {
		field := fmt.Sprintf("keys[%d]", i)
		switch j, dup := ids[k.ID]; {
		case k.ID == "":
			d.add(f.line(field), field+".id", "required: the consumer key's id (sluice keys lists them)")
		case dup:
			d.add(f.line(field+".id"), field+".id", "%q is used twice (also keys[%d])", k.ID, j)
		default:
			ids[k.ID] = i
		}
		if k.Name != "" {
			if err := (tenants.KeyPatch{Name: &k.Name}).Validate(now); err != nil {
				d.addErr(field, err)
			}
		}
		if k.Tier != "" {
			if err := tenants.ValidateTier(field+".tier", k.Tier); err != nil {
				d.addErr("", err)
			} else if !tiers[k.Tier] {
				d.add(f.line(field+".tier"), field+".tier", "%q is a tier no policy in this file defines", k.Tier)
			}
		}
		if k.Customer != "" && (!strings.HasPrefix(k.Customer, tenants.IDCustomer) || len(k.Customer) > 64) {
			d.add(f.line(field+".customer"), field+".customer", "must be a customer id such as cus_… (sluice customers lists them)")
		}
		for _, pol := range sortedKeys(k.Overrides) {
			of := field + ".overrides." + pol
			if _, ok := names[pol]; !ok {
				d.add(f.line(of), of, "no policy in this file has this name")
				continue
			}
			if err := tenants.ValidateLimits(of, k.Overrides[pol]); err != nil {
				d.addErr("", err)
			}
		}
	}
	seen := map[tenants.Identity]int{}
	for i, b := range f.Blocks {
		field := fmt.Sprintf("blocks[%d]", i)
		err := tenants.Block{TenantID: "-", Identity: b.Identity, Reason: b.Reason, ExpiresAt: b.ExpiresAt}.Validate(now)
		if err != nil {
			d.addErr(field, err)
			continue
		}
		id := tenants.NormalizeIdentity(b.Identity)
		f.Blocks[i].Identity = id
		if j, dup := seen[id]; dup {
			d.add(f.line(field+".identity"), field+".identity", "%s %s is blocked twice (also blocks[%d])", id.Kind, id.ID, j)
		}
		seen[id] = i
	}
}

// IsProblems reports whether err lists problems of a file.
func IsProblems(err error) (Problems, bool) {
	var ps Problems
	ok := errors.As(err, &ps)
	return ps, ok
}
