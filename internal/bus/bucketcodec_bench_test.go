package bus

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/quota"
)

// BenchmarkWalkPackedStateBatch reads a state batch of 500 buckets as the
// worker does: every record, and every state decoded into quota types.
func BenchmarkWalkPackedStateBatch(b *testing.B) {
	limits, states := sampleState()
	recs := make([]BucketRecord, 500)
	for i := range recs {
		recs[i] = BucketRecord{Key: fmt.Sprintf("ten_a/pol_1/ip:10.0.%d.%d", i>>8, i&255), TenantID: "ten_a", Limits: limits, States: states, FullAt: int64(i), Term: 3}
	}
	data := AppendPackedStateBatch(nil, "node-1", recs, true)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var ql []quota.Limit
	var qs []quota.State
	n := 0
	for b.Loop() {
		_, err := WalkPackedStateBatch(data, func(r PackedRecord, _ uint64) error {
			var err error
			ql, qs, err = DecodeStateInto(r.State, ql, qs)
			n++
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	_ = n
}
