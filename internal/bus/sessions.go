package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RevokedSessionsBucket is the JetStream KV bucket of signed-out dashboard
// sessions: key the session id, value its expiry (unix seconds). Entries
// age out with the bucket's TTL, the longest a session lives.
const RevokedSessionsBucket = "sluice_revoked_sessions"

// SessionRevocations is every server's view of signed-out sessions. A
// sign-out on one server writes the bucket; every server watches it, so a
// revoked session is refused cluster-wide within moments.
type SessionRevocations struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream
	cfg jetstream.KeyValueConfig
	mu  sync.RWMutex
	m   map[string]time.Time
	now func() time.Time
}

// rewatch opens a new watch of the bucket, making the bucket again if it is
// gone, and returns it with the bucket's incarnation; it retries until ctx
// ends (then it returns nil).
func (r *SessionRevocations) rewatch(ctx context.Context) (jetstream.KeyWatcher, int64) {
	for {
		select {
		case <-ctx.Done():
			return nil, 0
		case <-time.After(250 * time.Millisecond):
		}
		if r.restore(ctx) != nil {
			continue
		}
		inc, err := r.incarnation(ctx)
		if err != nil {
			continue
		}
		if w, err := r.kv.WatchAll(ctx); err == nil {
			return w, inc
		}
	}
}

func (r *SessionRevocations) incarnation(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return Incarnation(ctx, r.kv)
}

// restore makes the bucket again if NATS lost it.
func (r *SessionRevocations) restore(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := RestoreKeyValue(ctx, r.js, r.cfg)
	return err
}

// OpenSessionRevocations creates or opens the bucket, kept on replicas NATS
// servers, loads it (within 10 s) and keeps watching it until ctx ends.
// maxAge is the longest a session lives. An existing bucket with fewer
// replicas is reported on log.
func OpenSessionRevocations(ctx context.Context, js jetstream.JetStream, maxAge time.Duration, replicas int, log *slog.Logger) (*SessionRevocations, error) {
	ctx, cancel := context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	setup, setupDone := context.WithTimeout(ctx, 10*time.Second)
	defer setupDone()
	cfg := jetstream.KeyValueConfig{
		Bucket:      RevokedSessionsBucket,
		Description: "Signed-out dashboard sessions, until they would have expired.",
		TTL:         maxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
	kv, err := OpenKeyValue(setup, js, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("revoked sessions bucket: %w", err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch revoked sessions: %w", err)
	}
	r := &SessionRevocations{kv: kv, m: map[string]time.Time{}, now: time.Now, js: js, cfg: cfg}
	loaded := make(chan struct{})
	inc, _ := r.incarnation(setup)
	go func() {
		initial := true
		check := time.NewTicker(time.Second)
		defer check.Stop()
		for {
			select {
			case <-ctx.Done():
			case e, ok := <-w.Updates():
				if !ok {
					break // NATS gave up on the watch
				}
				if e == nil { // the bucket's existing entries are all delivered
					if initial {
						initial = false
						close(loaded)
					}
				} else {
					r.apply(e)
				}
				continue
			case <-check.C:
				// A bucket lost and made again numbers its entries from 1,
				// and a watch resumed by the client would skip them.
				now, err := r.incarnation(ctx)
				if (err == nil && now == inc) || (err != nil && !errors.Is(err, jetstream.ErrBucketNotFound)) {
					continue
				}
			}
			_ = w.Stop()
			if initial {
				initial = false
				close(loaded)
			}
			// Watch again, making the bucket if it must be, so that
			// sign-outs elsewhere keep arriving.
			if w, inc = r.rewatch(ctx); w == nil {
				return
			}
		}
	}()
	select {
	case <-loaded:
	case <-setup.Done():
		return nil, fmt.Errorf("load revoked sessions: %w", setup.Err())
	}
	ok = true
	return r, nil
}

func (r *SessionRevocations) apply(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.m, e.Key())
		return
	}
	sec, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return
	}
	r.m[e.Key()] = time.Unix(sec, 0)
	// Forget what has expired anyway, so the map follows live sessions.
	now := r.now()
	for k, until := range r.m {
		if now.After(until) {
			delete(r.m, k)
		}
	}
}

// Revoke marks session sid, which expires at until, as signed out.
func (r *SessionRevocations) Revoke(ctx context.Context, sid string, until time.Time) error {
	if sid == "" {
		return errors.New("revoke session: empty id")
	}
	r.mu.Lock()
	r.m[sid] = until
	r.mu.Unlock()
	val := []byte(strconv.FormatInt(until.Unix(), 10))
	_, err := r.kv.Put(ctx, sid, val)
	if errors.Is(err, jetstream.ErrNoStreamResponse) && r.restore(ctx) == nil {
		_, err = r.kv.Put(ctx, sid, val) // the bucket was gone; it is back
	}
	if err != nil {
		return fmt.Errorf("revoke session: %w", err)
	}
	return nil
}

// Revoked reports whether session sid was signed out.
func (r *SessionRevocations) Revoked(sid string) bool {
	r.mu.RLock()
	until, ok := r.m[sid]
	r.mu.RUnlock()
	return ok && !r.now().After(until)
}
