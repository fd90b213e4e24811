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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/bus"
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
		wait := 200 * time.Millisecond
		if len(pending) > 0 {
			wait = min(wait, time.Until(since.Add(w.cfg.ApplyInterval)))
		}
		if !w.applyDue(pending, wait) {
			batch, err := cons.Fetch(w.cfg.FetchBatch-len(pending), jetstream.FetchMaxWait(max(wait, time.Millisecond)))
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
			if !w.applyDue(pending, time.Until(since.Add(w.cfg.ApplyInterval))) {
				continue
			}
		}
		w.applyAndAck(ctx, stream, pending, apply)
		pending = nil
	}
	// Messages still pending were not acked: the next worker gets them.
	return nil
}

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

// applyAndAck applies msgs in one transaction and acks them after COMMIT.
func (w *Worker) applyAndAck(ctx context.Context, stream string, msgs []jetstream.Msg, apply applyFunc) {
	if err := w.applyBatch(ctx, stream, msgs, apply); err != nil {
		// Not acked: JetStream redelivers after AckWait; nothing is lost.
		w.log.Error("apply batch failed; will be redelivered", "stream", stream, "messages", len(msgs), "err", err)
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
func (w *Worker) open(ctx context.Context, stream string) (jetstream.Consumer, bool) {
	for {
		cons, err := w.tryOpen(ctx, stream)
		if err == nil {
			return cons, true
		}
		w.log.Warn("opening the stream failed; retrying", "stream", stream, "err", err)
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

func (w *Worker) tryOpen(ctx context.Context, stream string) (jetstream.Consumer, error) {
	s, err := w.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := bus.RestoreStreams(ctx, w.js, w.replicas()); err != nil {
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
	if err := w.js.DeleteConsumer(ctx, stream, bus.WorkerDurable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		w.log.Warn("reset consumer failed", "stream", stream, "err", err)
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
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var known int64
	err = tx.QueryRowContext(ctx, `SELECT created FROM stream_incarnations WHERE stream = ?`, stream).Scan(&known)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, `INSERT INTO stream_incarnations (stream, created) VALUES (?, ?)`, stream, created.UnixNano())
	case err != nil:
	case known == created.UnixNano():
		return nil
	default:
		if _, err = tx.ExecContext(ctx, `DELETE FROM stream_applied WHERE stream = ?`, stream); err != nil {
			return err
		}
		var reset int64
		if stream == bus.StateStream {
			res, uerr := tx.ExecContext(ctx, `UPDATE buckets SET seq = 0 WHERE seq > 0`)
			if uerr != nil {
				return uerr
			}
			reset, _ = res.RowsAffected()
		}
		_, err = tx.ExecContext(ctx, `UPDATE stream_incarnations SET created = ? WHERE stream = ?`, created.UnixNano(), stream)
		if err == nil {
			w.log.Warn("stream was made anew (NATS lost it); sequences start again, so the ones kept from the old stream were reset",
				"stream", stream, "bucket_rows_reset", reset)
		}
	}
	if err != nil {
		return err
	}
	return tx.Commit()
}

// applyDue reports whether pending messages should be applied now.
func (w *Worker) applyDue(pending []jetstream.Msg, left time.Duration) bool {
	return len(pending) > 0 && (left <= 0 || len(pending) >= w.cfg.FetchBatch || w.syncing.Load() > 0)
}

// payload is one message's data and its stream sequence.
type payload struct {
	seq  uint64
	data []byte
}

// applyFunc writes the effect of several messages, in stream order, within
// tx, and returns how many rows it wrote.
type applyFunc func(tx *sql.Tx, msgs []payload) (int, error)

func (w *Worker) applyBatch(ctx context.Context, stream string, msgs []jetstream.Msg, apply applyFunc) error {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	mark, err := tx.PrepareContext(ctx, `INSERT OR IGNORE INTO stream_applied (stream, seq) VALUES (?, ?)`)
	if err != nil {
		return err
	}
	defer mark.Close()
	var fresh []payload
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		res, err := mark.ExecContext(ctx, stream, md.Sequence.Stream)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue // a redelivery of a message already committed
		}
		fresh = append(fresh, payload{seq: md.Sequence.Stream, data: m.Data()})
	}
	rows, err := apply(tx, fresh)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	w.metrics.rowsWritten.WithLabelValues(stream).Add(float64(rows))
	if stream == bus.StateStream {
		w.stateRows.Add(uint64(rows))
	} else {
		w.counterRows.Add(uint64(rows))
	}
	w.metrics.batches.WithLabelValues(stream).Inc()
	return nil
}

// pruneApplied forgets applied sequences at or below the consumer's ack
// floor: JetStream never redelivers those.
func (w *Worker) pruneApplied(ctx context.Context) {
	for _, stream := range []string{bus.StateStream, bus.CounterStream} {
		c, err := w.js.Consumer(ctx, stream, bus.WorkerDurable)
		if err != nil {
			continue
		}
		info, err := c.Info(ctx)
		if err != nil {
			continue
		}
		if _, err := w.db.ExecContext(ctx, `DELETE FROM stream_applied WHERE stream = ? AND seq <= ?`, stream, info.AckFloor.Stream); err != nil {
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

// applyState upserts bucket states. Within one transaction a key is written
// once, with its newest state (payloads are in stream order). A bucket that
// is full again (or was reset) is deleted instead: storage holds only
// active identities.
func (w *Worker) applyState(tx *sql.Tx, payloads []payload) (int, error) {
	type versioned struct {
		rec *bus.BucketRecord
		seq uint64
	}
	latest := map[string]versioned{}
	var order []string
	for _, p := range payloads {
		for _, b := range decodeBatches(w, []payload{p}, func(b *bus.StateBatch) int { return b.V }) {
			for i := range b.Buckets {
				rec := &b.Buckets[i]
				cur, seen := latest[rec.Key]
				if !seen {
					order = append(order, rec.Key)
				}
				if !seen || p.seq >= cur.seq {
					latest[rec.Key] = versioned{rec, p.seq}
				}
			}
		}
	}
	if len(order) == 0 {
		return 0, nil
	}
	now := w.cfg.Now().UnixNano()
	// A bucket that is full again is written too (not deleted), so that its
	// sequence keeps older redeliveries out; the sweep deletes it later.
	upsert, err := tx.Prepare(upsertBucketSQL)
	if err != nil {
		return 0, err
	}
	defer upsert.Close()
	var buf []byte
	for _, key := range order {
		v := latest[key]
		if buf, err = upsertBucket(upsert, buf, v.rec, v.seq, now); err != nil {
			return 0, err
		}
	}
	return len(order), nil
}

// sweep deletes persisted buckets that are full again, once no redelivery
// of an older state can arrive for them (a few AckWaits after their last
// write), and prunes the applied-sequence log.
func (w *Worker) sweep(ctx context.Context) {
	w.pruneApplied(ctx)
	now := w.cfg.Now()
	res, err := w.db.ExecContext(ctx, `DELETE FROM buckets WHERE full_at <= ? AND updated_at <= ?`, now.UnixNano(), now.Add(-6*w.cfg.AckWait).UnixNano())
	if err != nil {
		w.log.Error("bucket sweep failed", "err", err)
		return
	}
	if n, _ := res.RowsAffected(); n > 0 {
		w.log.Debug("bucket sweep", "deleted", n)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (w *Worker) replicas() int { return bus.ResolveReplicas(w.nc, w.cfg.Replicas) }

// ensureStreams makes or updates the state and counter streams with the
// replicas asked for, and raises the replicas of the KV buckets servers made
// with fewer (a server may not update a stream; the worker may).
func (w *Worker) ensureStreams(ctx context.Context, js jetstream.JetStream) error {
	replicas := w.replicas()
	bus.CheckReplicas(ctx, js, replicas, w.log, bus.StateStream, bus.CounterStream)
	if err := bus.EnsureStreams(ctx, js, replicas); err != nil {
		return err
	}
	// A bucket that cannot be raised now (a NATS node down) keeps working
	// with what it has; the warning says so, and the next start tries again.
	_ = bus.RaiseReplicas(ctx, js, replicas, w.log, bus.KVStream(bus.OwnersBucket), bus.KVStream(bus.MembersBucket), bus.KVStream(bus.RevokedSessionsBucket))
	w.log.Info("streams ready", "replicas", replicas)
	return nil
}
