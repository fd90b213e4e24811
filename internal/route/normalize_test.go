package route

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// Every spelling below reaches the heavy action of /api/example on some
// backend (seed 003 and friends), so each must normalize to /api/example with
// "heavy" among the mode values, and match the heavy policy.
var bypasses = []string{
	"/api/example?mode=heavy",
	"/api/example.json?mode=heavy",
	"/api/example.JSON?mode=heavy",
	"/api/example.xml?mode=heavy",
	"/api/example/?mode=heavy",
	"/api/example.json/?mode=heavy",
	"/api/example%2ejson?mode=heavy",
	"/api/example%2Ejson?mode=heavy",
	"/api/example%252ejson?mode=heavy",
	"/api/example%25252ejson?mode=heavy",
	"/api/example%25%32%65json?mode=heavy",
	"/api//example?mode=heavy",
	"//api///example//?mode=heavy",
	"/api/./example?mode=heavy",
	"/api/%2e/example?mode=heavy",
	"/api/x/../example?mode=heavy",
	"/api/x/%2e%2e/example?mode=heavy",
	"/api/x/%2E%2E/example?mode=heavy",
	"/../../api/example?mode=heavy",
	"/api/example/.?mode=heavy",
	"/api/example/x/..?mode=heavy",
	"/%61pi/example?mode=heavy",
	"/%41PI/%45xample?mode=heavy",
	"/API/EXAMPLE?mode=heavy",
	"/api%2fexample?mode=heavy",
	"/api%2Fexample?mode=heavy",
	"/api\\example?mode=heavy",
	"/api%5cexample?mode=heavy",
	"/api/example;jsessionid=ABC?mode=heavy",
	"/api;x=1/example?mode=heavy",
	"/api/example.json;v=2?mode=heavy",
	"/api/x/..;/example?mode=heavy",
	"/api/example%3bjsessionid=1?mode=heavy",
	"/api/example?mode=normal&mode=heavy",
	"/api/example?mode=heavy&mode=normal",
	"/api/example?mode[]=normal&mode[]=heavy",
	"/api/example?MODE=heavy",
	"/api/example?Mode=HEAVY",
	"/api/example?mode=%68eavy",
	"/api/example?mode=h%2565avy",
	"/api/example?%6dode=heavy",
	"/api/example?mode=normal;mode=heavy",
	"/api/example?a=1&&mode=heavy&",
	"/api/example?mode=heavy#section",
	"http://example.com/api/example?mode=heavy",
	"HTTPS://example.com:8443/api/example.json?mode=heavy",
	"api/example?mode=heavy",
}

func TestNormalizeBypasses(t *testing.T) {
	heavy, err := CompilePattern("GET", "/api/example", map[string]string{"mode": "heavy"})
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range bypasses {
		tg := NormalizeTarget(raw)
		if tg.Path != "/api/example" {
			t.Errorf("%q: path %q", raw, tg.Path)
			continue
		}
		if !slices.ContainsFunc(tg.Query["mode"], func(v string) bool { return strings.EqualFold(v, "heavy") }) {
			t.Errorf("%q: mode values %q", raw, tg.Query["mode"])
		}
		if !heavy.Match("GET", &tg) {
			t.Errorf("%q: heavy policy does not match", raw)
		}
	}
}

func TestNormalizeNotOverbroad(t *testing.T) {
	heavy, _ := CompilePattern("GET", "/api/example", map[string]string{"mode": "heavy"})
	for _, raw := range []string{
		"/api/example",
		"/api/example?mode=normal",
		"/api/example?mode=heavyx",
		"/api/example?modes=heavy",
		"/api/examples?mode=heavy",
		"/api/example/sub?mode=heavy",
		"/api/exam/ple?mode=heavy",
		"/api?mode=heavy",
		"/api/example?x=mode%3Dheavy",
		"/api/example?mode=normal%26mode%3Dheavy",
		"/api/example#?mode=heavy",
	} {
		tg := NormalizeTarget(raw)
		if heavy.Match("GET", &tg) {
			t.Errorf("%q matched the heavy policy (%q %v)", raw, tg.Path, tg.Query)
		}
	}
}

func TestNormalizePath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"//", "/"},
		{"/..", "/"},
		{"/../..", "/"},
		{"/./.", "/"},
		{"/a/b/../../..", "/"},
		{"/a.tar.gz", "/a"},              // repeatedly, so the result is stable
		{"/v1.2", "/v1"},                 // a price of stripping formats
		{"/a/v1.2/b", "/a/v1.2/b"},       // only the last segment
		{"/.json", "/.json"},             // nothing before the dot
		{"/..json", "/..json"},           // stripping would leave "."
		{"/...json", "/...json"},         // or ".."
		{"/x..json", "/x."},              // an empty extension stops
		{"/a.abcdefgh", "/a"},            // 8 characters
		{"/a.abcdefghi", "/a.abcdefghi"}, // 9 is not a format
		{"/a.j-s", "/a.j-s"},
		{"/%", "/%"},
		{"/%2", "/%2"},
		{"/%zz", "/%zz"},
		{"/x/%%32e%%32e/y", "/y"},            // a decoded '2' completes a new escape, "%2e"
		{"/x/%2%65%2%65/y", "/y"},            // a decoded 'e' too
		{"/%C3%A9T%C3%89", "/\u00e9t\u00c9"}, // non-ASCII bytes are not case-folded
		{"/a%00b", "/a\x00b"},
		{"/a b/", "/a b"},
		{"/a;b/c;d=e", "/a/c"},
		{"/;x/a", "/a"},
		{"/a/..;x/b", "/b"},
		{"\\a\\b", "/a/b"},
		{"/a?b", "/a?b"}, // a path alone has no query
	} {
		if got := NormalizePath(c.in); got != c.want {
			t.Errorf("NormalizePath(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := NormalizePath(c.want); got != c.want {
			t.Errorf("not idempotent: NormalizePath(%q) = %q", c.want, got)
		}
	}
}

func TestNormalizeTargetQuery(t *testing.T) {
	tg := NormalizeTarget("/x?a=1&a=2&B=x+y&c&d=&e[]=5&e=6&%26=%3D&f=a%2Bb&g=1;h=2&=empty")
	want := map[string][]string{
		"a": {"1", "2"},
		"b": {"x y"},
		"c": {""},
		"d": {""},
		"e": {"5", "6"},
		"&": {"="},
		"f": {"a+b"},
		"g": {"1;h=2", "1"},
		"h": {"2"},
	}
	if len(tg.Query) != len(want) {
		t.Fatalf("query %q", tg.Query)
	}
	for k, v := range want {
		if !slices.Equal(tg.Query[k], v) {
			t.Errorf("%q: %q, want %q", k, tg.Query[k], v)
		}
	}
	if q := NormalizeTarget("/x").Query; q != nil {
		t.Fatalf("no query: %v", q)
	}
	if q := NormalizeTarget("/x?&&").Query; q != nil {
		t.Fatalf("empty query: %v", q)
	}
}

func TestNormalizeTargetAbsoluteForm(t *testing.T) {
	for in, want := range map[string]string{
		"http://h":               "/",
		"http://h?x=1":           "/",
		"https://h:1/a/b":        "/a/b",
		"svn+ssh://h/a":          "/a",
		"a:b/c":                  "/a:b/c", // not absolute form
		"1http://h/a":            "/1http:/h/a",
		"*":                      "/*",
		"/http://h/a":            "/http:/h/a",
		"http://user@h:80/a?q#f": "/a",
	} {
		if got := NormalizeTarget(in).Path; got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestNormalizePathCanonicalNoAlloc(t *testing.T) {
	p := "/api/v1/example/items"
	if n := testing.AllocsPerRun(100, func() { NormalizePath(p) }); n != 0 {
		t.Fatalf("%v allocs for a canonical path", n)
	}
}

// checkCanonical asserts the normalization invariants on one input.
func checkCanonical(t *testing.T, raw string) {
	t.Helper()
	tg := NormalizeTarget(raw)
	p := tg.Path
	if !strings.HasPrefix(p, "/") {
		t.Fatalf("%q: path %q does not start with /", raw, p)
	}
	if got := NormalizePath(p); got != p {
		t.Fatalf("%q: not idempotent: %q -> %q", raw, p, got)
	}
	if got := normalizePathSlow(p); got != p {
		t.Fatalf("%q: canonical path %q renormalizes to %q", raw, p, got)
	}
	if !isCanonicalPath(p) {
		t.Fatalf("%q: result %q not recognized as canonical", raw, p)
	}
	// The fast path may only skip work the slow path would not do.
	if isCanonicalPath(raw) && normalizePathSlow(raw) != raw {
		t.Fatalf("%q: judged canonical but normalizes to %q", raw, normalizePathSlow(raw))
	}
	for k := range tg.Query {
		if k == "" || strings.HasSuffix(k, "[]") || lowerASCIIString(k) != k {
			t.Fatalf("%q: query key %q", raw, k)
		}
	}
}

func FuzzNormalizeTarget(f *testing.F) {
	for _, s := range bypasses {
		f.Add(s)
	}
	for _, s := range []string{"", "/", "%", "%%%", "%2", "/..;", "\\", "/a.b.c.d", "http://", "?", "#", "/%252525252e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		checkCanonical(t, raw)
	})
}

// upperASCII changes ASCII letters only (Unicode case mapping could change
// the bytes of other characters).
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func encodeAll(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte('%')
		b.WriteByte(hex[s[i]>>4])
		b.WriteByte(hex[s[i]&15])
	}
	return b.String()
}

// variants returns spellings of path p that every backend-lenient reading
// routes like p.
func variants(p string) []string {
	canon := NormalizePath(p)
	v := []string{
		p,
		encodeAll(p), // every byte escaped
		strings.ReplaceAll(encodeAll(p), "%", "%25"), // and again
		upperASCII(p),
		p + "/",
		p + "/.",
		p + "/x/..",
		p + "/x/%2e%2e",
		p + ";jsessionid=1",
		strings.ReplaceAll(p, "/", "//"),
		strings.ReplaceAll(p, "/", "/./"),
		strings.ReplaceAll(p, "/", "\\"),
		strings.ReplaceAll(p, "/", "%2f"),
		"http://example.com" + p,
		p + "#" + p,
	}
	// A canonical path may hold a decoded '?' or '#'; as a raw target that
	// would start a query or fragment, so it is only reused without them.
	if !strings.ContainsAny(canon, "?#") {
		v = append(v, canon)
		if canon != "/" {
			v = append(v, canon+".json", canon+"%2ejson", canon+".JSON/", canon+"%252Exml;a=b")
		}
	}
	return v
}

// Every variant built from a fuzzed segment lands on the same canonical path,
// and the query value survives all-values parsing.
func FuzzNormalizeVariants(f *testing.F) {
	for _, s := range []string{"example", "Ex%41mple", "a.json", "..", ".", "", "a/b", "%2e%2e", "a;b", "x.tar.gz", "%", "%%32e", "\x00", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		if strings.ContainsAny(seg, "?#") {
			return // these end the path part of a target; the query is tested below
		}
		p := "/api/" + seg
		want := NormalizePath(p)
		for _, v := range variants(p) {
			if got := NormalizeTarget(v).Path; got != want {
				t.Fatalf("segment %q: variant %q -> %q, want %q", seg, v, got, want)
			}
		}
		tg := NormalizeTarget("/api/example?mode=normal&mode=" + url.QueryEscape(seg) + "&mode[]=heavy")
		vals := tg.Query["mode"]
		decoded := string(appendDecoded(nil, seg, false))
		if !slices.Contains(vals, "heavy") || !slices.Contains(vals, "normal") || !slices.Contains(vals, decoded) {
			t.Fatalf("segment %q: mode values %q, want normal, heavy and %q", seg, vals, decoded)
		}
	})
}
