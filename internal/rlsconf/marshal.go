package rlsconf

import (
	"bytes"
	"encoding/base64"
	"math"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Marshal writes f as a file the reference loads, and Parse reads back as
// f (Name and Line apart). It refuses a File that Validate refuses, and one
// using Sluice's extras, naming each descriptor that does: the reference
// refuses the sluice: key. MarshalWithExtras writes those too.
//
// Marshal writes block style, indenting each level of descriptors, so a
// file near Parse's bounds written compactly may marshal to more than
// MaxFileSize, which Parse then refuses.
func Marshal(f *File) ([]byte, error) { return marshal(f, false) }

// MarshalWithExtras is Marshal for a Sluice file: it writes each
// descriptor's extras under its sluice: key.
func MarshalWithExtras(f *File) ([]byte, error) { return marshal(f, true) }

func marshal(f *File, extras bool) ([]byte, error) {
	if err := Validate(f); err != nil {
		return nil, err
	}
	if !extras {
		var probs Problems
		var walk func(ds []*Descriptor, field string, path []Entry)
		walk = func(ds []*Descriptor, field string, path []Entry) {
			for i, d := range ds {
				path := append(path, Entry{d.Key, d.Value})
				if d.Sluice != nil {
					probs = append(probs, Problem{File: f.Name, Line: d.Line, Field: index(field, i),
						Message: "descriptor " + FullKey(f.Domain, path) + " uses Sluice's own fields (sluice:), which the reference refuses; write the file with MarshalWithExtras"})
				}
				walk(d.Descriptors, index(field, i)+".descriptors", path)
			}
		}
		walk(f.Descriptors, "descriptors", nil)
		if len(probs) > 0 {
			return nil, probs
		}
	}
	root := mapNode()
	add(root, "domain", strNode(f.Domain))
	if len(f.Descriptors) > 0 {
		add(root, "descriptors", descriptorsNode(f.Descriptors, extras))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func descriptorsNode(ds []*Descriptor, extras bool) *yaml.Node {
	s := seqNode()
	for _, d := range ds {
		n := mapNode()
		add(n, "key", strNode(d.Key))
		if d.Value != "" {
			add(n, "value", strNode(d.Value))
		}
		if rl := d.RateLimit; rl != nil {
			r := mapNode()
			if rl.Unlimited {
				add(r, "unlimited", boolNode(true))
			} else {
				add(r, "unit", strNode(rl.Unit.lower()))
			}
			if !rl.Unlimited || rl.RequestsPerUnit != 0 {
				add(r, "requests_per_unit", uintNode(rl.RequestsPerUnit))
			}
			if rl.Name != "" {
				add(r, "name", strNode(rl.Name))
			}
			if len(rl.Replaces) > 0 {
				rs := seqNode()
				for _, name := range rl.Replaces {
					e := mapNode()
					add(e, "name", strNode(name))
					rs.Content = append(rs.Content, e)
				}
				add(r, "replaces", rs)
			}
			add(n, "rate_limit", r)
		}
		for _, flag := range []struct {
			key string
			on  bool
		}{
			{"shadow_mode", d.ShadowMode}, {"quota_mode", d.QuotaMode}, {"detailed_metric", d.DetailedMetric},
			{"value_to_metric", d.ValueToMetric}, {"share_threshold", d.ShareThreshold},
		} {
			if flag.on {
				add(n, flag.key, boolNode(true))
			}
		}
		if len(d.Metadata) > 0 {
			add(n, "metadata", metaNode(d.Metadata))
		}
		if extras && d.Sluice != nil {
			add(n, "sluice", extrasNode(d.Sluice))
		}
		if len(d.Descriptors) > 0 {
			add(n, "descriptors", descriptorsNode(d.Descriptors, extras))
		}
		s.Content = append(s.Content, n)
	}
	return s
}

func extrasNode(e *Extras) *yaml.Node {
	n := mapNode()
	if e.Algorithm != "" {
		add(n, "algorithm", strNode(string(e.Algorithm)))
	}
	if e.Burst != 0 {
		add(n, "burst", uintNode(e.Burst))
	}
	if e.Consistency != "" {
		add(n, "consistency", strNode(string(e.Consistency)))
	}
	if e.Denied != "" {
		add(n, "denied", strNode(string(e.Denied)))
	}
	if len(e.Limits) > 0 {
		ls := seqNode()
		for _, s := range e.Limits {
			l := mapNode()
			l.Style = yaml.FlowStyle
			if s.Name != "" {
				add(l, "name", strNode(s.Name))
			}
			add(l, "requests_per_unit", uintNode(s.RequestsPerUnit))
			if s.Calendar != "" {
				add(l, "calendar", strNode(s.Calendar))
			} else {
				add(l, "unit", strNode(s.Unit.lower()))
			}
			if s.Algorithm != "" {
				add(l, "algorithm", strNode(string(s.Algorithm)))
			}
			if s.Burst != 0 {
				add(l, "burst", uintNode(s.Burst))
			}
			ls.Content = append(ls.Content, l)
		}
		add(n, "limits", ls)
	}
	return n
}

func metaNode(x any) *yaml.Node {
	switch x := x.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case bool:
		return boolNode(x)
	case string:
		return strNode(x)
	case float64:
		v := strconv.FormatFloat(x, 'g', -1, 64)
		switch {
		case x == 0 && math.Signbit(x):
			v = "-0.0" // "-0" would read as the integer 0
		case math.IsNaN(x):
			v = ".nan"
		case math.IsInf(x, 1):
			v = ".inf"
		case math.IsInf(x, -1):
			v = "-.inf"
		}
		// Untagged: v2 reads an integral value as an int, which the
		// reference makes a float64 again.
		return &yaml.Node{Kind: yaml.ScalarNode, Value: v}
	case []any:
		s := seqNode()
		for _, e := range x {
			s.Content = append(s.Content, metaNode(e))
		}
		return s
	case map[string]any:
		m := mapNode()
		for _, k := range sortedKeys(x) {
			m.Content = append(m.Content, keyNode(k), metaNode(x[k]))
		}
		return m
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"} // Validate refuses other types
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }
func seqNode() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"} }

// strNode writes s plain when yaml.v2 reads it back as the same string,
// and double-quoted otherwise: "yes", "010", "1.5" or "~" would read as
// something else, and the reference refuses a float where text belongs.
func strNode(s string) *yaml.Node {
	if !utf8.ValidString(s) {
		// YAML text is UTF-8; v2 reads !!binary back to the same bytes.
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!binary", Style: yaml.TaggedStyle, Value: base64.StdEncoding.EncodeToString([]byte(s))}
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if _, r := resolvePlain("", s); r.kind != kStr || r.s != s {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// keyNode is strNode for a metadata key, where a plain << would merge.
func keyNode(s string) *yaml.Node {
	n := strNode(s)
	if s == "<<" {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

func boolNode(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func uintNode(n uint32) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(n), 10)}
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}
