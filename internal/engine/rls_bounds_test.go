package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkShouldRateLimitAtTheBounds decides the two Envoy calls of the
// noisy-neighbour run (e2e TestNoisyNeighbour), at the door's bounds: 1 000
// descriptors of 900-byte values past 150 sibling wildcards they do not
// match, and 40 descriptors 48 levels deep of 500-byte values that match a
// rule. Their cost is CPU every tenant shares.
func BenchmarkShouldRateLimitAtTheBounds(b *testing.B) {
	var ds []any
	for i := range 150 {
		ds = append(ds, map[string]any{"key": "w", "value": fmt.Sprintf("p%03d*", i),
			"rate_limit": map[string]any{"unit": "second", "requests_per_unit": 1000}})
	}
	var deep map[string]any
	for lvl := 47; lvl >= 0; lvl-- {
		d := map[string]any{"key": fmt.Sprintf("d%02d", lvl)}
		if deep == nil {
			d["rate_limit"] = map[string]any{"unit": "minute", "requests_per_unit": 1_000_000}
		} else {
			d["descriptors"] = []any{deep}
		}
		deep = d
	}
	raw, _ := json.Marshal(map[string]any{"domain": "noisy", "descriptors": append(ds, deep)})
	e := rlsEngineWith(b, string(raw)) // JSON is YAML
	e.door = nil                       // the decision's cost, not the tenant's share of the door
	wild := RLSRequest{Domain: "noisy"}
	v := strings.Repeat("x", 900)
	for range 1000 {
		wild.Descriptors = append(wild.Descriptors, desc("w", v))
	}
	deepReq := RLSRequest{Domain: "noisy"}
	for i := range 40 {
		var d RLSDescriptor
		for lvl := range 48 {
			d.Entries = append(d.Entries, RLSEntry{Key: fmt.Sprintf("d%02d", lvl), Value: fmt.Sprintf("%d-%d-%s", 0, i, strings.Repeat("v", 496))})
		}
		deepReq.Descriptors = append(deepReq.Descriptors, d)
	}
	for name, r := range map[string]*RLSRequest{"wildcards": &wild, "deep": &deepReq} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.ShouldRateLimit(context.Background(), "ten_a", r, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
