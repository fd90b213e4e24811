package route

// The normalization as it was before it was made linear, kept to check that
// the linear code gives the same results (TestNormalizeMatchesOld). Its
// stripExtensions rescans the last segment for every suffix it strips.

import "strings"

// oldNormalizeTarget normalizes a raw request target as received by a server
// (origin form "/p?q", or absolute form "https://host/p?q"). It never fails
// and always returns a path starting with "/".
//
// It drops any "#fragment", strips a scheme and authority, splits at the first
// '?', normalizes the path with oldNormalizePath, and parses the query with
// all-values semantics: pairs split on '&' (and, for backends that also split
// on ';', a pair containing ';' is recorded both whole and split), '+' is a
// space, keys and values are percent-decoded to a fixed point, keys are
// lower-cased and lose trailing "[]" (PHP/Rails arrays).
func oldNormalizeTarget(raw string) Target {
	if i := strings.IndexByte(raw, '#'); i >= 0 {
		raw = raw[:i]
	}
	raw = oldStripSchemeAuthority(raw)
	p, q, _ := strings.Cut(raw, "?")
	return Target{Path: oldNormalizePath(p), Query: oldParseQuery(q)}
}

// oldStripSchemeAuthority turns an absolute-form target ("http://host:80/p?q")
// into its path and query: servers route it by its path.
func oldStripSchemeAuthority(raw string) string {
	if raw == "" || raw[0] == '/' {
		return raw
	}
	i := 0
	for i < len(raw) && (isAlnum(raw[i]) || raw[i] == '+' || raw[i] == '-' || raw[i] == '.') {
		i++
	}
	if i == 0 || !isAlpha(raw[0]) || !strings.HasPrefix(raw[i:], "://") {
		return raw
	}
	rest := raw[i+3:]
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		return rest[j:]
	}
	return "/"
}

// oldNormalizePath returns the canonical form of a URL path: percent-decoded to
// a fixed point (an invalid escape is kept literally), '\' read as '/',
// ";params" stripped from every segment (Tomcat-style matrix parameters),
// duplicate slashes collapsed, "." and ".." resolved (never above the root),
// the trailing slash dropped, final ".ext" format suffixes stripped from the
// last segment (ext of 1–8 ASCII letters or digits after a non-empty name, so
// "/api/example.json" and "/api/example%2ejson" give "/api/example"), and
// ASCII lower-cased. The result starts with "/" and oldNormalizePath(result) ==
// result. A path already canonical is returned without allocating.
func oldNormalizePath(p string) string {
	if oldIsCanonicalPath(p) {
		return p
	}
	return oldNormalizePathSlow(p)
}

// oldNormalizePathSlow is oldNormalizePath without the canonical fast path.
func oldNormalizePathSlow(p string) string { return oldCanonicalPath(p, true) }

// oldCanonicalPath is oldNormalizePath, with the format-suffix step optional:
// pattern compilation normalizes literal runs that may not end the path.
func oldCanonicalPath(p string, stripExt bool) string {
	var scratch [256]byte
	dec := oldAppendDecoded(scratch[:0], p, false)
	out := make([]byte, 0, len(dec)+1)
	out = oldAppendSegments(out, dec)
	if stripExt {
		out = oldStripExtensions(out)
	}
	if len(out) == 0 {
		return "/"
	}
	return string(out)
}

// oldAppendSegments appends the canonical segments of the decoded path dec, each
// preceded by '/', lower-cased, with dot segments resolved within what it
// appends.
func oldAppendSegments(out, dec []byte) []byte {
	base := len(out)
	for len(dec) > 0 {
		j := 0
		for j < len(dec) && dec[j] != '/' && dec[j] != '\\' {
			j++
		}
		seg := dec[:j]
		if j < len(dec) {
			dec = dec[j+1:]
		} else {
			dec = nil
		}
		for k, c := range seg {
			if c == ';' {
				seg = seg[:k]
				break
			}
		}
		switch {
		case len(seg) == 0 || len(seg) == 1 && seg[0] == '.':
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			k := len(out) - 1
			for k >= base && out[k] != '/' {
				k--
			}
			out = out[:max(k, base)]
		default:
			out = append(out, '/')
			for _, c := range seg {
				out = append(out, lowerASCII(c))
			}
		}
	}
	return out
}

// oldStripExtensions removes format suffixes from the last segment of a
// canonical path, repeatedly (so "/a.tar.gz" is "/a" and stays so).
func oldStripExtensions(out []byte) []byte {
	for {
		n := oldExtLen(out)
		if n == 0 {
			return out
		}
		out = out[:len(out)-n]
	}
}

// oldExtLen returns the length of the strippable ".ext" at the end of the last
// segment of p, or 0. The name before the dot must be non-empty and not "."
// or "..", so stripping never creates a dot segment.
func oldExtLen[T string | []byte](p T) int {
	n := 0
	for i := len(p) - 1; i >= 0; i-- {
		c := p[i]
		switch {
		case c == '.':
			name := p[:i]
			j := len(name) - 1
			for j >= 0 && name[j] != '/' {
				j--
			}
			name = name[j+1:]
			if n == 0 || n > 8 || len(name) == 0 || string(name) == "." || string(name) == ".." {
				return 0
			}
			return n + 1
		case isAlnum(c):
			n++
			if n > 8 {
				return 0
			}
		default:
			return 0
		}
	}
	return 0
}

// oldIsCanonicalPath reports whether oldNormalizePath(p) == p, cheaply, so that
// already-canonical paths (and compiled patterns) cost no allocation.
func oldIsCanonicalPath(p string) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) == 1 {
		return true
	}
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
	return oldExtLen(p) == 0
}

// oldAppendDecoded appends s percent-decoded to a fixed point. Each output byte
// is pushed and, while the output ends in a valid "%XX", that escape is
// replaced by its byte, which may complete an earlier '%' in turn. The output
// never contains a valid escape, and the work is linear in len(s). With plus,
// a literal '+' in s is a space (query components); a '+' produced by
// decoding stays a '+', as in every single-pass decoder.
func oldAppendDecoded(out []byte, s string, plus bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plus && c == '+' {
			c = ' '
		}
		out = append(out, c)
		for n := len(out); n >= 3 && out[n-3] == '%' && isHex(out[n-2]) && isHex(out[n-1]); n = len(out) {
			out[n-3] = unhex(out[n-2])<<4 | unhex(out[n-1])
			out = out[:n-2]
		}
	}
	return out
}

// oldDecodeComponent decodes a query key or value, without allocating when
// there is nothing to decode.
func oldDecodeComponent(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	var scratch [128]byte
	return string(oldAppendDecoded(scratch[:0], s, true))
}

func oldParseQuery(q string) map[string][]string {
	if q == "" {
		return nil
	}
	m := make(map[string][]string)
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		oldAddPair(m, pair)
		if strings.IndexByte(pair, ';') >= 0 {
			for sub := range strings.SplitSeq(pair, ";") {
				oldAddPair(m, sub)
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func oldAddPair(m map[string][]string, pair string) {
	if pair == "" {
		return
	}
	k, v, _ := strings.Cut(pair, "=")
	key := oldNormalizeQueryKey(oldDecodeComponent(k))
	if key == "" {
		return
	}
	m[key] = append(m[key], oldDecodeComponent(v))
}

// oldNormalizeQueryKey lower-cases a decoded key and strips trailing "[]"
// (PHP and Rails read "mode[]=heavy" as a mode parameter).
func oldNormalizeQueryKey(k string) string {
	for strings.HasSuffix(k, "[]") {
		k = k[:len(k)-2]
	}
	return oldLowerASCIIString(k)
}

// oldLowerASCIIString lower-cases ASCII letters only (no Unicode folding, which
// could merge distinct keys), allocating only when something changes.
func oldLowerASCIIString(s string) string {
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
