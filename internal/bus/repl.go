package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The standby worker. Workers elect one active through a lease in a KV
// bucket; the active ships every committed SQLite transaction to a
// replication log stream, which the standby applies to its own database.
// Both are the workers' alone: a server's credential may neither publish to
// the log nor write the lease (roles.go).
const (
	// ReplStream is the replication log: one message per committed
	// transaction (or per part of a large one), in commit order.
	ReplStream  = "SLUICE_REPL"
	ReplSubject = "sluice.repl.log"
	// ReplSnapshotSubject asks the active worker for a copy of its
	// database; ReplChunkSubject fetches it in parts.
	ReplSnapshotSubject = "sluice.repl.snapshot"
	ReplChunkSubject    = "sluice.repl.chunk"
	replSubjects        = "sluice.repl.>"

	// WorkerLeaseBucket holds WorkerLeaseKey, the active worker's lease.
	WorkerLeaseBucket = "sluice_worker_lease"
	WorkerLeaseKey    = "active"
)

// Headers of a replication log message.
const (
	ReplEpochHeader  = "Sluice-Repl-Epoch"  // the lease term of the worker that wrote it
	ReplPartHeader   = "Sluice-Repl-Part"   // "i/n": part i of a record in n parts
	ReplMarkerHeader = "Sluice-Repl-Marker" // set on the record that opens a term
)

// ReplStreamConfig is the replication log: file storage, oldest records
// dropped first at the bounds (a standby that falls behind them copies a
// snapshot instead).
func ReplStreamConfig(maxBytes int64, maxAge time.Duration, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       ReplStream,
		Subjects:   []string{ReplSubject},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
		MaxBytes:   maxBytes,
		MaxAge:     maxAge,
		MaxMsgSize: 8 << 20,
		Replicas:   max(replicas, 1),
	}
}

// WorkerLeaseConfig is the lease bucket: an entry lives ttl after its last
// renewal.
func WorkerLeaseConfig(ttl time.Duration, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:   WorkerLeaseBucket,
		TTL:      ttl,
		Storage:  jetstream.FileStorage,
		Replicas: max(replicas, 1),
	}
}
