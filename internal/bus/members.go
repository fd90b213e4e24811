package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxMembers bounds how many entries ReadMembers reads of the members
// bucket: far more servers than a cluster runs.
const MaxMembers = 4096

// MemberEntry is what a process other than a server reads of a server's
// entry in MembersBucket: its node name, until when it is live, and what
// it announces it supports. internal/cluster writes the entry, with more
// fields (its listener, its instance), and keeps it the same shape.
type MemberEntry struct {
	Node    string `json:"node"`
	Expires int64  `json:"expires"` // unix ms; a server renews it every renew interval
	// FwdLeases: the server's direct listener reads forwarded items'
	// leases and releases.
	FwdLeases bool `json:"fwd_leases,omitempty"`
	// Concurrency: the server compiles concurrency limits (servers of
	// that version write it whether or not they have a direct listener).
	Concurrency bool `json:"concurrency,omitempty"`
}

// Live reports whether the entry had not run out at now.
func (e MemberEntry) Live(now time.Time) bool { return e.Expires > now.UnixMilli() }

// CompilesConcurrency reports whether the server can compile a config
// holding a concurrency limit: it says so, or its direct listener reads
// leases, which only such servers' listeners do.
func (e MemberEntry) CompilesConcurrency() bool { return e.Concurrency || e.FwdLeases }

// ErrTooManyMembers is ReadMembers' answer for a bucket of more than
// MaxMembers entries.
var ErrTooManyMembers = fmt.Errorf("the members bucket holds more than %d entries", MaxMembers)

// ReadMembers reads every entry of the members bucket, live or not, in one
// pass. A bucket that does not exist (no server has started since NATS
// lost it, or ever) holds none. An entry that does not decode is read as
// a live member, named by its key, that supports nothing.
func ReadMembers(ctx context.Context, js jetstream.JetStream, now time.Time) ([]MemberEntry, error) {
	kv, err := js.KeyValue(ctx, MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the members bucket: %w", err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("read the members bucket: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []MemberEntry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read the members bucket: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read the members bucket: the watch ended")
			}
			if e == nil { // every current value delivered
				return out, nil
			}
			if len(out) == MaxMembers {
				return nil, ErrTooManyMembers
			}
			var m MemberEntry
			if json.Unmarshal(e.Value(), &m) != nil {
				m = MemberEntry{Node: e.Key(), Expires: now.Add(time.Hour).UnixMilli()}
			}
			out = append(out, m)
		}
	}
}
