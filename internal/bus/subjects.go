// Package bus holds everything Sluice's processes say to each other over
// NATS: subject and stream names, the versioned payloads, the embedded
// server, and connection helpers. Servers and the worker import it; it
// imports no other Sluice package but the domain types it carries.
package bus

import "strings"

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

// Analytics queries: AnalyticsPrefix + "." + the query is the subject.
const (
	QueryTimeseries  = "timeseries"
	QueryTop         = "top"
	QueryTopPolicies = "top_policies" // policies ranked by denials (PolicyRankQuery)
)

// ChangesSubject is where the worker announces every committed config
// change; every server applies it to its cache.
const ChangesSubject = "sluice.events.config"

// WireVersion is carried in every payload; a receiver rejects versions it
// does not know rather than misreading them.
const WireVersion = 1

// Config operations: ConfigPrefix + "." + Op is the subject. Nothing is
// served under ConfigPrefix + ".operator.": the worker bootstraps the
// operator itself at start, and a server's NATS permissions deny those
// subjects (roles.go).
const (
	OpSnapshot      = "snapshot"
	OpVersion       = "version"
	OpTenantCreate  = "tenant.create"
	OpTenantList    = "tenant.list"
	OpTenantGet     = "tenant.get"
	OpTenantSuspend = "tenant.suspend"
	OpTenantResume  = "tenant.resume"
	OpTenantDelete  = "tenant.delete"
	OpTenantOpen    = "tenant.open" // the operator opens its dashboard (audited)
	OpPolicyCreate  = "policy.create"
	OpPolicyGet     = "policy.get"
	OpPolicyList    = "policy.list"
	OpPolicyUpdate  = "policy.update"
	OpPolicyDelete  = "policy.delete"
	OpPolicyNames   = "policy.names" // ids and names, or a count (PolicyNames)
	OpKeyCreate     = "key.create"
	OpKeyGet        = "key.get"
	OpKeyList       = "key.list" // every key of a tenant (the API's list)
	OpKeyPage       = "key.page" // one filtered, sorted page (KeyPageQuery)
	OpKeyNames      = "key.names"
	OpKeyCount      = "key.count"
	OpKeyUpdate     = "key.update"
	OpKeyRevoke     = "key.revoke"
	OpBlockCreate   = "block.create"
	OpBlockList     = "block.list"
	OpBlockDelete   = "block.delete"
	OpBucketReset   = "bucket.reset"
	OpUserSignIn    = "user.sign_in" // checks a password on the worker (SignIn)
	OpUserCreate    = "user.create"

	// Credential lifecycle.
	OpServiceKeyCreate = "service_key.create"
	OpServiceKeyList   = "service_key.list"
	OpServiceKeyRevoke = "service_key.revoke"
	OpServiceKeyUsed   = "service_key.used" // servers' batched last-use report
	OpUserList         = "user.list"
	OpUserRole         = "user.role"
	OpUserDelete       = "user.delete"
	OpUserPassword     = "user.password"
	OpUserEmail        = "user.email"
	OpUserEndSessions  = "user.end_sessions"

	// The first-run setup link (SetupOffer, SetupClaim): not under
	// "operator.", which servers may not ask, because a server's dashboard
	// serves the link; the worker answers only while no operator login
	// exists.
	OpSetupOffer = "setup.offer"
	OpSetupClaim = "setup.claim"

	// The audit log (reads; entries are written by the writes above).
	OpAuditList = "audit.list"
	OpAuditGet  = "audit.get"
)

// Partitions is the fixed number of bucket-key partitions whose ownership
// servers share. Every process must agree on it.
const Partitions = 64

// Partition maps a bucket key to its partition (FNV-1a, the same on every
// process and platform).
func Partition(key []byte) int {
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	return int(h % Partitions)
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
)

// JetStream KV buckets the servers keep: partition leases and members
// (internal/cluster). RevokedSessionsBucket (sessions.go) is the third.
const (
	OwnersBucket  = "sluice_owners"
	MembersBucket = "sluice_members"
)
