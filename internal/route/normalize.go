package route

// Request-target normalization exists so that no spelling of a request that a
// backend routes to an endpoint can dodge that endpoint's policy. Backends
// differ in what they decode, strip or fold, so the canonical form is the
// union of their leniencies: whenever some backend would treat two targets as
// the same endpoint, both normalize to the same path. Over-matching costs a
// client a little quota; under-matching is a bypass.
//
// Percent-decoding runs to a fixed point in one linear pass (a decoded byte
// that completes a new escape is decoded again), so no depth of nested
// encoding (%252e, %25252e, …) survives, there is no round limit to exceed,
// and the result contains no escape at all, which makes normalization
// idempotent.

import "strings"

// Target is a normalized request target.
type Target struct {
	// Path is the canonical path (see NormalizePath).
	Path string
	// Query holds every value of every query parameter, decoded, keyed by the
	// decoded parameter name in ASCII lower case without a trailing "[]".
	Query map[string][]string
}

// NormalizeTarget normalizes a raw request target as received by a server
// (origin form "/p?q", or absolute form "https://host/p?q"). It never fails
// and always returns a path starting with "/".
//
// It drops any "#fragment", strips a scheme and authority, splits at the first
// '?', normalizes the path with NormalizePath, and parses the query with
// all-values semantics: pairs split on '&' (and, for backends that also split
// on ';', a pair containing ';' is recorded both whole and split), '+' is a
// space, keys and values are percent-decoded to a fixed point, keys are
// lower-cased and lose trailing "[]" (PHP/Rails arrays).
func NormalizeTarget(raw string) Target {
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	raw = stripSchemeAuthority(raw)
	p, q, _ := strings.Cut(raw, "?")
	tally(2*len(raw) + 2)
	return Target{Path: NormalizePath(p), Query: parseQuery(q)}
}

// stripSchemeAuthority turns an absolute-form target ("http://host:80/p?q")
// into its path and query: servers route it by its path.
func stripSchemeAuthority(raw string) string {
	if raw == "" || raw[0] == '/' {
		return raw
	}
	i := 0
	for i < len(raw) && (isAlnum(raw[i]) || raw[i] == '+' || raw[i] == '-' || raw[i] == '.') {
		i++
	}
	tally(i + 1)
	if i == 0 || !isAlpha(raw[0]) || !strings.HasPrefix(raw[i:], "://") {
		return raw
	}
	rest := raw[i+3:]
	tally(len(rest))
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		return rest[j:]
	}
	return "/"
}

// NormalizePath returns the canonical form of a URL path: percent-decoded to
// a fixed point (an invalid escape is kept literally), '\' read as '/',
// ";params" stripped from every segment (Tomcat-style matrix parameters),
// duplicate slashes collapsed, "." and ".." resolved (never above the root),
// the trailing slash dropped, final ".ext" format suffixes stripped from the
// last segment (ext of 1–8 ASCII letters or digits after a non-empty name, so
// "/api/example.json" and "/api/example%2ejson" give "/api/example"), and
// ASCII lower-cased. The result starts with "/" and NormalizePath(result) ==
// result. A path already canonical is returned without allocating.
func NormalizePath(p string) string {
	if isCanonicalPath(p) {
		return p
	}
	return normalizePathSlow(p)
}

// normalizePathSlow is NormalizePath without the canonical fast path.
func normalizePathSlow(p string) string { return canonicalPath(p, true) }

// canonicalPath is NormalizePath, with the format-suffix step optional:
// pattern compilation normalizes literal runs that may not end the path.
func canonicalPath(p string, stripExt bool) string {
	var scratch [256]byte
	dec := scratch[:0]
	if len(p) > len(scratch) {
		dec = make([]byte, 0, len(p)) // decoding never lengthens
	}
	dec = appendDecoded(dec, p, false)
	out := make([]byte, 0, len(dec)+1)
	out = appendSegments(out, dec)
	if stripExt {
		out = stripExtensions(out)
	}
	if len(out) == 0 {
		return "/"
	}
	tally(len(out))
	return string(out)
}

// appendSegments appends the canonical segments of the decoded path dec, each
// preceded by '/', lower-cased, with dot segments resolved within what it
// appends.
func appendSegments(out, dec []byte) []byte {
	base := len(out)
	for len(dec) > 0 {
		j, semi := 0, -1
		for ; j < len(dec); j++ {
			c := dec[j]
			if c == '/' || c == '\\' {
				break
			}
			if c == ';' && semi < 0 {
				semi = j
			}
		}
		seg := dec[:j]
		if semi >= 0 {
			seg = dec[:semi]
		}
		tally(j + 1)
		if j < len(dec) {
			dec = dec[j+1:]
		} else {
			dec = nil
		}
		switch {
		case len(seg) == 0 || len(seg) == 1 && seg[0] == '.':
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			k := len(out) - 1
			for k >= base && out[k] != '/' {
				k--
			}
			tally(len(out) - k)
			out = out[:max(k, base)]
		default:
			out = append(out, '/')
			tally(2 * len(seg))
			n := len(out)
			out = append(out, seg...)
			for k := n; k < len(out); k++ {
				if c := out[k]; 'A' <= c && c <= 'Z' {
					out[k] = c + ('a' - 'A')
				}
			}
		}
	}
	return out
}

// stripExtensions removes format suffixes from the last segment of a
// canonical path, repeatedly (so "/a.tar.gz" is "/a" and stays so). Each
// round reads only the suffix it strips and the three bytes before it (at
// most 13 bytes when it strips nothing), so the work is linear in the path
// however many suffixes it has.
func stripExtensions(out []byte) []byte {
	end := len(out)
	for {
		n := extLen(out, end)
		if n == 0 {
			break
		}
		end -= n
	}
	tally(len(out) - end + 13)
	return out[:end]
}

// extLen returns the length of the strippable ".ext" that ends p[:end], or
// 0: 1–8 ASCII letters or digits after a dot, in the last segment. The name
// before the dot must not be empty, "." or "..", so stripping never creates
// a dot segment; telling so takes the three bytes before the dot, not a
// scan back to the segment's start.
func extLen[T string | []byte](p T, end int) int {
	i := end - 1
	for i >= 0 && end-i <= 9 && isAlnum(p[i]) {
		i--
	}
	if i < 0 || i == end-1 || end-i > 9 || p[i] != '.' {
		return 0
	}
	if segStart(p, i) || p[i-1] == '.' && (segStart(p, i-1) || p[i-2] == '.' && segStart(p, i-2)) {
		return 0
	}
	return end - i
}

// segStart reports whether p[k] starts a path segment.
func segStart[T string | []byte](p T, k int) bool { return k == 0 || p[k-1] == '/' }

// isCanonicalPath reports whether NormalizePath(p) == p, cheaply, so that
// already-canonical paths (and compiled patterns) cost no allocation.
func isCanonicalPath(p string) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
	tally(len(p))
	if p[len(p)-1] == '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) {
			c := p[i]
			switch {
			case c == '\\' || c == ';' || 'A' <= c && c <= 'Z':
				return false
			case c == '%':
				if i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
					return false
				}
			}
			if c != '/' {
				continue
			}
		}
		seg := p[segStart:i]
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		segStart = i + 1
	}
	return extLen(p, len(p)) == 0
}

// appendDecoded appends s percent-decoded to a fixed point. Each output byte
// is pushed and, while the output ends in a valid "%XX", that escape is
// replaced by its byte, which may complete an earlier '%' in turn. The output
// never contains a valid escape, and the work is linear in len(s). With plus,
// a literal '+' in s is a space (query components); a '+' produced by
// decoding stays a '+', as in every single-pass decoder.
func appendDecoded(out []byte, s string, plus bool) []byte {
	tally(2 * len(s))
	for i := 0; i < len(s); i++ {
		// With no '%' among the output's last two bytes, the bytes up to
		// the next '%' (or '+') cannot complete an escape: copy them at once.
		if n := len(out); (n < 1 || out[n-1] != '%') && (n < 2 || out[n-2] != '%') {
			j := i
			for j < len(s) && s[j] != '%' && (!plus || s[j] != '+') {
				j++
			}
			out = append(out, s[i:j]...)
			if i = j; i == len(s) {
				break
			}
		}
		c := s[i]
		if plus && c == '+' {
			c = ' '
		}
		out = append(out, c)
		for n := len(out); n >= 3 && out[n-3] == '%' && isHex(out[n-2]) && isHex(out[n-1]); n = len(out) {
			out[n-3] = unhex(out[n-2])<<4 | unhex(out[n-1])
			out = out[:n-2]
			tally(3)
		}
	}
	return out
}

// decodeComponent decodes a query key or value, without allocating when
// there is nothing to decode.
func decodeComponent(s string) string {
	tally(2 * len(s))
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	var scratch [128]byte
	tally(len(s))
	return string(appendDecoded(scratch[:0], s, true))
}

func parseQuery(q string) map[string][]string {
	if q == "" {
		return nil
	}
	b := queryBuilder{m: make(map[string][]string)}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		tally(2*len(pair) + 1)
		b.add(pair)
		if strings.IndexByte(pair, ';') >= 0 {
			tally(len(pair))
			for sub := range strings.SplitSeq(pair, ";") {
				b.add(sub)
			}
		}
	}
	if len(b.m) == 0 {
		return nil
	}
	return b.m
}

// queryBuilder collects a query's values by key. The first value of each
// key is cut from a shared array, so that a query of many distinct keys
// costs a few allocations, not one per key.
type queryBuilder struct {
	m     map[string][]string
	spare []string
}

func (b *queryBuilder) add(pair string) {
	if pair == "" {
		return
	}
	k, v, _ := strings.Cut(pair, "=")
	tally(len(pair) + 1)
	key := normalizeQueryKey(decodeComponent(k))
	if key == "" {
		return
	}
	// Hashing the key twice, copying it, and appending (amortized).
	tally(3*len(key) + 1)
	val := decodeComponent(v)
	if vals, ok := b.m[key]; ok {
		b.m[key] = append(vals, val)
		return
	}
	if len(b.spare) == cap(b.spare) {
		b.spare = make([]string, 0, min(2*cap(b.spare)+4, 256))
	}
	n := len(b.spare)
	b.spare = append(b.spare, val)
	b.m[key] = b.spare[n : n+1 : n+1]
}

// normalizeQueryKey lower-cases a decoded key and strips trailing "[]"
// (PHP and Rails read "mode[]=heavy" as a mode parameter).
func normalizeQueryKey(k string) string {
	for strings.HasSuffix(k, "[]") {
		k = k[:len(k)-2]
		tally(2)
	}
	return lowerASCIIString(k)
}

// lowerASCIIString lower-cases ASCII letters only (no Unicode folding, which
// could merge distinct keys), allocating only when something changes.
func lowerASCIIString(s string) string {
	tally(2*len(s) + 1)
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = lowerASCII(b[j])
			}
			return string(b)
		}
	}
	return s
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

func isAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isAlnum(c byte) bool { return isAlpha(c) || '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// work, when not nil, counts the bytes that normalization and policy
// matching examine (a map lookup counts its key's length), as an upper
// bound. Only TestWorkIsLinear sets it. A package variable rather than a
// parameter keeps the hot path's cost to one predictable branch per pass.
var work *int

// tally adds n steps to work.
func tally(n int) {
	if work != nil {
		*work += n
	}
}
