package cluster

import (
	"fmt"
	"github.com/sluicehq/sluice/internal/quota"
	"testing"
)

// BenchmarkDecodeFrames reads a full batch of forwarded checks and its
// answer, as the owner and the forwarding server do on a direct connection.
func BenchmarkDecodeFrames(b *testing.B) {
	items := make([]Item, maxBatch)
	res := make([]Result, maxBatch)
	for i := range items {
		items[i] = Item{Key: fmt.Sprintf("ten_a/pol_1/ip:10.0.%d.%d", i>>8, i&255), Tenant: "ten_a", Policy: "pol_1", Tier: "anonymous", Cost: 1, Consume: true, Now: 1_790_000_000_000_000_000 + int64(i)}
		res[i] = Result{Allowed: true, Outcomes: []quota.Outcome{{Allowed: true, Limit: 100, Remaining: 42, Reset: 3_000_000_000}, {Limit: 1000, Remaining: 900, Reset: 86_400_000_000_000}}}
	}
	req := appendRequest(nil, 7, items)[4:]
	resp := appendResponse(nil, 7, res)[4:]
	b.Run("request", func(b *testing.B) {
		b.SetBytes(int64(len(req)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeRequest(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("response", func(b *testing.B) {
		b.SetBytes(int64(len(resp)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeResponse(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
