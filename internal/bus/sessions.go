package bus

import (
	"context"
	"errors"
	"fmt"
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
	mu  sync.RWMutex
	m   map[string]time.Time
	now func() time.Time
}

// OpenSessionRevocations creates or opens the bucket, loads it (within
// 10 s) and keeps watching it until ctx ends. maxAge is the longest a
// session lives.
func OpenSessionRevocations(ctx context.Context, js jetstream.JetStream, maxAge time.Duration) (*SessionRevocations, error) {
	ctx, cancel := context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			cancel()
		}
	}()
	setup, setupDone := context.WithTimeout(ctx, 10*time.Second)
	defer setupDone()
	kv, err := js.CreateOrUpdateKeyValue(setup, jetstream.KeyValueConfig{
		Bucket:      RevokedSessionsBucket,
		Description: "Signed-out dashboard sessions, until they would have expired.",
		TTL:         maxAge,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("revoked sessions bucket: %w", err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch revoked sessions: %w", err)
	}
	r := &SessionRevocations{kv: kv, m: map[string]time.Time{}, now: time.Now}
	loaded := make(chan struct{})
	go func() {
		defer w.Stop()
		initial := true
		for e := range w.Updates() {
			if e == nil { // the bucket's existing entries are all delivered
				if initial {
					initial = false
					close(loaded)
				}
				continue
			}
			r.apply(e)
		}
		if initial {
			close(loaded)
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
	if _, err := r.kv.Put(ctx, sid, []byte(strconv.FormatInt(until.Unix(), 10))); err != nil {
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
