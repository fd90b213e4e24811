package worker

// The flush protocol, worker side. Each stream is read by one durable pull
// consumer. A fetched batch of messages is applied in ONE SQLite transaction
// that also records each message's stream sequence in stream_applied; only
// after COMMIT are the messages acked. A worker that dies between commit and
// ack gets those messages redelivered (after AckWait, possibly after newer
// ones), and stream_applied makes each redelivery a no-op, so a decision is
// counted exactly once. Bucket rows remember the sequence that wrote them
// and only a newer sequence may overwrite them, so a late redelivery never
// brings back an older state.
//
// Streams made anew. If NATS loses a stream (its data directory wiped, the
// stream deleted), the worker finds its consumer gone, makes the streams
// again and reads the new stream's creation time. Sequences start again at
// 1 in a new stream, so when the creation time differs from the one the
// database recorded, the worker resets what compares sequences, in one
// transaction: the stream's applied-sequence log and, for the state stream,
// the bucket rows' sequences. Nothing from the old stream can be
// redelivered after that.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/worker/analytics"
)

// consume runs one stream's fetch/apply/ack loop until ctx ends.
func (w *Worker) consume(ctx context.Context, stream string, apply applyFunc) error {
	cons, ok := w.open(ctx, stream)
	if !ok {
		return nil
	}
	// Fetched messages wait in pending until ApplyInterval has passed since
	// the first of them, FetchBatch of them are there, or a sync is waiting;
	// then they are applied in one transaction and acked.
	var pending []jetstream.Msg
	var since time.Time
	for ctx.Err() == nil {
		wait := fetchWait
		if len(pending) > 0 {
			wait = min(wait, time.Until(since.Add(w.cfg.ApplyInterval)))
		}
		if !w.applyDue(stream, pending, wait) {
			batch, err := cons.Fetch(w.fetchBatch(stream)-len(pending), jetstream.FetchMaxWait(max(wait, time.Millisecond)))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				w.log.Warn("fetch failed", "stream", stream, "err", err)
				if cons, pending, ok = w.recover(ctx, stream, cons, pending, apply); !ok {
					return nil
				}
				continue
			}
			for m := range batch.Messages() {
				if len(pending) == 0 {
					since = time.Now()
				}
				pending = append(pending, m)
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
				w.log.Warn("fetch ended with an error", "stream", stream, "err", err)
				if cons, pending, ok = w.recover(ctx, stream, cons, pending, apply); !ok {
					return nil
				}
				continue
			}
			if !w.applyDue(stream, pending, time.Until(since.Add(w.cfg.ApplyInterval))) {
				continue
			}
		}
		w.applyAndAck(ctx, stream, pending, apply)
		pending = nil
	}
	// Messages still pending were not acked: the next worker gets them.
	return nil
}

// fetchWait is the longest a fetch waits for messages. A sync that arrives
// meanwhile (a server loading a partition it took over, or handing one
// back) waits for the fetch to end before what it needs is applied, so a
// long wait slows every hand-over; an idle worker's fetches cost one small
// NATS request each.
const fetchWait = 50 * time.Millisecond

// recover waits a moment after a failed fetch and, if the consumer is
// gone, applies what was fetched and opens the stream again.
func (w *Worker) recover(ctx context.Context, stream string, cons jetstream.Consumer, pending []jetstream.Msg, apply applyFunc) (jetstream.Consumer, []jetstream.Msg, bool) {
	sleepCtx(ctx, 250*time.Millisecond)
	if !w.consumerGone(ctx, stream) {
		return cons, pending, ctx.Err() == nil
	}
	// What was fetched from the old stream is still worth applying; its
	// acks fail, harmlessly.
	if len(pending) > 0 {
		w.applyAndAck(ctx, stream, pending, apply)
	}
	cons, ok := w.open(ctx, stream)
	return cons, nil, ok
}

// diskFull reports whether err is SQLite's "database or disk is full".
func diskFull(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.Code == sqlite3.ErrFull
}

// applyAndAck applies msgs in one transaction and acks them after COMMIT.
func (w *Worker) applyAndAck(ctx context.Context, stream string, msgs []jetstream.Msg, apply applyFunc) {
	if err := w.applyBatch(ctx, stream, msgs, apply); err != nil {
		// Not acked: JetStream redelivers after AckWait; nothing is lost.
		if diskFull(err) {
			w.metrics.applyFailures.WithLabelValues(stream, "disk_full").Inc()
			w.log.Error("SQLite disk is full: nothing of this batch was committed, it stays in the stream until there is room; free space under --data",
				"stream", stream, "messages", len(msgs), "err", err)
		} else {
			w.metrics.applyFailures.WithLabelValues(stream, "error").Inc()
			w.log.Error("apply batch failed; will be redelivered", "stream", stream, "messages", len(msgs), "err", err)
		}
		for _, m := range msgs {
			_ = m.Nak()
		}
		sleepCtx(ctx, time.Second)
		return
	}
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			w.log.Warn("ack failed; message will be redelivered and skipped", "stream", stream, "err", err)
		}
	}
}

// open makes the stream again if it is gone, adopts the stream's incarnation and
// makes the worker's consumer anew, retrying until ctx ends.
//
// The consumer is made anew at every start: messages a previous, killed
// worker had fetched but not acked are then delivered at once instead of
// after AckWait, so a restart after kill -9 hydrates servers without
// waiting. Nothing is lost: a work-queue stream keeps every message until
// it is acked, and stream_applied skips what was already committed.
// (Sluice runs one worker; two would steal each other's consumer.)
//
// Only the first attempt deletes the consumer. While JetStream elects new
// leaders (a NATS node died) a create can answer after the client gave up
// and still take effect; a retry that deleted again would throw that
// consumer away and wait for another.
func (w *Worker) open(ctx context.Context, stream string) (jetstream.Consumer, bool) {
	for attempt := 0; ; attempt++ {
		cons, err := w.tryOpen(ctx, stream, attempt == 0)
		if err == nil {
			if attempt > 0 {
				w.log.Info("stream opened", "stream", stream, "attempts", attempt+1)
			}
			return cons, true
		}
		w.log.Warn("opening the stream failed; retrying", "stream", stream, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (w *Worker) tryOpen(ctx context.Context, stream string, reset bool) (jetstream.Consumer, error) {
	s, err := w.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := bus.RestoreStreamsWith(ctx, w.js, w.streamLimits()); err != nil {
			return nil, err
		}
		w.log.Warn("the stream was gone (NATS lost it); made it again", "stream", stream)
		s, err = w.js.Stream(ctx, stream)
	}
	if err != nil {
		return nil, err
	}
	if err := w.adoptIncarnation(ctx, stream, s.CachedInfo().Created); err != nil {
		return nil, fmt.Errorf("record the stream's incarnation: %w", err)
	}
	if reset {
		if err := w.js.DeleteConsumer(ctx, stream, bus.WorkerDurable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.log.Warn("reset consumer failed", "stream", stream, "err", err)
		}
	}
	return w.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       bus.WorkerDurable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.cfg.AckWait,
		MaxAckPending: 10000,
	})
}

// consumerGone reports whether JetStream says the worker's consumer (or
// its stream) no longer exists, as opposed to not answering.
func (w *Worker) consumerGone(ctx context.Context, stream string) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := w.js.Consumer(cctx, stream, bus.WorkerDurable)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// adoptIncarnation records the stream's creation time. When it differs from
// the recorded one, the stream was made anew and its sequences start again
// at 1: the sequences kept from the old stream are reset so that they keep
// nothing out. A stream seen for the first time is taken as the one the
// rows came from.
func (w *Worker) adoptIncarnation(ctx context.Context, stream string, created time.Time) error {
	merged := false
	err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
		var known int64
		err := tx.QueryRowContext(ctx, `SELECT created FROM stream_incarnations WHERE stream = ?`, stream).Scan(&known)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO stream_incarnations (stream, created) VALUES (?, ?)`, stream, created.UnixNano())
			return err
		case err != nil:
			return err
		case known == created.UnixNano():
			return nil
		}
		if _, err = tx.ExecContext(ctx, `DELETE FROM stream_applied WHERE stream = ?`, stream); err != nil {
			return err
		}
		var reset int64
		if stream == bus.StateStream {
			// Staged states are merged first: with every sequence at 0
			// none could win over buckets' rows any more.
			if err := mergeEverything(ctx, tx); err != nil {
				return err
			}
			merged = true
			res, err := tx.ExecContext(ctx, `UPDATE buckets SET seq = 0 WHERE seq > 0`)
			if err != nil {
				return err
			}
			reset, _ = res.RowsAffected()
		}
		if _, err = tx.ExecContext(ctx, `UPDATE stream_incarnations SET created = ? WHERE stream = ?`, created.UnixNano(), stream); err != nil {
			return err
		}
		w.log.Warn("stream was made anew (NATS lost it); sequences start again, so the ones kept from the old stream were reset",
			"stream", stream, "bucket_rows_reset", reset)
		return nil
	})
	if err == nil && merged {
		err = w.runs.load(ctx, w.db)
	}
	return err
}

// applyDue reports whether pending messages should be applied now. Quota
// crossings do not wait for ApplyInterval: they are few (a key crosses a
// threshold a few times a period), each becomes a webhook someone waits
// for, and a fetch under load brings several at once anyway.
func (w *Worker) applyDue(stream string, pending []jetstream.Msg, left time.Duration) bool {
	return len(pending) > 0 && (left <= 0 || len(pending) >= w.fetchBatch(stream) || w.syncs.waiting.Load() > 0 || stream == bus.QuotaStream)
}

// fetchBatch is how many messages of stream one transaction applies. A
// counter message holds up to 2000 rows, twice a state message, so counter
// transactions take a quarter as many: the two streams take turns at the
// writer, and in a flood the bucket states that quotas (and restarted
// servers) depend on get two rows written for each counter row; counters,
// which only analytics read, catch up once the flood ends.
func (w *Worker) fetchBatch(stream string) int {
	if stream == bus.CounterStream {
		return max(w.cfg.FetchBatch/4, 1)
	}
	return w.cfg.FetchBatch
}

// payload is one message's data and its stream sequence; rows (a state
// message's buckets in their stored form) or counters is its decoded batch
// once decoded is set (none if unreadable).
type payload struct {
	seq      uint64
	data     []byte
	rows     []bucketRow
	counters *bus.CounterBatch
	decoded  bool
}

// applyFunc writes the effect of several messages, in stream order, within
// tx, and returns how many rows it wrote.
type applyFunc func(tx *sql.Tx, msgs []payload) (int, error)

func (w *Worker) applyBatch(ctx context.Context, stream string, msgs []jetstream.Msg, apply applyFunc) error {
	payloads := make([]payload, 0, len(msgs))
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		p := payload{seq: md.Sequence.Stream, data: m.Data()}
		// Decoded before the write transaction, so that the one writer is
		// held for SQL only.
		switch stream {
		case bus.StateStream:
			p.rows, p.decoded = stateRows(w, p.data), true
		case bus.CounterStream:
			p.counters, p.decoded = decodeCounters(w, p.data), true
		}
		payloads = append(payloads, p)
	}
	// Bucket states are merged and sorted before the writer is taken too;
	// if some messages turn out to be redeliveries already committed, the
	// rest are merged again within the transaction.
	var merged []bucketRow
	if stream == bus.StateStream {
		merged = w.mergeState(payloads)
	}
	var rows int
	err := w.store.WriteTx(ctx, func(tx *sql.Tx) error {
		fresh, err := markApplied(ctx, tx, stream, payloads)
		if err != nil {
			return err
		}
		if stream == bus.StateStream && len(fresh) == len(payloads) {
			rows, err = w.staging.stage(tx, merged)
		} else {
			rows, err = apply(tx, fresh)
		}
		if err == nil && w.repl != nil {
			// The replication record carries the count, so that a standby
			// counts these rows when it writes them.
			w.repl.NoteRows(stream, rows)
		}
		return err
	})
	if err != nil {
		return err
	}
	w.metrics.rowsWritten.WithLabelValues(stream).Add(float64(rows))
	w.streamRows(stream).Add(uint64(rows))
	w.metrics.batches.WithLabelValues(stream).Inc()
	return nil
}

// markApplied records each payload's sequence in stream_applied and returns
// the payloads not recorded before: the others are redeliveries of messages
// already committed.
func markApplied(ctx context.Context, tx *sql.Tx, stream string, payloads []payload) ([]payload, error) {
	mark, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO stream_applied (stream, seq) VALUES (?, ?)`)
	if err != nil {
		return nil, err
	}
	defer mark.Close()
	fresh := payloads[:0:0]
	for _, p := range payloads {
		res, err := mark.ExecContext(ctx, stream, p.seq)
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // a redelivery of a message already committed
		}
		fresh = append(fresh, p)
	}
	return fresh, nil
}

// pruneApplied forgets applied sequences at or below the consumer's ack
// floor: JetStream never redelivers those.
func (w *Worker) pruneApplied(ctx context.Context) {
	for _, stream := range workerStreams {
		c, err := w.js.Consumer(ctx, stream, bus.WorkerDurable)
		if err != nil {
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		floor := info.AckFloor.Stream
		err = w.store.WriteTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM stream_applied WHERE stream = ? AND seq <= ?`, stream, floor)
			return err
		})
		if err != nil {
			w.log.Warn("prune applied sequences", "stream", stream, "err", err)
		}
	}
}

// decodeBatches decodes each payload into a fresh T, logging and skipping
// what no version of Sluice can read: retrying such a message forever would
// stall the stream behind it.
func decodeBatches[T any](w *Worker, payloads []payload, version func(*T) int) []*T {
	out := make([]*T, 0, len(payloads))
	for _, p := range payloads {
		v := new(T)
		if err := json.Unmarshal(p.data, v); err != nil {
			w.log.Error("dropping unreadable stream message", "err", err)
			continue
		}
		if ver := version(v); ver != bus.WireVersion {
			w.log.Error("dropping stream message of unknown wire version", "version", ver)
			continue
		}
		out = append(out, v)
	}
	return out
}

// stateRows decodes one state stream message, packed or JSON, into its
// buckets' stored form, or logs and returns none, as decodeBatches does.
// A packed message's states are stored as they came, without a decode.
func stateRows(w *Worker, data []byte) []bucketRow {
	if !bus.IsPackedStateBatch(data) {
		bs := decodeBatches(w, []payload{{data: data}}, func(b *bus.StateBatch) int { return b.V })
		if len(bs) == 0 {
			return nil
		}
		return bucketRows(bs[0])
	}
	var rows []bucketRow
	_, err := bus.WalkPackedStateBatch(data, func(pr bus.PackedRecord, term uint64) error {
		rec := &bus.BucketRecord{Key: string(pr.Key), TenantID: string(pr.TenantID), FullAt: pr.FullAt, Term: term}
		rows = append(rows, bucketRow{rec: rec, bin: pr.State, part: bus.Partition(pr.Key)})
		return nil
	})
	if err != nil {
		w.log.Error("dropping unreadable stream message", "err", err)
		return nil
	}
	return rows
}

// applyState stages bucket states (runs.go). Within one transaction a key
// is written once, with its newest state (payloads are in stream order). A
// bucket that is full again is written too (not deleted), so that its
// sequence keeps older redeliveries out; the sweep deletes it later.
func (w *Worker) applyState(tx *sql.Tx, payloads []payload) (int, error) {
	return w.staging.stage(tx, w.mergeState(payloads))
}

// mergeState keeps each key's newest state among payloads, in key order,
// so that consecutive rows land on the same B-tree pages. A state of an
// older partition term than its partition's is dropped first (terms.go);
// mergeState runs in the write transaction, so the terms cannot change
// under it.
func (w *Worker) mergeState(payloads []payload) []bucketRow {
	defer w.terms.report(w.log)
	n := 0
	for i := range payloads {
		p := &payloads[i]
		if !p.decoded {
			p.rows, p.decoded = stateRows(w, p.data), true
		}
		n += len(p.rows)
	}
	latest := make(map[string]int, n) // key -> index in order
	order := make([]bucketRow, 0, n)
	for _, p := range payloads {
		for _, r := range p.rows {
			if w.terms.stale(r.part, r.rec.Term) {
				continue
			}
			r.seq = p.seq
			if j, seen := latest[r.rec.Key]; seen {
				if p.seq >= order[j].seq {
					order[j] = r
				}
				continue
			}
			latest[r.rec.Key] = len(order)
			order = append(order, r)
		}
	}
	// In the table's order (partition, key): each statement then appends
	// along the B-tree instead of seeking from its root for every row.
	slices.SortFunc(order, func(a, b bucketRow) int {
		if a.part != b.part {
			return a.part - b.part
		}
		return strings.Compare(a.rec.Key, b.rec.Key)
	})
	return order
}

// decodeCounters decodes one counter stream message, or logs and returns nil.
// applyCounters decodes the payloads' counter batches (once) and adds them
// to the analytics tables (analytics.ApplyCounters) and their units to the
// daily usage (usage.go), in the one transaction.
func (w *Worker) applyCounters(tx *sql.Tx, payloads []payload) (int, error) {
	batches := make([]*bus.CounterBatch, 0, len(payloads))
	for i := range payloads {
		p := &payloads[i]
		if !p.decoded {
			p.counters, p.decoded = decodeCounters(w, p.data), true
		}
		if p.counters != nil {
			batches = append(batches, p.counters)
		}
	}
	n, err := analytics.ApplyCounters(tx, batches, w.cfg.Analytics.TopK)
	if err != nil {
		return n, err
	}
	return n, w.usage.apply(tx, batches)
}

func decodeCounters(w *Worker, data []byte) *bus.CounterBatch {
	bs := decodeBatches(w, []payload{{data: data}}, func(b *bus.CounterBatch) int { return b.V })
	if len(bs) == 0 {
		return nil
	}
	return bs[0]
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// countReplayedRows adds the stream rows a record replayed on a standby
// wrote to the same totals the active keeps.
func (w *Worker) countReplayedRows(stream string, rows int) {
	if !slices.Contains(workerStreams, stream) {
		return
	}
	w.streamRows(stream).Add(uint64(rows))
	w.metrics.rowsWritten.WithLabelValues(stream).Add(float64(rows))
}

// workerStreams are the streams the worker consumes.
var workerStreams = []string{bus.StateStream, bus.CounterStream, bus.QuotaStream}

// streamRows is the running total of rows written from stream.
func (w *Worker) streamRows(stream string) *atomic.Uint64 {
	switch stream {
	case bus.StateStream:
		return &w.stateRows
	case bus.QuotaStream:
		return &w.quotaRows
	}
	return &w.counterRows
}

func (w *Worker) replicas() int { return bus.ResolveReplicas(w.nc, w.cfg.Replicas) }

// streamLimits are the configured stream limits with the replicas asked for.
func (w *Worker) streamLimits() bus.StreamLimits {
	l := w.cfg.Streams
	l.Replicas = w.replicas()
	return l
}

// ensureStreams makes or updates the state and counter streams with the
// replicas asked for, and raises the replicas of the KV buckets servers made
// with fewer (a server may not update a stream; the worker may).
func (w *Worker) ensureStreams(ctx context.Context, js jetstream.JetStream) error {
	limits := w.streamLimits()
	replicas := limits.Replicas
	bus.CheckReplicas(ctx, js, replicas, w.log, workerStreams...)
	if err := bus.EnsureStreamsWith(limits)(ctx, js); err != nil {
		return err
	}
	// A bucket that cannot be raised now (a NATS node down) keeps working
	// with what it has; the warning says so, and the next start tries again.
	_ = bus.RaiseReplicas(ctx, js, replicas, w.log, bus.KVStream(bus.OwnersBucket), bus.KVStream(bus.MembersBucket), bus.KVStream(bus.RevokedSessionsBucket))
	w.log.Info("streams ready", "replicas", replicas)
	return nil
}
