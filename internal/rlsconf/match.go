package rlsconf

// Lookup is the reference's GetLimit. It walks a request's entries down
// the domain's tree, at each level trying the exact key_value, then the
// level's wildcard patterns in file order, then the bare key, and stops at
// a node with no children. A node's limit applies only when it is reached
// at the request's last entry.
//
// Alongside the walk it builds, as the reference does, the metric key
// with value_to_metric's runtime values, and remembers the share_threshold
// pattern of each level matched through one. The keys are built in stack
// buffers, so a lookup whose stats key is the rule's own key allocates
// nothing and answers the rule's shared Limit; one with a key of its own
// allocates the Limit and the key (and the patterns, with share_threshold).

import (
	"bytes"
	"fmt"
	"math"
	"strings"
)

// Config is a compiled set of files, for Lookup. It is immutable and safe
// for concurrent use.
type Config struct {
	domains map[string]*cnode
}

// RequestDescriptor is one descriptor of a rate limit request.
type RequestDescriptor struct {
	Entries []Entry
	// Limit is Envoy's per-descriptor limit override, nil if none.
	Limit *Override
}

// Override is a limit a request brings with it: it wins over the file's.
type Override struct {
	RequestsPerUnit uint32
	// Unit is Envoy's RateLimitUnit, numbered as Unit. The reference fails
	// the request when it is not valid (its divider panics); a caller
	// should do the same when !Unit.Valid().
	Unit Unit
}

// Limit is the limit Lookup finds for a request descriptor. Treat it as
// read-only: it may be shared with other lookups.
type Limit struct {
	// RateLimit is the rule's rate_limit, or the override's. For a rule
	// with only sluice.limits it is the first of them without its name (so
	// that a caller reading only RateLimit still enforces a real limit,
	// and replaces still names rate_limits only); Specs lists all.
	RateLimit
	// Rule is the matched node, nil for an override.
	Rule *Node
	// Configured is, for an override, the file's limit for the same
	// entries (nil if none): the reference counts both in one counter
	// when their units are the same, its cache key being the domain, the
	// entries and the window start, whatever the limit.
	Configured *Limit
	// Sluice is the rule's extras, nil for an override or a reference rule.
	Sluice *Extras

	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool
	// StatsKey is the reference's metric key for this match (its FullKey
	// after detailed_metric, value_to_metric and share_threshold), under
	// which it counts total_hits, over_limit and the others.
	StatsKey string

	domain string
	// share is the share_threshold pattern of each entry matched through
	// one, "" for the others; nil when none was.
	share []string
	specs []Spec
}

// Specs lists every limit the match enforces, all of which must allow a
// request: the rate_limit (counted with the rule's sluice algorithm and
// burst) then the rule's sluice.limits. It is empty for an unlimited rule.
func (l *Limit) Specs() []Spec {
	if l.Rule == nil && !l.Unlimited {
		return []Spec{{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}}
	}
	return l.specs
}

// SharePattern is the share_threshold pattern that entry i of the request
// matched, and whether it matched one.
func (l *Limit) SharePattern(i int) (string, bool) {
	if i < len(l.share) && l.share[i] != "" {
		return l.share[i], true
	}
	return "", false
}

// CounterKey is the part of the reference's cache key that names the
// counter of this match for the request's entries: the domain, then each
// entry's key and value (a share_threshold pattern in place of a value
// matched through one, so that every value it matches shares the counter),
// each followed by "_". The reference's full key is its CACHE_KEY_PREFIX,
// this, and the window start in unix seconds (Unit.WindowStart). A nil
// Limit has no counter: "".
func (l *Limit) CounterKey(entries []Entry) string {
	if l == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(l.domain)
	b.WriteByte('_')
	for i, e := range entries {
		b.WriteString(e.Key)
		b.WriteByte('_')
		if p, ok := l.SharePattern(i); ok {
			b.WriteString(p)
		} else {
			b.WriteString(e.Value)
		}
		b.WriteByte('_')
	}
	return b.String()
}

type cnode struct {
	children map[string]*cnode
	wild     []wildcard // the patterns among children, in file order
	key      string     // composite key
	rule     *Node
	limit    *Limit // nil without a limit; else the Limit of a match keyed by the rule's FullKey
	v2m      bool
	share    bool
}

// wildcard is a composite key holding '*', split on it once at Compile.
type wildcard struct {
	parts [][]byte
	fixed int // the length of all parts
	node  *cnode
}

// match reports whether v matches the pattern, each '*' standing for zero
// or more bytes: v starts with the first part, ends with the last, and
// holds the others in order between them.
func (w *wildcard) match(v []byte) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(v) < w.fixed || !bytes.HasPrefix(v, first) || !bytes.HasSuffix(v, last) {
		return false
	}
	rest := v[len(first) : len(v)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := bytes.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// Compile makes a Config of files, each checked with Validate. Two files
// with the same domain are refused, as the reference refuses them unless
// told to merge them. The Config shares the files' rate limits, metadata
// and extras: do not change them afterwards.
func Compile(files ...*File) (*Config, error) {
	c := &Config{domains: map[string]*cnode{}}
	for _, f := range files {
		if err := Validate(f); err != nil {
			return nil, err
		}
		if _, dup := c.domains[f.Domain]; dup {
			return nil, fmt.Errorf("%s: duplicate domain '%s' in config file", f.Name, f.Domain)
		}
		root := &cnode{}
		compile(root, f.Domain, f.Descriptors, nil)
		c.domains[f.Domain] = root
	}
	return c, nil
}

func compile(parent *cnode, domain string, ds []*Descriptor, path []Entry) {
	if len(ds) == 0 {
		return
	}
	parent.children = make(map[string]*cnode, len(ds))
	for _, d := range ds {
		p := make([]Entry, len(path)+1)
		copy(p, path)
		p[len(path)] = Entry{d.Key, d.Value}
		n := &cnode{
			key:   compositeKey(d.Key, d.Value),
			v2m:   d.ValueToMetric,
			share: d.ShareThreshold,
			rule: &Node{
				Path: p, RateLimit: d.RateLimit,
				ShadowMode: d.ShadowMode, QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric,
				ValueToMetric: d.ValueToMetric, ShareThreshold: d.ShareThreshold,
				Metadata: d.Metadata, Sluice: d.Sluice, Line: d.Line,
			},
		}
		if rl, specs := ruleLimits(d); rl != nil {
			// Only a node with a limit spells out its full key (at most
			// MaxFullKey bytes, as Validate checks).
			n.limit = &Limit{
				RateLimit: *rl, Rule: n.rule, Sluice: d.Sluice,
				ShadowMode: d.ShadowMode, QuotaMode: d.QuotaMode, DetailedMetric: d.DetailedMetric,
				StatsKey: FullKey(domain, p), domain: domain, specs: specs,
			}
		}
		parent.children[n.key] = n
		if strings.Contains(n.key, "*") {
			w := wildcard{node: n}
			for _, part := range strings.Split(n.key, "*") {
				w.parts = append(w.parts, []byte(part))
				w.fixed += len(part)
			}
			parent.wild = append(parent.wild, w)
		}
		compile(n, domain, d.Descriptors, p)
	}
}

// ruleLimits answers the RateLimit a rule's Limit carries (nil if the rule
// has no limit) and the limits it enforces.
func ruleLimits(d *Descriptor) (*RateLimit, []Spec) {
	var specs []Spec
	rl := d.RateLimit
	var alg Algorithm
	var burst uint32
	if d.Sluice != nil {
		alg, burst = d.Sluice.Algorithm, d.Sluice.Burst
	}
	if rl != nil && !rl.Unlimited {
		specs = append(specs, Spec{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit, Algorithm: alg, Burst: burst})
	}
	if d.Sluice != nil {
		specs = append(specs, d.Sluice.Limits...)
	}
	if rl == nil && len(specs) > 0 {
		// Without the name: replaces names rate_limits only.
		rl = &RateLimit{RequestsPerUnit: specs[0].RequestsPerUnit, Unit: specs[0].Unit}
	}
	return rl, specs
}

// Lookup answers the limit of domain that applies to d, nil if none does
// (an unknown domain, or no node with a limit at d's last entry). An
// override in d wins over the file, but only in a domain the Config has;
// it is never in shadow or quota mode. Lookup costs O(entries × wildcard
// patterns at each level it walks).
func (c *Config) Lookup(domain string, d RequestDescriptor) *Limit {
	st := matchState{budget: math.MaxInt64}
	return c.lookup(domain, d, &st)
}

// MatchBudget bounds the wildcard matching of one request (Plan): the
// bytes of descriptor values compared with wildcard patterns, each test
// charged its value's length. A request that would compare more (say a
// thousand descriptors against a thousand sibling wildcards each) matches
// its later values by exact value and bare key only, so one call's
// matching costs bounded time whatever the file and the call.
const MatchBudget = 4 << 20

// matchState is what the lookups of one request share: the wildcard
// tests' budget left, and the buffer an entry's "key_value" is built in
// when it is too long for the stack, grown once to the request's longest
// entry rather than once per entry.
type matchState struct {
	budget int64
	kv     []byte
}

// buf answers an empty buffer of at least n bytes: small, the one on the
// stack; else st's.
func (st *matchState) buf(small []byte, n int) []byte {
	if n <= cap(small) {
		return small[:0]
	}
	if cap(st.kv) < n {
		st.kv = make([]byte, 0, n)
	}
	return st.kv[:0]
}

// lookup is Lookup charging its wildcard tests to st's budget.
func (c *Config) lookup(domain string, d RequestDescriptor, st *matchState) *Limit {
	root := c.domains[domain]
	if root == nil {
		return nil
	}
	if d.Limit != nil {
		return &Limit{
			RateLimit: RateLimit{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: d.Limit.Unit},
			StatsKey:  descriptorKey(domain, d.Entries), domain: domain,
			Configured: c.lookup(domain, RequestDescriptor{Entries: d.Entries}, st),
		}
	}
	var (
		keyArr    [128]byte
		vmArr     [256]byte
		sharedArr [4]sharedAt
	)
	shared := sharedArr[:0]
	vm := append(vmArr[:0], domain...)
	cur := root
	var found *cnode
	for i, e := range d.Entries {
		kv := append(st.buf(keyArr[:], len(e.Key)+1+len(e.Value)), e.Key...)
		kv = append(kv, '_')
		kv = append(kv, e.Value...)
		next := cur.children[string(kv)]
		wild := false
		if next == nil {
			for j := range cur.wild {
				if st.budget < int64(len(kv)) {
					break
				}
				st.budget -= int64(len(kv)) + 1
				if cur.wild[j].match(kv) {
					next, wild = cur.wild[j].node, true
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = cur.children[e.Key]
		}
		vm = append(vm, '.')
		vm = append(vm, e.Key...)
		if next != nil {
			var use string
			switch {
			case wild && next.share:
				use = trimKey(next.key, e.Key)
				shared = append(shared, sharedAt{i, use})
			case wild && next.v2m:
				use = e.Value
			case wild:
				use = trimKey(next.key, e.Key)
			case byValue || next.v2m:
				use = e.Value
			}
			if use != "" {
				vm = append(vm, '_')
				vm = append(vm, use...)
			}
		}
		if next != nil && next.limit != nil && i == len(d.Entries)-1 {
			found = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	if found == nil {
		return nil
	}
	l := found.limit
	var key string
	switch {
	case l.DetailedMetric && len(shared) > 0:
		key = shareKey(domain, d.Entries, shared)
	case l.DetailedMetric:
		key = detailedKey(domain, d.Entries)
	case len(shared) == 0 && string(vm) == l.StatsKey:
		return l
	case string(vm) == l.StatsKey:
		key = l.StatsKey
	default:
		key = string(vm)
	}
	out := *l
	out.StatsKey = key
	if len(shared) > 0 {
		out.share = make([]string, len(d.Entries))
		for _, s := range shared {
			out.share[s.at] = s.pattern
		}
	}
	return &out
}

// sharedAt is the share_threshold pattern an entry matched.
type sharedAt struct {
	at      int // the entry's index
	pattern string
}

// trimKey is a matched pattern's value part: the pattern without the
// request entry's key and "_" (as the reference's strings.TrimPrefix, so a
// pattern that does not start with them, which a '*' in the key can match,
// stays whole).
func trimKey(pattern, key string) string {
	if len(pattern) > len(key) && pattern[len(key)] == '_' && pattern[:len(key)] == key {
		return pattern[len(key)+1:]
	}
	return pattern
}

// detailedKey is the reference's detailed_metric key: every entry as
// key_value, even with an empty value.
func detailedKey(domain string, entries []Entry) string {
	var b strings.Builder
	n := len(domain)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	b.Grow(n)
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	return b.String()
}

// shareKey is the reference's detailed_metric key when share_threshold
// patterns were matched: those patterns in place of their values, and no
// "_" after a key with an empty value.
func shareKey(domain string, entries []Entry, shared []sharedAt) string {
	var b strings.Builder
	n := len(domain)
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 2
	}
	for _, s := range shared {
		n += len(s.pattern)
	}
	b.Grow(n)
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		v := e.Value
		for _, s := range shared {
			if s.at == i {
				v = s.pattern
			}
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// descriptorKey is the reference's key of an override: the domain, a dot,
// and the entries as key or key_value joined with dots.
func descriptorKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	start := b.Len()
	for _, e := range entries {
		// As the reference, a dot only once the key so far is not empty.
		if b.Len() > start {
			b.WriteByte('.')
		}
		b.WriteString(compositeKey(e.Key, e.Value))
	}
	return b.String()
}
