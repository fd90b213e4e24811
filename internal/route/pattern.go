package route

import (
	"github.com/sluicehq/sluice/internal/quota"
	"slices"
	"strings"
)

// Pattern is a compiled policy matcher: a method, a path pattern and query
// constraints. The zero Pattern matches nothing. A Pattern is immutable and
// safe for concurrent use.
//
// The path has literal segments, ":name" segments that match any one
// non-empty segment, and an optional final "*" that matches the rest (zero or
// more segments). Literal segments are normalized like request paths, so they
// compare with canonical targets: "/API/Example.json" matches what
// "/api/example" matches.
type Pattern struct {
	ok     bool
	method string // upper case; "" = any
	segs   []patSeg
	wild   bool
	query  []queryCond
}

type patSeg struct {
	text  string // canonical literal, or the parameter name
	param bool
}

type queryCond struct{ key, value string }

// maxPatternLen bounds a pattern's path; policies are written by people.
const maxPatternLen = 2048

// CompilePattern compiles a policy's method, path pattern and query
// constraints. method "" or "*" matches any method; otherwise it is an HTTP
// method token, compared without case. Every query key must have at least one
// value equal (ignoring ASCII case) to the given value; keys are compared
// after the normalization NormalizeTarget applies (lower case, no "[]").
// Errors are *quota.FieldError for "method", "path" or "query".
func CompilePattern(method, path string, query map[string]string) (Pattern, error) {
	fe := func(field, msg string) (Pattern, error) {
		return Pattern{}, &quota.FieldError{Field: field, Message: msg}
	}
	p := Pattern{ok: true}
	switch {
	case method == "" || method == "*":
	case len(method) > 32 || !isToken(method):
		return fe("method", "must be an HTTP method such as GET, or * for any")
	default:
		p.method = strings.ToUpper(method)
	}

	if path == "" || path[0] != '/' {
		return fe("path", "must start with /")
	}
	if len(path) > maxPatternLen {
		return fe("path", "must be at most 2048 bytes")
	}
	if strings.ContainsAny(path, "?#") {
		return fe("path", "must not contain ? or #: put query parameters in query")
	}
	raw := strings.Split(path[1:], "/")
	for len(raw) > 0 && raw[len(raw)-1] == "" {
		raw = raw[:len(raw)-1] // a trailing slash means nothing
	}
	var run []string // pending literal segments, normalized together
	flush := func() {
		if len(run) == 0 {
			return
		}
		// Dot segments resolve within the run: they cannot cancel a parameter.
		canon := canonicalPath("/"+strings.Join(run, "/"), false)
		run = run[:0]
		if canon == "/" {
			return
		}
		for s := range strings.SplitSeq(canon[1:], "/") {
			p.segs = append(p.segs, patSeg{text: s})
		}
	}
	for i, s := range raw {
		switch {
		case strings.HasPrefix(s, ":"):
			name := s[1:]
			if name == "" || !isIdent(name) {
				return fe("path", "parameter "+s+" must be : followed by letters, digits or _")
			}
			for _, q := range p.segs {
				if q.param && q.text == name {
					return fe("path", "parameter :"+name+" appears twice")
				}
			}
			flush()
			p.segs = append(p.segs, patSeg{text: name, param: true})
		case s == "*":
			if i != len(raw)-1 {
				return fe("path", "* is allowed only as the last segment")
			}
			flush()
			p.wild = true
		case strings.Contains(s, "*"):
			return fe("path", "* must be a whole segment, and the last one")
		default:
			run = append(run, s)
		}
	}
	flush()
	// The format suffix goes only where a target loses it: the last segment.
	if n := len(p.segs); n > 0 && !p.wild && !p.segs[n-1].param {
		p.segs[n-1].text = string(stripExtensions([]byte("/" + p.segs[n-1].text))[1:])
	}

	for k, v := range query {
		key := normalizeQueryKey(k)
		if key == "" {
			return fe("query", "parameter names must not be empty")
		}
		p.query = append(p.query, queryCond{key: key, value: v})
	}
	slices.SortFunc(p.query, func(a, b queryCond) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	return p, nil
}

// Method returns the pattern's method in upper case, or "" for any method.
func (p *Pattern) Method() string { return p.method }

// String returns the canonical form, e.g. "GET /api/:id/*?mode=heavy"
// ("*" for any method).
func (p *Pattern) String() string {
	if !p.ok {
		return "<invalid pattern>"
	}
	var b strings.Builder
	if p.method == "" {
		b.WriteString("*")
	} else {
		b.WriteString(p.method)
	}
	b.WriteByte(' ')
	for _, s := range p.segs {
		b.WriteByte('/')
		if s.param {
			b.WriteByte(':')
		}
		b.WriteString(s.text)
	}
	switch {
	case p.wild:
		b.WriteString("/*")
	case len(p.segs) == 0:
		b.WriteByte('/')
	}
	for i, q := range p.query {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(q.key + "=" + q.value)
	}
	return b.String()
}

// Match reports whether the pattern matches a request with this method and
// normalized target. A pattern for GET also matches HEAD (servers route HEAD
// to GET handlers), and a POST whose query carries _method=X also counts as
// X (Rack's method override); both would otherwise be ways around a policy.
func (p *Pattern) Match(method string, t *Target) bool {
	return p.ok && t != nil && p.matchPath(t.Path) && p.matchMethod(method, t) && p.matchQuery(t)
}

func (p *Pattern) matchPath(path string) bool {
	tally(2 * len(path))
	rest := strings.TrimPrefix(path, "/")
	for _, s := range p.segs {
		if rest == "" {
			return false
		}
		var seg string
		seg, rest, _ = strings.Cut(rest, "/")
		if s.param {
			if seg == "" {
				return false
			}
		} else if seg != s.text {
			return false
		}
	}
	return rest == "" || p.wild
}

func (p *Pattern) matchMethod(method string, t *Target) bool {
	if p.method == "" {
		return true
	}
	tally(2*len(p.method) + 1)
	if method == "" {
		method = "GET" // the API's default
	}
	if strings.EqualFold(method, p.method) || p.method == "GET" && strings.EqualFold(method, "HEAD") {
		return true
	}
	if strings.EqualFold(method, "POST") {
		for _, v := range t.Query["_method"] {
			tally(min(len(v), len(p.method)) + 1)
			if strings.EqualFold(v, p.method) {
				return true
			}
		}
	}
	return false
}

func (p *Pattern) matchQuery(t *Target) bool {
	for _, q := range p.query {
		found := false
		tally(len(q.key))
		for _, v := range t.Query[q.key] {
			tally(min(len(v), len(q.value)) + 1)
			if strings.EqualFold(v, q.value) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Router picks the most specific of a list of patterns that matches a
// request. Specificity: compare path segments left to right, a literal beats
// a parameter, which beats the wildcard (so a longer literal or parameter path
// beats a wildcard that would also match); then more query constraints win;
// then a specific method beats any method; then the lowest index. A Router is
// immutable and safe for concurrent use.
//
// The patterns form a trie searched literal-first, then parameter, then
// wildcard, with backtracking; the first pattern found is the most specific,
// so a match costs a walk of the path, not a scan of every pattern.
type Router struct {
	patterns []Pattern
	root     *rnode
}

type rnode struct {
	lit   map[string]*rnode
	param *rnode
	end   []int // patterns ending here, most specific first
	wild  []int // patterns with "*" here, most specific first
}

// NewRouter builds a Router over a copy of patterns; Match returns indexes
// into patterns. Zero (uncompiled) patterns never match.
func NewRouter(patterns []Pattern) *Router {
	r := &Router{patterns: slices.Clone(patterns), root: &rnode{}}
	for i := range r.patterns {
		p := &r.patterns[i]
		if !p.ok {
			continue
		}
		n := r.root
		for _, s := range p.segs {
			if s.param {
				if n.param == nil {
					n.param = &rnode{}
				}
				n = n.param
				continue
			}
			c := n.lit[s.text]
			if c == nil {
				if n.lit == nil {
					n.lit = make(map[string]*rnode)
				}
				c = &rnode{}
				n.lit[s.text] = c
			}
			n = c
		}
		if p.wild {
			n.wild = append(n.wild, i)
		} else {
			n.end = append(n.end, i)
		}
	}
	r.sortNode(r.root)
	return r
}

func (r *Router) sortNode(n *rnode) {
	order := func(a, b int) int {
		pa, pb := &r.patterns[a], &r.patterns[b]
		if d := len(pb.query) - len(pa.query); d != 0 {
			return d
		}
		if (pa.method == "") != (pb.method == "") {
			if pa.method != "" {
				return -1
			}
			return 1
		}
		return a - b
	}
	slices.SortFunc(n.end, order)
	slices.SortFunc(n.wild, order)
	for _, c := range n.lit {
		r.sortNode(c)
	}
	if n.param != nil {
		r.sortNode(n.param)
	}
}

// Match returns the index of the most specific pattern matching the request,
// or -1.
func (r *Router) Match(method string, t *Target) int {
	if r == nil || t == nil {
		return -1
	}
	return r.match(r.root, strings.TrimPrefix(t.Path, "/"), method, t)
}

func (r *Router) match(n *rnode, rest, method string, t *Target) int {
	if rest == "" {
		if i := r.pick(n.end, method, t); i >= 0 {
			return i
		}
		return r.pick(n.wild, method, t)
	}
	seg, next, _ := strings.Cut(rest, "/")
	tally(2*len(seg) + 1)
	if c := n.lit[seg]; c != nil {
		if i := r.match(c, next, method, t); i >= 0 {
			return i
		}
	}
	if n.param != nil && seg != "" {
		if i := r.match(n.param, next, method, t); i >= 0 {
			return i
		}
	}
	return r.pick(n.wild, method, t)
}

func (r *Router) pick(list []int, method string, t *Target) int {
	for _, i := range list {
		p := &r.patterns[i]
		if p.matchMethod(method, t) && p.matchQuery(t) {
			return i
		}
	}
	return -1
}

func isIdent(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '_' {
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' && s[i] != '_' {
			return false
		}
	}
	return true
}
