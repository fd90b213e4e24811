package rlsconf

import (
	"fmt"
	"strconv"
	"strings"
)

// Entry is one key and value: a step of a node's path in the tree, or an
// entry of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Node is one descriptor of a tree with its full path from the domain,
// without its children: the row Sluice stores per node.
type Node struct {
	// Path is the keys and values from the top of the tree; its last
	// entry is this descriptor's own Key and Value.
	Path []Entry

	RateLimit      *RateLimit
	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	ValueToMetric  bool
	ShareThreshold bool
	Metadata       map[string]any
	Sluice         *Extras
	Line           int
}

// Key is the node's own key and value.
func (n *Node) Key() Entry { return n.Path[len(n.Path)-1] }

// Nodes lists every descriptor of f, with or without a rate limit, in
// depth-first order (a node before its children, siblings in file order).
// Each Path is a slice of its own. The nodes share RateLimit, Metadata and
// Sluice with f.
func Nodes(f *File) []Node {
	var out []Node
	var walk func(ds []*Descriptor, path []Entry)
	walk = func(ds []*Descriptor, path []Entry) {
		for _, d := range ds {
			p := make([]Entry, len(path)+1)
			copy(p, path)
			p[len(path)] = Entry{d.Key, d.Value}
			out = append(out, Node{
				Path: p, RateLimit: d.RateLimit,
				ShadowMode: d.ShadowMode, QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric,
				ValueToMetric: d.ValueToMetric, ShareThreshold: d.ShareThreshold,
				Metadata: d.Metadata, Sluice: d.Sluice, Line: d.Line,
			})
			walk(d.Descriptors, p)
		}
	}
	walk(f.Descriptors, nil)
	return out
}

// FullKey is the reference's key for a node (its FullKey, and the stats
// key of a match without detailed_metric, value_to_metric or wildcards):
// the domain and each step's key, or key_value, joined with dots, as in
// "domain.key1_value1.subkey1".
func FullKey(domain string, path []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range path {
		b.WriteByte('.')
		b.WriteString(compositeKey(e.Key, e.Value))
	}
	return b.String()
}

// Build makes the File of domain whose Nodes are nodes: the inverse of
// Nodes. Siblings keep the order they have in nodes, which need not list a
// parent before its children. It refuses a node with an empty path, a path
// given twice, and a node whose parent is not among nodes; the File it
// answers is then checked with Validate.
func Build(domain string, nodes []Node) (*File, error) {
	var probs Problems
	bad := func(i int, format string, args ...any) {
		probs = append(probs, Problem{Field: "nodes[" + strconv.Itoa(i) + "]", Message: fmt.Sprintf(format, args...)})
	}
	f := &File{Domain: domain}
	made := make([]*Descriptor, len(nodes))
	byPath := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if len(n.Path) == 0 {
			bad(i, "has an empty path")
			continue
		}
		k := pathKey(n.Path)
		if j, dup := byPath[k]; dup {
			bad(i, "path %s is also nodes[%d]", FullKey(domain, n.Path), j)
			continue
		}
		byPath[k] = i
		last := n.Path[len(n.Path)-1]
		made[i] = &Descriptor{
			Key: last.Key, Value: last.Value, RateLimit: n.RateLimit,
			ShadowMode: n.ShadowMode, QuotaMode: n.QuotaMode, DetailedMetric: n.DetailedMetric,
			ValueToMetric: n.ValueToMetric, ShareThreshold: n.ShareThreshold,
			Metadata: n.Metadata, Sluice: n.Sluice, Line: n.Line,
		}
	}
	for i, n := range nodes {
		d := made[i]
		if d == nil {
			continue
		}
		if len(n.Path) == 1 {
			f.Descriptors = append(f.Descriptors, d)
			continue
		}
		j, ok := byPath[pathKey(n.Path[:len(n.Path)-1])]
		if !ok || made[j] == nil {
			bad(i, "the parent of %s is not among the nodes", FullKey(domain, n.Path))
			continue
		}
		made[j].Descriptors = append(made[j].Descriptors, d)
	}
	if len(probs) > 0 {
		return nil, probs
	}
	if err := Validate(f); err != nil {
		return nil, err
	}
	return f, nil
}

// pathKey encodes a path one to one: each string is preceded by its length.
func pathKey(path []Entry) string {
	var b strings.Builder
	for _, e := range path {
		b.WriteString(strconv.Itoa(len(e.Key)))
		b.WriteByte(':')
		b.WriteString(e.Key)
		b.WriteString(strconv.Itoa(len(e.Value)))
		b.WriteByte(':')
		b.WriteString(e.Value)
	}
	return b.String()
}
