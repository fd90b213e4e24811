package bus

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// RestoreKeyValue makes the bucket cfg describes if NATS lost it (a restart
// loses in-memory buckets; a wiped data directory or a delete loses any)
// and reports whether it did. An existing bucket is left as it is: updating
// a stream while a consumer is being added to it is not safe in every NATS
// version.
func RestoreKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (bool, error) {
	_, err := js.KeyValue(ctx, cfg.Bucket)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, err
	}
	if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
		if errors.Is(err, jetstream.ErrBucketExists) {
			return false, nil // another process was faster
		}
		return false, err
	}
	return true, nil
}

// OpenKeyValue makes the bucket cfg describes, or opens it as it is. It
// never updates a bucket's stream: servers may not (ServerRole), since an
// update could make a stream republish onto worker-only subjects. A bucket
// that exists with fewer replicas than cfg asks for is opened and reported
// on log (cmd/worker raises its replicas at start, see RaiseReplicas).
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, log *slog.Logger) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Same name, other settings.
		if kv, err = js.KeyValue(ctx, cfg.Bucket); err == nil && log != nil {
			CheckReplicas(ctx, js, max(cfg.Replicas, 1), log, KVStream(cfg.Bucket))
		}
	}
	return kv, err
}

// Incarnation is the creation time (unix ns) of kv's stream. A bucket that
// was lost and made again has a new one, and numbers its entries from 1
// again: revisions and watch positions from before mean nothing in it. A
// bucket that is gone answers jetstream.ErrBucketNotFound.
func Incarnation(ctx context.Context, kv jetstream.KeyValue) (int64, error) {
	st, err := kv.Status(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, jetstream.ErrBucketNotFound
	}
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, errors.New("bucket status without stream info")
	}
	return bs.StreamInfo().Created.UnixNano(), nil
}
