package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/errs"
)

// Connect opens a NATS connection that reconnects forever. When ns is not
// nil the connection is made in-process to that embedded server (no TCP);
// otherwise url is dialled.
func Connect(url string, ns *server.Server, name string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "conn", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "conn", name, "url", nc.ConnectedUrlRedacted())
		}),
	}
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
		url = ns.ClientURL()
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", url, err)
	}
	return nc, nil
}

// EnsureStreams creates or updates the state and counter streams. Both are
// file-backed work queues: a message is removed once the worker acks it.
// Duplicate detection over two minutes lets a publisher retry a batch with
// the same message id without it being counted twice.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	return EnsureStreamsWith(StreamLimits{})(ctx, js)
}

// RestoreStreams creates the state and counter streams that are missing,
// for a process that found them gone (NATS lost its data), and leaves the
// others as they are: updating a stream while a consumer is being added to
// it is not safe in every NATS version. A stream made here has the default
// StreamLimits until the worker applies its own.
func RestoreStreams(ctx context.Context, js jetstream.JetStream) error {
	return RestoreStreamsWith(ctx, js, StreamLimits{})
}

func streamConfigs(limits StreamLimits) []jetstream.StreamConfig {
	maxBytes, maxAge := limits.resolved()
	out := []jetstream.StreamConfig{
		{Name: StateStream, Subjects: []string{stateSubjects}},
		{Name: CounterStream, Subjects: []string{counterSubjects}},
	}
	for i := range out {
		out[i].Storage = jetstream.FileStorage
		out[i].Retention = jetstream.WorkQueuePolicy
		out[i].Duplicates = 2 * time.Minute
		out[i].MaxMsgSize = 8 << 20
		out[i].MaxBytes = maxBytes
		out[i].MaxAge = maxAge
		out[i].Discard = jetstream.DiscardNew
	}
	return out
}

// WaitStreams polls until JetStream answers and ensure (EnsureStreams for
// the worker, which owns the streams' configuration; RestoreStreams for
// servers) succeeds, for processes that start before JetStream is ready.
func WaitStreams(ctx context.Context, js jetstream.JetStream, ensure func(context.Context, jetstream.JetStream) error) error {
	for {
		err := ensure(ctx, js)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Request sends a request with a JSON body and decodes the reply envelope
// into out. A missing responder or a timeout is reported as unavailable.
func Request(ctx context.Context, nc *nats.Conn, subject string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", subject, err)
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return unavailable(subject, err)
	}
	reply := msg.Data
	var head struct {
		Parts *PartsRef `json:"parts"`
	}
	if json.Unmarshal(reply, &head) == nil && head.Parts != nil {
		if reply, err = fetchParts(ctx, nc, *head.Parts); err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
	}
	return DecodeReply(reply, out)
}

// fetchParts reassembles a reply the worker sent in parts.
func fetchParts(ctx context.Context, nc *nats.Conn, ref PartsRef) ([]byte, error) {
	var all []byte
	for i := range ref.Count {
		req, _ := json.Marshal(PartRequest{ID: ref.ID, Part: i})
		msg, err := nc.RequestWithContext(ctx, PartSubject, req)
		if err != nil {
			return nil, unavailable(PartSubject, err)
		}
		if e := msg.Header.Get(PartErrorHeader); e != "" {
			return nil, errs.Errorf(errs.Unavailable, "part %d of %d of a large reply: %s", i+1, ref.Count, e)
		}
		all = append(all, msg.Data...)
	}
	return all, nil
}
