package worker

// The worker's request/reply endpoints: every operation is a bus.Binding
// (operations.go, and hydration and sync), answered by handle in a
// goroutine of its own; replies too large for one NATS message are kept
// in parts (largeReplies).

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func (w *Worker) registerEndpoints(svc micro.Service) error {
	if err := svc.AddEndpoint("part", micro.HandlerFunc(w.large.serve), micro.WithEndpointSubject(bus.PartSubject)); err != nil {
		return err
	}
	bs := []bus.Binding{
		bus.BindSubject("buckets", bus.BucketsSubject, w.buckets.page),
		bus.BindSubject("sync", bus.SyncSubject, w.syncs.wait),
	}
	bs = append(bs, w.analyticsOperations()...)
	bs = append(bs, w.configOperations()...)
	for _, b := range bs {
		if err := svc.AddEndpoint(endpointName(b), handle(w, b), micro.WithEndpointSubject(b.Subject)); err != nil {
			return err
		}
	}
	return nil
}

// endpointName is b's name in the micro service: its operation's, with
// its kind in front and no dots ("config_tenant_create").
func endpointName(b bus.Binding) string {
	name := strings.ReplaceAll(b.Name, ".", "_")
	switch {
	case strings.HasPrefix(b.Subject, bus.ConfigPrefix+"."):
		return "config_" + name
	case strings.HasPrefix(b.Subject, bus.AnalyticsPrefix+"."):
		return "analytics_" + name
	}
	return name
}

// requestActor returns ctx carrying the actor the request names in
// bus.ActorHeader, for the audit log. A request without one (a server of an
// older version) is recorded as made by an unknown actor rather than
// refused, so an upgrade does not stop config writes; one that cannot be
// read is recorded the same way, since refusing it would lose the change
// and not only its author.
func requestActor(ctx context.Context, h micro.Headers) context.Context {
	v := h.Get(bus.ActorHeader)
	if v == "" {
		return tenants.WithActor(ctx, tenants.Actor{Kind: tenants.ActorUnknown, Label: "unknown"})
	}
	a, err := bus.DecodeActor(v)
	if err != nil {
		return tenants.WithActor(ctx, tenants.Actor{Kind: tenants.ActorUnknown, Label: "unknown"})
	}
	return tenants.WithActor(ctx, a)
}

// handle adapts a binding to a micro endpoint: it decodes the request,
// admits it (admitConfigWrite), runs it, and replies. Each call runs in its
// own goroutine so a slow request (a sync wait) does not hold up the others.
func handle(w *Worker, b bus.Binding) micro.Handler {
	op := b.Name
	return micro.HandlerFunc(func(r micro.Request) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var res any
			ctx = requestActor(ctx, r.Headers())
			call, err := b.Decode(r.Data())
			if err == nil {
				var release func()
				if release, err = w.admitConfigWrite(ctx, op, r.Data()); err == nil {
					res, err = call(ctx)
					release()
				}
			}
			if err != nil && diskFull(err) {
				w.log.Error("SQLite disk is full: a config write or query failed; free space under --data", "op", op, "err", err)
				err = errs.Errorf(errs.Unavailable, "Sluice cannot store this now: its database's disk is full. Try again once there is room.")
			}
			code := "ok"
			if err != nil {
				code = errs.Code(err)
				if code == errs.Internal {
					w.log.Error("request failed", "op", op, "err", err)
				}
			}
			w.metrics.configOps.WithLabelValues(op, code).Inc()
			maxSize := int(w.nc.MaxPayload()) - 1024
			data, hdr := bus.EncodeAnswer(res, err, maxSize)
			var opts []micro.RespondOpt
			switch {
			case hdr != nil:
				opts = append(opts, micro.WithHeaders(micro.Headers(hdr)))
			case len(data) > maxSize:
				data = w.large.keep(data, maxSize)
			}
			if rerr := r.Respond(data, opts...); rerr != nil {
				w.log.Warn("reply failed", "op", op, "err", rerr)
			}
		}()
	})
}

// largeReplies keeps replies larger than one NATS message for a minute, in
// parts a client fetches one by one from bus.PartSubject (bus.Request does
// it). At most 8 are kept: a client slower than that starts again.
type largeReplies struct {
	mu  sync.Mutex
	seq uint64
	m   map[string]largeReply
}

type largeReply struct {
	parts [][]byte
	at    time.Time
}

// keep stores data in parts of at most maxPart bytes and returns the reply
// that stands for it.
func (l *largeReplies) keep(data []byte, maxPart int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.m == nil {
		l.m = map[string]largeReply{}
	}
	for id, r := range l.m {
		if now.Sub(r.at) > time.Minute || len(l.m) >= 8 {
			delete(l.m, id)
		}
	}
	l.seq++
	id := strconv.FormatUint(l.seq, 10) + "." + strconv.FormatInt(now.UnixNano(), 36)
	parts := bus.SplitReply(data, max(maxPart, 1024))
	l.m[id] = largeReply{parts: parts, at: now}
	return bus.EncodeParts(id, len(parts))
}

// serve answers one PartRequest with the part's raw bytes.
func (l *largeReplies) serve(r micro.Request) {
	var req bus.PartRequest
	fail := func(msg string) {
		_ = r.Respond(nil, micro.WithHeaders(micro.Headers{bus.PartErrorHeader: []string{msg}}))
	}
	if err := json.Unmarshal(r.Data(), &req); err != nil {
		fail("malformed part request")
		return
	}
	l.mu.Lock()
	rep, ok := l.m[req.ID]
	l.mu.Unlock()
	switch {
	case !ok:
		fail("the reply expired; ask again")
	case req.Part < 0 || req.Part >= len(rep.parts):
		fail("no such part")
	default:
		_ = r.Respond(rep.parts[req.Part])
	}
}
