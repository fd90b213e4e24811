package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
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

// ErrNoEntry is LeaderEntry's answer for a key with no value.
var ErrNoEntry = errors.New("no entry for the key")

// LeaderEntry reads key's latest value in bucket from the leader of the
// bucket's stream, not from whichever replica answers a direct get: the
// replica that answers may not have seen the latest write, or may have
// expired an entry (MaxAge) that the leader, which checks compare-and-set
// writes, still holds. It returns the value and its revision, or
// ErrNoEntry (also for a deleted key).
func LeaderEntry(ctx context.Context, nc *nats.Conn, bucket, key string) ([]byte, uint64, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+KVStream(bucket), req)
	if err != nil {
		return nil, 0, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("reading %s from its leader: %w", key, err)
	}
	if resp.Error != nil {
		switch resp.Error.ErrCode {
		case 10037: // no message found
			return nil, 0, ErrNoEntry
		case 10059: // stream not found
			return nil, 0, jetstream.ErrBucketNotFound
		}
		return nil, 0, fmt.Errorf("reading %s from its leader: %s (%d)", key, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, 0, fmt.Errorf("reading %s from its leader: empty answer", key)
	}
	// A delete or purge marker carries a KV-Operation header.
	if bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")) {
		return nil, 0, ErrNoEntry
	}
	return resp.Message.Data, resp.Message.Seq, nil
}
