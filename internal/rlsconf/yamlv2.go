package rlsconf

// The reference reads its files with gopkg.in/yaml.v2, which follows YAML
// 1.1; Sluice parses with go.yaml.in/yaml/v3, which follows YAML 1.2. The
// syntax is the same (both are ports of libyaml), but what a plain scalar
// means is not: v2 reads yes/no/on/off/y/n as booleans, 010 as octal 8,
// 1_000 as 1000, and keeps a timestamp as its text. So this file resolves
// every scalar from its text and style as yaml.v2 does, never from the tag
// yaml.v3 inferred, and lays out mappings with merge keys (<<) as v2 does.

import (
	"encoding/base64"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// scalarKind is what yaml.v2 decodes a scalar into when it has no Go type
// to aim at (an interface{} value).
type scalarKind uint8

const (
	kNull scalarKind = iota
	kBool
	kInt   // an int64 (int on the 64-bit platforms the reference runs on)
	kUint  // a uint64 above math.MaxInt64
	kFloat // a float64
	kStr   // a string: text, a timestamp's text, decoded !!binary, a custom tag
)

var kindNames = [...]string{kNull: "null", kBool: "a boolean", kInt: "an integer", kUint: "an unsigned 64-bit integer", kFloat: "a float", kStr: "a string"}

// scalar is a resolved scalar.
type scalar struct {
	kind scalarKind
	b    bool
	i    int64
	u    uint64
	f    float64
	// s is what a Go string field receives: the text as written (a !!binary
	// scalar's decoded bytes), whatever the scalar resolved to.
	s string
}

// v2Words are the plain scalars yaml.v2 reads from a table rather than by
// their shape.
var v2Words = map[string]scalar{}

func init() {
	for _, w := range []string{"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"} {
		v2Words[w] = scalar{kind: kBool, b: true, s: w}
	}
	for _, w := range []string{"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"} {
		v2Words[w] = scalar{kind: kBool, s: w}
	}
	for _, w := range []string{"", "~", "null", "Null", "NULL"} {
		v2Words[w] = scalar{kind: kNull, s: w}
	}
	for _, w := range []string{".nan", ".NaN", ".NAN"} {
		v2Words[w] = scalar{kind: kFloat, f: math.NaN(), s: w}
	}
	for _, w := range []string{".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"} {
		v2Words[w] = scalar{kind: kFloat, f: math.Inf(1), s: w}
	}
	for _, w := range []string{"-.inf", "-.Inf", "-.INF"} {
		v2Words[w] = scalar{kind: kFloat, f: math.Inf(-1), s: w}
	}
}

// v2Hint classifies a plain scalar by its first byte, as yaml.v2 does
// before it tries any shape: 0 means a string whatever follows.
func v2Hint(c byte) byte {
	switch {
	case c == '+' || c == '-':
		return 'S'
	case c >= '0' && c <= '9':
		return 'D'
	case strings.IndexByte("yYnNtTfFoO~", c) >= 0:
		return 'M'
	case c == '.':
		return '.'
	}
	return 0
}

var v2Float = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// v2Timestamp reports whether yaml.v2 reads a plain scalar as a timestamp:
// four digits and a dash, then one of the layouts it tries.
func v2Timestamp(s string) bool {
	if len(s) < 5 || s[4] != '-' {
		return false
	}
	for i := range 4 {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	for _, layout := range []string{"2006-1-2T15:4:5.999999999Z07:00", "2006-1-2t15:4:5.999999999Z07:00", "2006-1-2 15:4:5.999999999", "2006-1-2"} {
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}

// resolvePlain resolves text as yaml.v2 does a scalar with the given tag
// ("" for an untagged plain scalar), answering the tag it resolved to.
func resolvePlain(tag, text string) (string, scalar) {
	str := scalar{kind: kStr, s: text}
	hint := byte('N') // the empty scalar is looked up in the table
	if text != "" {
		hint = v2Hint(text[0])
	}
	if hint == 0 || tag == "!!str" {
		return "!!str", str
	}
	if w, ok := v2Words[text]; ok {
		switch w.kind {
		case kBool:
			return "!!bool", w
		case kNull:
			return "!!null", w
		}
		return "!!float", w
	}
	switch hint {
	case '.':
		if f, err := strconv.ParseFloat(text, 64); err == nil {
			return "!!float", scalar{kind: kFloat, f: f, s: text}
		}
	case 'D', 'S':
		if (tag == "" || tag == "!!timestamp") && v2Timestamp(text) {
			return "!!timestamp", str
		}
		plain := strings.ReplaceAll(text, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return "!!int", scalar{kind: kInt, i: i, s: text}
		}
		if u, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return "!!int", scalar{kind: kUint, u: u, s: text}
		}
		if v2Float.MatchString(plain) {
			if f, err := strconv.ParseFloat(plain, 64); err == nil {
				return "!!float", scalar{kind: kFloat, f: f, s: text}
			}
		}
	}
	return "!!str", str
}

// resolveScalar resolves a scalar node as yaml.v2 does. The error is the
// one v2 gives up with: a tag its value does not fit, or bad base64.
func resolveScalar(n *yaml.Node) (scalar, error) {
	tagged := n.Style&yaml.TaggedStyle != 0
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0
	if !tagged {
		if quoted {
			return scalar{kind: kStr, s: n.Value}, nil
		}
		_, s := resolvePlain("", n.Value)
		return s, nil
	}
	switch n.Tag {
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(n.Value)
		if err != nil {
			return scalar{}, fmt.Errorf("!!binary value contains invalid base64 data")
		}
		return scalar{kind: kStr, s: string(b)}, nil
	case "!!str", "!!bool", "!!int", "!!float", "!!null", "!!timestamp":
	default:
		// v2 keeps a scalar with a tag it does not know as its text.
		return scalar{kind: kStr, s: n.Value}, nil
	}
	rtag, s := resolvePlain(n.Tag, n.Value)
	switch {
	case n.Tag == rtag || n.Tag == "!!str":
	case n.Tag == "!!float" && rtag == "!!int" && s.kind == kInt:
		s = scalar{kind: kFloat, f: float64(s.i), s: s.s}
	default:
		return scalar{}, fmt.Errorf("cannot decode %s `%s` as a %s", rtag, n.Value, n.Tag)
	}
	return s, nil
}

// isNull reports whether n is a scalar yaml.v2 reads as null.
func isNull(n *yaml.Node) bool {
	if n.Kind != yaml.ScalarNode {
		return false
	}
	s, err := resolveScalar(n)
	return err == nil && s.kind == kNull
}

// follow follows an alias to the node it names.
func follow(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describe names what a node is, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		s, err := resolveScalar(n)
		if err != nil || s.kind == kStr {
			return strconv.Quote(clip(n.Value, 64))
		}
		if s.kind == kNull {
			return "null"
		}
		return clip(n.Value, 64) + " (" + kindNames[s.kind] + ")"
	}
	return "nothing"
}

type pair struct{ k, v *yaml.Node }

// isMerge reports whether a mapping key is a merge key: a plain <<, or one
// tagged !!merge. A quoted "<<" is an ordinary key.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge"
}

// pairs lays out mapping n (aliases followed) as yaml.v2 decodes it: in
// order, each merge key (<<) replaced by the pairs of the mapping it names,
// or of the mappings it lists, the last first. A later pair overwrites an
// earlier one with the same key, so a merge written after a key wins over
// it, as in v2 (the YAML spec says otherwise).
func (p *parser) pairs(n *yaml.Node, at *path) []pair {
	var out []pair
	p.appendPairs(&out, n, at)
	return out
}

func (p *parser) appendPairs(out *[]pair, n *yaml.Node, at *path) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMerge(k) {
			*out = append(*out, pair{k, v})
			continue
		}
		bad := func(n *yaml.Node) {
			p.addAt(n.Line, at.key("<<"), "a merge (<<) must name a mapping or a list of mappings, not %s", describe(n))
		}
		switch t := follow(v); {
		case t.Kind == yaml.MappingNode:
			p.appendPairs(out, t, at)
		case v.Kind == yaml.SequenceNode:
			for j := len(v.Content) - 1; j >= 0; j-- {
				e := v.Content[j]
				if te := follow(e); te.Kind == yaml.MappingNode {
					p.appendPairs(out, te, at)
				} else {
					bad(te)
				}
			}
		default:
			bad(t)
		}
	}
}

// measure walks the document as written, once, and answers how many nodes
// it holds as written, how many it stands for once its aliases are
// expanded (capped), and how deep it nests so expanded. cycle is an alias
// naming a node that contains it, which v2 refuses. Only anchored nodes can
// be named by an alias, so only they are remembered.
func measure(root *yaml.Node) (written, expanded, depth int, cycle *yaml.Node) {
	const capAt = math.MaxInt32
	type size struct{ n, depth int }
	memo := map[*yaml.Node]size{}
	inProgress := size{-1, -1}
	var walk func(n *yaml.Node, asWritten bool) size
	walk = func(n *yaml.Node, asWritten bool) size {
		if cycle != nil {
			return size{}
		}
		if n.Kind == yaml.AliasNode {
			if asWritten {
				written++
			}
			if n.Alias == nil {
				return size{}
			}
			s, ok := memo[n.Alias]
			if s == inProgress {
				cycle = n
				return size{}
			}
			if !ok {
				// The anchor comes before its aliases, so it has been walked;
				// this is only a guard.
				s = walk(n.Alias, false)
			}
			return s
		}
		if n.Anchor != "" {
			if s, ok := memo[n]; ok && s != inProgress {
				return s
			}
			memo[n] = inProgress
		}
		s := size{n: 1, depth: 1}
		if asWritten {
			written++
		}
		for _, c := range n.Content {
			cs := walk(c, asWritten)
			s.n = min(s.n+cs.n, capAt)
			s.depth = min(max(s.depth, cs.depth+1), capAt)
		}
		if n.Anchor != "" {
			memo[n] = s
		}
		return s
	}
	s := walk(root, true)
	return written, s.n, s.depth, cycle
}
