package route

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// maxTarget is the longest target a check accepts (engine.CheckRequest's
// path, docs/API.md).
const maxTarget = 8192

// fill returns prefix followed by as many copies of unit as fit in n bytes,
// then suffix.
func fill(prefix, unit, suffix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len()+len(unit)+len(suffix) <= n {
		b.WriteString(unit)
	}
	b.WriteString(suffix)
	return b.String()
}

type shape struct {
	name string
	// canonical is the reference this shape is compared with: "path" or
	// "query" (see canonicalTarget).
	canonical string
	target    func(n int) string
}

// canonicalTarget returns an ordinary, already canonical target of n
// bytes: a path of plain segments, or a short path and a query of plain
// parameters. Each adversarial shape is compared with the one of its kind.
func canonicalTarget(kind string, n int) string {
	if kind == "query" {
		return fill("/api/search?", "page=2&sort=name&", "q=x", n)
	}
	return fill("/api/v1", "/items", "", n)
}

// shapes are the targets an outsider can send that do the most work per
// byte in each step of normalization and matching.
var shapes = []shape{
	{"suffixes", "path", func(n int) string { return fill("/x", ".a", "", n) }},
	{"long-suffixes", "path", func(n int) string { return fill("/x", ".abcdefgh", "", n) }},
	{"almost-suffixes", "path", func(n int) string { return fill("/x", ".abcdefghi", "", n) }},
	{"suffix-segments", "path", func(n int) string { return fill("", "/x.a", "", n) }},
	{"dot-segments", "path", func(n int) string { return fill("", "/.", "", n) }},
	{"dot-dot-segments", "path", func(n int) string { return fill("/a", "/a/..", "", n) }},
	{"dot-dot-above-root", "path", func(n int) string { return fill("", "/..", "", n) }},
	{"deep-then-up", "path", func(n int) string {
		return fill("", "/a", "", n/2) + fill("", "/..", "", n-n/2)
	}},
	{"slashes", "path", func(n int) string { return fill("", "/", "", n) }},
	{"backslashes", "path", func(n int) string { return fill("", "\\", "", n) }},
	{"matrix-params", "path", func(n int) string { return fill("", "/a;b", "", n) }},
	{"upper-case", "path", func(n int) string { return fill("", "/ITEMS", "", n) }},
	{"escapes", "path", func(n int) string { return fill("/", "%2e", "", n) }},
	{"escaped-letters", "path", func(n int) string { return fill("/", "%41", "", n) }},
	{"nested-escape", "path", func(n int) string { return fill("/%", "25", "2e", n) }},
	{"nested-escapes", "path", func(n int) string { return fill("/", "%%32e", "", n) }},
	{"invalid-escapes", "path", func(n int) string { return fill("/", "%", "", n) }},
	{"short-escapes", "path", func(n int) string { return fill("/", "%2", "", n) }},
	{"absolute-form", "path", func(n int) string { return fill("http://", "a", "/x", n) }},
	{"params", "query", func(n int) string { return fill("/api/search?", "a&", "", n) }},
	{"repeated-param", "query", func(n int) string { return fill("/api/search?", "mode=a&", "", n) }},
	{"distinct-params", "query", func(n int) string {
		var b strings.Builder
		b.WriteString("/api/search?")
		for i := 0; ; i++ {
			p := fmt.Sprintf("%x&", i)
			if b.Len()+len(p) > n {
				return b.String()
			}
			b.WriteString(p)
		}
	}},
	{"semicolon-pairs", "query", func(n int) string { return fill("/api/search?", "a=1;", "", n) }},
	{"array-key", "query", func(n int) string { return fill("/api/search?mode", "[]", "=a", n) }},
	{"escaped-params", "query", func(n int) string { return fill("/api/search?", "%4D=%41&", "", n) }},
	{"upper-case-params", "query", func(n int) string { return fill("/api/search?", "MODE=HEAVY&", "", n) }},
	{"method-override", "query", func(n int) string { return fill("/api/search?", "_method=GET&", "", n) }},
}

// benchRouter is a tenant's policy set of the usual size: literal and
// parameter paths, wildcards, query conditions and a method override.
func benchRouter(tb testing.TB) *Router {
	var ps []Pattern
	add := func(method, path string, q map[string]string) {
		p, err := CompilePattern(method, path, q)
		if err != nil {
			tb.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i := range 20 {
		add("GET", fmt.Sprintf("/api/v1/resource%d/:id", i), nil)
	}
	add("*", "/*", nil)
	add("GET", "/api/*", nil)
	add("GET", "/:a/:b/:c/*", nil)
	add("POST", "/api/search", nil)
	add("DELETE", "/api/search", nil)
	add("GET", "/api/search", map[string]string{"mode": "heavy"})
	add("GET", "/api/search", map[string]string{"mode": "light"})
	add("GET", "/api/search", map[string]string{"mode": "heavy", "sort": "name"})
	add("GET", "/x", map[string]string{"a": "1"})
	return NewRouter(ps)
}

// BenchmarkAdversarialTargets normalizes and matches each adversarial
// shape at the longest target a check accepts, next to the canonical
// target of the same kind and length (the "canonical-*" lines).
func BenchmarkAdversarialTargets(b *testing.B) {
	r := benchRouter(b)
	run := func(name, target string) {
		b.Run(fmt.Sprintf("%s/len=%d", name, len(target)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t := NormalizeTarget(target)
				r.Match("POST", &t)
			}
		})
	}
	run("canonical-path", canonicalTarget("path", maxTarget))
	run("canonical-query", canonicalTarget("query", maxTarget))
	for _, s := range shapes {
		run(s.name, s.target(maxTarget))
	}
}

// measure returns the steps f takes, as the work hook counts them.
func measure(f func()) int {
	var w int
	work = &w
	defer func() { work = nil }()
	f()
	return w
}

// stepsPerByte bounds the work of normalizing and matching a target: no
// shape of target costs more steps per byte than this, at any length.
const stepsPerByte = 32

// Normalization and matching are linear in the target whatever its shape:
// the steps counted for every shape stay within stepsPerByte of its length,
// and quadrupling the length multiplies them by at most 4.5 (not exactly 4:
// some shapes change a little with the length, such as distinct-params,
// whose keys grow a digit; quadratic work would multiply them by 16).
// Counting steps, not time, makes the test exact on any machine.
func TestWorkIsLinear(t *testing.T) {
	r := benchRouter(t)
	all := append([]shape{
		{"canonical-path", "", func(n int) string { return canonicalTarget("path", n) }},
		{"canonical-query", "", func(n int) string { return canonicalTarget("query", n) }},
	}, shapes...)
	for _, s := range all {
		steps := func(n int) int {
			target := s.target(n)
			return measure(func() {
				tg := NormalizeTarget(target)
				r.Match("POST", &tg)
				r.Match("GET", &tg)
			})
		}
		for _, n := range []int{maxTarget / 4, maxTarget} {
			if w := steps(n); w > stepsPerByte*n {
				t.Errorf("%s: %d steps for %d bytes, more than %d per byte", s.name, w, n, stepsPerByte)
			}
		}
		small, large := steps(maxTarget/4), steps(maxTarget)
		if 2*large > 9*small {
			t.Errorf("%s: %d steps at %d bytes, %d at %d: the work grows faster than the target", s.name, small, maxTarget/4, large, maxTarget)
		}
	}
}

// randomTarget builds a target from the pieces that make normalization
// work hardest, so that long runs of any of them are likely.
func randomTarget(r *rand.Rand, n int) string {
	pieces := []string{"/", "\\", ".", "..", "a", "B", "x.", ".json", ".a", "%", "%2", "%2e", "%25", "%32", "e", ";", "?", "&", "=", "[]", "+", "#", "http://h", ":", "_method=get&", "mode=heavy&", "\xff", "é"}
	var b strings.Builder
	for b.Len() < n {
		p := pieces[r.Intn(len(pieces))]
		for range 1 + r.Intn(4)*r.Intn(20) {
			b.WriteString(p)
		}
	}
	return b.String()
}

// The linear normalization gives what the quadratic one gave, on random
// targets built from the costly pieces and on every adversarial shape, and
// its work stays within stepsPerByte of the target's length.
func TestNormalizeMatchesOld(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	var targets []string
	for _, s := range shapes {
		targets = append(targets, s.target(1024))
	}
	for range 20000 {
		targets = append(targets, randomTarget(r, r.Intn(200)))
	}
	for _, raw := range targets {
		var got Target
		w := measure(func() { got = NormalizeTarget(raw) })
		want := oldNormalizeTarget(raw)
		if got.Path != want.Path || !maps.EqualFunc(got.Query, want.Query, slices.Equal) {
			t.Fatalf("%s: %q %q, before %q %q", short(raw), got.Path, got.Query, want.Path, want.Query)
		}
		if w > stepsPerByte*len(raw)+64 {
			t.Fatalf("%s: %d steps for %d bytes", short(raw), w, len(raw))
		}
		if p := got.Path; isCanonicalPath(p) != oldIsCanonicalPath(p) || NormalizePath(raw) != oldNormalizePath(raw) {
			t.Fatalf("%s: canonical test differs", short(raw))
		}
		seg := "/" + strings.TrimLeft(raw, "/")
		if a, b := string(stripExtensions([]byte(seg))), string(oldStripExtensions([]byte(seg))); a != b {
			t.Fatalf("stripExtensions(%s) = %s, before %s", short(seg), short(a), short(b))
		}
	}
}

func FuzzNormalizeMatchesOld(f *testing.F) {
	for _, s := range bypasses {
		f.Add(s)
	}
	f.Add("/x.a.b.c.d")
	f.Add("/..json.a")
	f.Fuzz(func(t *testing.T, raw string) {
		got, want := NormalizeTarget(raw), oldNormalizeTarget(raw)
		if got.Path != want.Path || !maps.EqualFunc(got.Query, want.Query, slices.Equal) {
			t.Fatalf("%q: %q %q, before %q %q", raw, got.Path, got.Query, want.Path, want.Query)
		}
	})
}

// short quotes s, cut to its first 60 bytes.
func short(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%q… (%d bytes)", s[:60], len(s))
	}
	return fmt.Sprintf("%q", s)
}
