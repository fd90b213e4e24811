package route

import (
	"fmt"
	"testing"
)

func BenchmarkNormalizeTarget(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		NormalizeTarget("/API/v1//Example%252EJSON;jsessionid=1/?mode=normal&mode[]=heavy#x")
	}
}

func BenchmarkNormalizeTargetCanonical(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		NormalizeTarget("/api/v1/example?mode=heavy")
	}
}

func BenchmarkRouterMatch(b *testing.B) {
	var patterns []Pattern
	for i := range 50 {
		p, err := CompilePattern("GET", fmt.Sprintf("/api/v1/resource%d/:id", i), nil)
		if err != nil {
			b.Fatal(err)
		}
		patterns = append(patterns, p)
	}
	for _, s := range []struct{ m, p string }{{"*", "/*"}, {"GET", "/api/*"}, {"GET", "/api/example"}} {
		p, _ := CompilePattern(s.m, s.p, nil)
		patterns = append(patterns, p)
	}
	heavy, _ := CompilePattern("GET", "/api/example", map[string]string{"mode": "heavy"})
	patterns = append(patterns, heavy)
	r := NewRouter(patterns)
	t := NormalizeTarget("/api/example?mode=normal&mode=heavy")
	if got := r.Match("GET", &t); got != len(patterns)-1 {
		b.Fatalf("matched %d", got)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.Match("GET", &t)
	}
}
