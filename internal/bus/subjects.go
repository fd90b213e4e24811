// Package bus holds everything Sluice's processes say to each other over
// NATS: subject and stream names, the versioned payloads, the embedded
// server, and connection helpers. Servers and the worker import it; it
// imports no other Sluice package but the domain types it carries.
package bus

import (
	"bytes"
	"strings"
)

// Streams (JetStream). Both use work-queue retention: a message stays until
// the worker has committed its effect to SQLite and acked it, so a worker
// that is down loses nothing.
const (
	// StateStream carries batches of hot-cache bucket states from allowed
	// decisions (denied decisions publish nothing).
	StateStream = "SLUICE_STATE"
	// StateSubjectPrefix + node id is where one server publishes its batches.
	StateSubjectPrefix = "sluice.state."
	stateSubjects      = "sluice.state.>"

	// CounterStream carries batches of per-minute decision counters.
	CounterStream        = "SLUICE_COUNTERS"
	CounterSubjectPrefix = "sluice.counters."
	counterSubjects      = "sluice.counters.>"

	// WorkerDurable is the durable consumer name the worker uses on both streams.
	WorkerDurable = "sluice-worker"
)

// Request/reply subjects served by the worker (a nats.go/micro service in
// a queue group, so several workers would share the load, though Sluice
// runs one).
const (
	ServiceName    = "sluice-worker"
	ServiceVersion = "1.0.0"
	// ConfigPrefix + an operation name (see the Op constants) is a config
	// read or write.
	ConfigPrefix = "sluice.config"
	// PartSubject serves the parts of a reply too large for one message.
	PartSubject = "sluice.worker.part"
	// BucketsSubject answers one page of persisted bucket states (hydration).
	BucketsSubject = "sluice.worker.buckets"
	// SyncSubject answers once the worker has committed every message that
	// was in the streams when the request arrived.
	SyncSubject = "sluice.worker.sync"
	// AnalyticsPrefix + an operation name is an analytics query.
	AnalyticsPrefix = "sluice.analytics"
)

// ChangesSubject is where the worker announces every committed config
// change; every server applies it to its cache.
const ChangesSubject = "sluice.events.config"

// WireVersion is carried in every payload; a receiver rejects versions it
// does not know rather than misreading them.
const WireVersion = 1

// Partitions is the fixed number of bucket-key partitions whose ownership
// servers share. Every process must agree on it.
const Partitions = 64

// Partition maps a bucket key to its partition (FNV-1a, the same on every
// process and platform): a key in a customer form (bucketkey.go) to its
// customer's, CustomerPartition, any other key by all its bytes.
func Partition(key []byte) int {
	if bytes.IndexByte(key, '@') >= 0 || bytes.Contains(key, customerKindSep) {
		return placedPartition(key)
	}
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	return int(h % Partitions)
}

// placedPartition is Partition of a key that may be in a customer form.
func placedPartition(key []byte) int {
	if tenant, customer, ok := customerPlacement(key); ok {
		return customerPartition(tenant, customer)
	}
	return int(fnv1a(2166136261, key) % Partitions)
}

// customerKindSep is what a customer-level bucket key holds.
var customerKindSep = []byte("/" + KindCustomer + ":")

// CustomerPartition is the partition of every bucket placed with customer
// customerID of tenant tenantID.
func CustomerPartition(tenantID, customerID string) int {
	return customerPartition([]byte(tenantID), []byte(customerID))
}

func customerPartition(tenant, customer []byte) int {
	h := fnv1a(2166136261, tenant)
	h = fnv1a(h, customerKindSep)
	return int(fnv1a(h, customer) % Partitions)
}

func fnv1a(h uint32, b []byte) uint32 {
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// CompareBucketKeys orders bucket keys the way the worker stores and pages
// them: by partition, then by key. It returns -1, 0 or +1.
func CompareBucketKeys(a, b string) int {
	pa, pb := Partition([]byte(a)), Partition([]byte(b))
	switch {
	case pa < pb:
		return -1
	case pa > pb:
		return 1
	}
	return strings.Compare(a, b)
}

// OrderPartitionKey names the (partition, key) order of hydration pages
// (CompareBucketKeys): a server asks for it, and a worker that pages in it
// says so, in BucketsRequest/BucketsPage and in PageOrderHeader on a raw
// page. A page without it is in plain key order (an older worker).
const OrderPartitionKey = "part,key"

// PageOrderHeader carries a raw hydration page's order.
const PageOrderHeader = "Sluice-Page-Order"

// PageTermHeader carries the partition term a raw page acquired.
const PageTermHeader = "Sluice-Page-Term"

// Cluster subjects: ForwardPrefix + node receives checks forwarded to that
// node; LocalPrefix + node carries a node's consumption deltas of "local"
// consistency policies.
const (
	ForwardPrefix = "sluice.cluster.fwd."
	LocalPrefix   = "sluice.cluster.local."
	// WaitPrefix + node receives checks that may wait at that node, their
	// owner (one item a request, answered when it is decided), and
	// WaitCancelPrefix + node the ids of those whose client went away.
	// An owner of a version without waiting subscribes to neither.
	WaitPrefix       = "sluice.cluster.wait."
	WaitCancelPrefix = "sluice.cluster.waitcancel."
)

// JetStream KV buckets the servers keep: partition leases and members
// (internal/cluster). RevokedSessionsBucket (sessions.go) is the third.
const (
	OwnersBucket  = "sluice_owners"
	MembersBucket = "sluice_members"
)
