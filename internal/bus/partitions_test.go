package bus

import (
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
)

// The store deletes a tenant's buckets partition by partition, so it must
// count the partitions as every process does.
func TestStoreKnowsThePartitions(t *testing.T) {
	if tenants.BucketPartitions != Partitions {
		t.Fatalf("tenants.BucketPartitions = %d, bus.Partitions = %d", tenants.BucketPartitions, Partitions)
	}
}
