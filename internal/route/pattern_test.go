package route

import (
	"errors"
	"github.com/sluicehq/sluice/internal/quota"
	"math/rand"
	"strings"
	"testing"
)

func mustPattern(t testing.TB, method, path string, query map[string]string) Pattern {
	t.Helper()
	p, err := CompilePattern(method, path, query)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return p
}

func TestCompilePatternErrors(t *testing.T) {
	for _, c := range []struct {
		method, path string
		query        map[string]string
		field        string
	}{
		{"GE T", "/a", nil, "method"},
		{"GET/", "/a", nil, "method"},
		{strings.Repeat("A", 33), "/a", nil, "method"},
		{"GET", "", nil, "path"},
		{"GET", "api/x", nil, "path"},
		{"GET", "/api/example?mode=heavy", nil, "path"},
		{"GET", "/api/example#x", nil, "path"},
		{"GET", "/a/*/b", nil, "path"},
		{"GET", "/a/b*", nil, "path"},
		{"GET", "/a/:", nil, "path"},
		{"GET", "/a/:x-y", nil, "path"},
		{"GET", "/:id/:id", nil, "path"},
		{"GET", "/" + strings.Repeat("a", 2048), nil, "path"},
		{"GET", "/a", map[string]string{"": "x"}, "query"},
		{"GET", "/a", map[string]string{"[]": "x"}, "query"},
	} {
		_, err := CompilePattern(c.method, c.path, c.query)
		var fe *quota.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%q %q %v: got %v, want a %q error", c.method, c.path, c.query, err, c.field)
		}
	}
}

func TestPatternString(t *testing.T) {
	for _, c := range []struct {
		method, path string
		query        map[string]string
		want         string
	}{
		{"get", "/API/Example.json/", map[string]string{"Mode[]": "heavy", "a": "1"}, "GET /api/example?a=1&mode=heavy"},
		{"", "/", nil, "* /"},
		{"*", "/*", nil, "* /*"},
		{"POST", "/v1/:tenant/items/:id/*", nil, "POST /v1/:tenant/items/:id/*"},
		{"GET", "//a/./b/../c%2Fd/:x/e.json", nil, "GET /a/c/d/:x/e"},
		{"GET", "/a/%2e%2e/:x/../b", nil, "GET /:x/b"}, // dot segments resolve within literal runs
		{"GET", "/v1.2/:id", nil, "GET /v1.2/:id"},     // formats are stripped only at the end
		{"GET", "/files/report.pdf/*", nil, "GET /files/report.pdf/*"},
	} {
		p := mustPattern(t, c.method, c.path, c.query)
		if got := p.String(); got != c.want {
			t.Errorf("%q %q: %q, want %q", c.method, c.path, got, c.want)
		}
	}
	var zero Pattern
	tg := NormalizeTarget("/")
	if zero.Match("GET", &tg) {
		t.Fatal("the zero Pattern matched")
	}
}

func TestPatternMatch(t *testing.T) {
	for _, c := range []struct {
		method, path string
		query        map[string]string
		reqMethod    string
		target       string
		want         bool
	}{
		{"GET", "/api/example", nil, "GET", "/api/example", true},
		{"GET", "/api/example", nil, "get", "/API/example.json", true},
		{"GET", "/api/example", nil, "HEAD", "/api/example", true}, // HEAD runs the GET handler
		{"GET", "/api/example", nil, "", "/api/example", true},     // the API's default method
		{"GET", "/api/example", nil, "POST", "/api/example", false},
		{"DELETE", "/api/example", nil, "POST", "/api/example?_method=delete", true}, // method override
		{"DELETE", "/api/example", nil, "GET", "/api/example?_method=DELETE", false},
		{"HEAD", "/api/example", nil, "GET", "/api/example", false},
		{"*", "/api/example", nil, "PATCH", "/api/example", true},
		{"GET", "/api/:id", nil, "GET", "/api/42", true},
		{"GET", "/api/:id", nil, "GET", "/api", false},
		{"GET", "/api/:id", nil, "GET", "/api/42/x", false},
		{"GET", "/api/*", nil, "GET", "/api", true}, // zero segments
		{"GET", "/api/*", nil, "GET", "/api/a/b/c", true},
		{"GET", "/api/*", nil, "GET", "/apix", false},
		{"GET", "/*", nil, "GET", "/", true},
		{"GET", "/", nil, "GET", "/", true},
		{"GET", "/", nil, "GET", "/a", false},
		{"GET", "/files/report.pdf", nil, "GET", "/files/report.csv", true}, // both lose their format
		{"GET", "/api/example", map[string]string{"mode": "heavy"}, "GET", "/api/example?mode=light&mode=HEAVY", true},
		{"GET", "/api/example", map[string]string{"mode": "heavy"}, "GET", "/api/example", false},
		{"GET", "/api/example", map[string]string{"mode": "heavy", "v": "2"}, "GET", "/api/example?mode=heavy", false},
		{"GET", "/api/example", map[string]string{"mode": "heavy", "v": "2"}, "GET", "/api/example?v=2&mode=heavy", true},
		{"GET", "/api/example", map[string]string{"q": "a b"}, "GET", "/api/example?q=a+b", true},
		{"GET", "/api/example", map[string]string{"debug": ""}, "GET", "/api/example?debug", true},
	} {
		p := mustPattern(t, c.method, c.path, c.query)
		tg := NormalizeTarget(c.target)
		if got := p.Match(c.reqMethod, &tg); got != c.want {
			t.Errorf("%s %s %v vs %s %s: %v, want %v", c.method, c.path, c.query, c.reqMethod, c.target, got, c.want)
		}
	}
}

func TestRouterSpecificity(t *testing.T) {
	specs := []struct {
		method, path string
		query        map[string]string
	}{
		0:  {"*", "/*", nil},
		1:  {"GET", "/api/*", nil},
		2:  {"GET", "/api/:id", nil},
		3:  {"GET", "/api/example", nil},
		4:  {"GET", "/api/example", map[string]string{"mode": "heavy"}},
		5:  {"*", "/api/example", map[string]string{"mode": "heavy"}},
		6:  {"POST", "/api/example", nil},
		7:  {"GET", "/api/:id/items", nil},
		8:  {"GET", "/api/example/*", nil},
		9:  {"GET", "/api/example/items", nil},
		10: {"GET", "/api/example", nil}, // a duplicate of 3
		11: {"*", "/api/:id", map[string]string{"a": "1", "b": "2"}},
		12: {"GET", "/api/:id/*", nil},
	}
	var patterns []Pattern
	for _, s := range specs {
		patterns = append(patterns, mustPattern(t, s.method, s.path, s.query))
	}
	r := NewRouter(patterns)
	for _, c := range []struct {
		method, target string
		want           int
	}{
		{"GET", "/api/example?mode=heavy", 4},          // literal; a query constraint; a specific method
		{"GET", "/api/example", 3},                     // the lowest index among equals
		{"POST", "/api/example?mode=heavy", 5},         // more query constraints beat the method
		{"POST", "/api/example", 6},                    //
		{"GET", "/api/other", 2},                       // a parameter beats the wildcard
		{"GET", "/api/other?a=1&b=2", 11},              // same path rank: more constraints
		{"GET", "/api/example?a=1&b=2", 3},             // a literal beats a parameter, whatever the query
		{"GET", "/api/other/items", 7},                 //
		{"GET", "/api/example/items", 9},               // literal, literal beats literal, param
		{"GET", "/api/example/items.json", 9},          //
		{"GET", "/api/example/items/x", 8},             // /api/example/* beats /api/:id/*
		{"GET", "/api/other/x/y", 12},                  // /api/:id/* beats /api/*
		{"GET", "/api", 1},                             // /api/* with zero segments beats /*
		{"DELETE", "/api/x", 0},                        // only the catch-all
		{"GET", "/elsewhere", 0},                       //
		{"HEAD", "/api/example", 3},                    //
		{"POST", "/api/example?_method=GET", 3},        // overridden to GET: 3 and 6 tie, lowest index
		{"GET", "/api/example/", 3},                    // the end of a path beats a wildcard there
		{"GET", "/API/%65xample%2ejson?MODE=Heavy", 4}, //
	} {
		tg := NormalizeTarget(c.target)
		if got := r.Match(c.method, &tg); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.target, got, c.want)
		}
	}
	if got := NewRouter(nil).Match("GET", &Target{Path: "/"}); got != -1 {
		t.Fatalf("empty router: %d", got)
	}
	only := NewRouter([]Pattern{mustPattern(t, "GET", "/a", nil)})
	if got := only.Match("GET", &Target{Path: "/b"}); got != -1 {
		t.Fatalf("no match: %d", got)
	}
}

// rankKey is the specificity order spelled out for a brute-force check:
// per segment literal 3, parameter 2, wildcard 1, the end of the pattern 3.
func rankKey(p *Pattern) []int {
	var k []int
	for _, s := range p.segs {
		if s.param {
			k = append(k, 2)
		} else {
			k = append(k, 3)
		}
	}
	if p.wild {
		return append(k, 1)
	}
	return append(k, 3)
}

// better reports whether pattern a (index i) is more specific than b (index j).
func better(a, b *Pattern, i, j int) bool {
	ka, kb := rankKey(a), rankKey(b)
	for n := 0; n < len(ka) && n < len(kb); n++ {
		if ka[n] != kb[n] {
			return ka[n] > kb[n]
		}
	}
	if len(a.query) != len(b.query) {
		return len(a.query) > len(b.query)
	}
	if (a.method == "") != (b.method == "") {
		return a.method != ""
	}
	return i < j
}

// The trie search agrees with a brute force over every pattern.
func TestRouterMatchesBruteForce(t *testing.T) {
	lits := []string{"a", "b", "c"}
	methods := []string{"GET", "POST", "*"}
	for seed := int64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewSource(seed))
		var patterns []Pattern
		for range 1 + r.Intn(12) {
			var segs []string
			for range r.Intn(4) {
				switch r.Intn(3) {
				case 0:
					segs = append(segs, ":p"+string(rune('a'+len(segs))))
				default:
					segs = append(segs, lits[r.Intn(len(lits))])
				}
			}
			if r.Intn(3) == 0 {
				segs = append(segs, "*")
			}
			var q map[string]string
			if r.Intn(3) == 0 {
				q = map[string]string{"m": lits[r.Intn(2)]}
			}
			patterns = append(patterns, mustPattern(t, methods[r.Intn(3)], "/"+strings.Join(segs, "/"), q))
		}
		router := NewRouter(patterns)
		for range 50 {
			var segs []string
			for range r.Intn(5) {
				segs = append(segs, lits[r.Intn(len(lits))])
			}
			raw := "/" + strings.Join(segs, "/")
			if r.Intn(2) == 0 {
				raw += "?m=" + lits[r.Intn(2)]
			}
			method := methods[r.Intn(2)]
			tg := NormalizeTarget(raw)
			want := -1
			for i := range patterns {
				if patterns[i].Match(method, &tg) && (want < 0 || better(&patterns[i], &patterns[want], i, want)) {
					want = i
				}
			}
			if got := router.Match(method, &tg); got != want {
				t.Fatalf("seed %d: %s %s: router %d, brute force %d", seed, method, raw, got, want)
			}
		}
	}
}
