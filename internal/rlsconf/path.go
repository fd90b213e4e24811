package rlsconf

import (
	"strconv"
	"strings"
)

// path is the field path of a node being read, such as
// descriptors[0].rate_limit.unit, kept as a chain and spelled out only for
// a problem: a walk that copied the path of each node of a wide value
// nested deep would cost the width times the depth.
type path struct {
	up   *path
	name string // a key, or "" for a list index
	idx  int
	// desc is set on a descriptor's own path: lines are kept per
	// descriptor, under the path below it (see rel).
	desc *Descriptor
}

// rootPath is the path of the file itself.
var rootPath = &path{}

func (p *path) key(name string) *path { return &path{up: p, name: name} }
func (p *path) at(i int) *path        { return &path{up: p, idx: i} }

// maxNameInPath bounds a key as a path spells it; a longer one is cut.
const maxNameInPath = 64

// String spells the path out.
func (p *path) String() string {
	var segs []*path
	for q := p; q.up != nil; q = q.up {
		segs = append(segs, q)
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if s.name == "" {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.idx))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(clip(s.name, maxNameInPath))
	}
	return b.String()
}

// rel answers the descriptor the path lies in (nil for the file's own
// fields) and the path below it, such as rate_limit.replaces[1].name.
func (p *path) rel() (*Descriptor, string) {
	var segs []*path
	q := p
	for ; q.up != nil && q.desc == nil; q = q.up {
		segs = append(segs, q)
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if s.name == "" {
			b.WriteString("[" + strconv.Itoa(s.idx) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(clip(s.name, maxNameInPath))
	}
	return q.desc, b.String()
}

// clip cuts s to about n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// parent strips the last ".name" or "[index]" of a field path.
func parent(field string) string {
	if strings.HasSuffix(field, "]") {
		if i := strings.LastIndexByte(field, '['); i >= 0 {
			return field[:i]
		}
	}
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[:i]
	}
	return ""
}

func join(prefix, key string) string {
	switch {
	case prefix == "":
		return key
	case key == "":
		return prefix
	}
	return prefix + "." + key
}

func index(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }
