package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Connect opens a NATS connection that reconnects forever, with auth's
// credentials and TLS settings. When ns is not nil the connection is made
// in-process to that embedded server (no TCP); otherwise url is dialled.
// Errors NATS reports on the connection (a refused credential, a permission
// violation) are logged, so a misconfigured process says why it does not work.
// Credentials in url never appear in those logs or in the error returned.
func Connect(url string, ns *server.Server, name string, auth Auth, log *slog.Logger) (*nats.Conn, error) {
	authOpts, err := auth.options()
	if err != nil {
		return nil, err
	}
	var lastErr atomic.Value // the last failed attempt's message, logged once
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "conn", name, "err", RedactError(err, url))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			lastErr.Store("")
			log.Info("nats reconnected", "conn", name, "url", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			if lastErr.Swap("") != nil {
				log.Info("nats connected", "conn", name, "url", RedactURL(nc.ConnectedUrl()))
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			err = RedactError(err, url)
			if err != nil && lastErr.Swap(err.Error()) != err.Error() {
				log.Warn("nats connection attempt failed; retrying", "conn", name, "err", err)
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			// A refused credential ends the connection for good: say so,
			// rather than waiting without a word.
			if err := nc.LastError(); err != nil {
				log.Error("nats connection closed; fix the NATS credentials or TLS options and restart", "conn", name, "err", RedactError(err, url))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Error("nats error", "conn", name, "subject", subject, "err", RedactError(err, url))
		}),
	}
	opts = append(opts, authOpts...)
	if ns != nil {
		opts = append(opts, nats.InProcessServer(ns))
		// No TLS in-process even when the listener has it: the server does
		// not ask for it there, and a tls:// URL would make the client try.
		url = "nats://" + strings.TrimPrefix(strings.TrimPrefix(ns.ClientURL(), "tls://"), "nats://")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", RedactURL(url), RedactError(err, url))
	}
	return nc, nil
}

// EnsureStreams creates or updates the state and counter streams with the
// default limits, kept on replicas NATS servers (replicas.go). Both are
// file-backed work queues: a message is removed once the worker acks it.
// Duplicate detection over two minutes lets a publisher retry a batch with
// the same message id without it being counted twice.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return EnsureStreamsWith(StreamLimits{Replicas: replicas})(ctx, js)
}

// RestoreStreams creates the state and counter streams that are missing,
// for a process that found them gone (NATS lost its data), and leaves the
// others as they are: updating a stream while a consumer is being added to
// it is not safe in every NATS version. A stream made here has the default
// StreamLimits until the worker applies its own, and replicas replicas.
func RestoreStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return RestoreStreamsWith(ctx, js, StreamLimits{Replicas: replicas})
}

func streamConfigs(limits StreamLimits) []jetstream.StreamConfig {
	maxBytes, maxAge := limits.resolved()
	out := []jetstream.StreamConfig{
		{Name: StateStream, Subjects: []string{stateSubjects}},
		{Name: CounterStream, Subjects: []string{counterSubjects}},
		{Name: QuotaStream, Subjects: []string{quotaSubjects}},
	}
	for i := range out {
		out[i].Storage = jetstream.FileStorage
		out[i].Retention = jetstream.WorkQueuePolicy
		out[i].Duplicates = 2 * time.Minute
		out[i].MaxMsgSize = 8 << 20
		out[i].MaxBytes = maxBytes
		out[i].MaxAge = maxAge
		out[i].Discard = jetstream.DiscardNew
		out[i].Replicas = max(limits.Replicas, 1)
	}
	return out
}

// WaitStreams polls until JetStream answers and ensure (EnsureStreams for
// the worker, which owns the streams' configuration; RestoreStreams for
// servers) succeeds, for processes that start before JetStream is ready
// and for a worker taking over while NATS elects. It never waits in
// silence: the first failure and then one every streamWaitLog are logged
// at WARN with the attempts and the time spent, and every failure is
// passed to failed when not nil (a bus.Unstick's FailedWith, so that a
// process whose NATS node lost its cluster moves to another, and a
// metric).
func WaitStreams(ctx context.Context, js jetstream.JetStream, ensure func(context.Context, jetstream.JetStream) error, log *slog.Logger, failed func(error)) error {
	start := time.Now()
	var logged time.Time
	for attempts := 1; ; attempts++ {
		err := ensure(ctx, js)
		if err == nil {
			if attempts > 1 && log != nil {
				log.Info("NATS streams ready", "attempts", attempts, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		if failed != nil {
			failed(err)
		}
		if log != nil && time.Since(logged) >= streamWaitLog {
			logged = time.Now()
			log.Warn("NATS streams not ready; retrying", "attempts", attempts, "waiting_for", time.Since(start).Round(time.Millisecond).String(), "err", err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// streamWaitLog is how often WaitStreams logs that it still waits.
const streamWaitLog = 10 * time.Second

// Request sends a request with a JSON body and decodes the reply envelope
// into out. A missing responder or a timeout is reported as unavailable.
func Request(ctx context.Context, nc *nats.Conn, subject string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", subject, err)
	}
	m := &nats.Msg{Subject: subject, Data: data}
	if a, ok := tenants.ActorFrom(ctx); ok {
		m.Header = nats.Header{ActorHeader: []string{EncodeActor(a)}}
	}
	msg, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return unavailable(subject, err)
	}
	if msg.Header.Get(RawReplyHeader) != "" {
		rr, ok := out.(RawReceiver)
		if !ok {
			return fmt.Errorf("%s: a raw reply to a request that expects JSON", subject)
		}
		return rr.SetRaw(msg.Data, msg.Header)
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

// RawReplyHeader marks a reply that travels as its own bytes instead of in
// the JSON envelope: a large binary payload (a packed page of buckets) that
// JSON would have to escape and scan. Errors always travel in the envelope.
const RawReplyHeader = "Sluice-Raw"

// PageNextHeader carries a raw page's cursor: where the next page starts.
const PageNextHeader = "Sluice-Next"

// RawReply is a reply value that can travel raw: when RawReply reports ok,
// the worker sends data with header (plus RawReplyHeader) and no envelope.
type RawReply interface {
	RawReply() (data []byte, header nats.Header, ok bool)
}

// RawReceiver is a reply value that accepts a raw reply.
type RawReceiver interface {
	SetRaw(data []byte, header nats.Header) error
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

// ParsePageTerm reads PageTermHeader into term (left alone when absent).
func ParsePageTerm(h nats.Header, term *uint64) error {
	v := h.Get(PageTermHeader)
	if v == "" {
		return nil
	}
	t, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("page term %q: %w", v, err)
	}
	*term = t
	return nil
}
