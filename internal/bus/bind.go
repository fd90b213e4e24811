package bus

// The serving side of the operation table: Bind ties an operation to the
// typed function that answers it. A Binding reads a request in the one
// way every worker endpoint has read it since the table was defined: an
// empty body is the zero request, a body that is not the request's JSON is
// refused as errs.Invalid "malformed request: …", and a request that
// carries a wire version (versioned) is refused as errs.Invalid
// "<what>: wire version <v>" unless it is WireVersion. Those messages are
// on the wire, so servers of another release read them as before.

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/errs"
)

// Binding is one operation bound to the function that answers it. Create
// it with Bind or BindSubject.
type Binding struct {
	// Name is the operation as metrics name it (Op.Name).
	Name string
	// Subject is where the operation is served.
	Subject string
	decode  func(data []byte) (func(context.Context) (any, error), error)
}

// Bind binds op to fn: fn takes and answers op's own types, so a handler
// and the requests servers send cannot disagree.
func Bind[Req, Res any](op Op[Req, Res], fn func(context.Context, Req) (Res, error)) Binding {
	return BindSubject(op.Name, op.Subject(), fn)
}

// BindSubject is Bind for a request served outside the operation table
// (BucketsSubject, SyncSubject).
func BindSubject[Req, Res any](name, subject string, fn func(context.Context, Req) (Res, error)) Binding {
	return Binding{Name: name, Subject: subject, decode: func(data []byte) (func(context.Context) (any, error), error) {
		req, err := decodeRequest[Req](data)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (any, error) { return fn(ctx, req) }, nil
	}}
}

// Decode reads one request of b's operation and answers the call that
// serves it, or the error to answer instead (malformed, or a wire version
// this build does not know). The caller may admit the request between the
// two.
func (b Binding) Decode(data []byte) (call func(context.Context) (any, error), err error) {
	return b.decode(data)
}

func decodeRequest[Req any](data []byte) (Req, error) {
	var req Req
	if len(data) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return req, errs.Errorf(errs.Invalid, "malformed request: %v", err)
		}
	}
	if v, ok := any(req).(versioned); ok {
		if n, what := v.wireVersion(); n != WireVersion {
			return req, errs.Errorf(errs.Invalid, "%s: wire version %d", what, n)
		}
	}
	return req, nil
}

// versioned is a request that carries its wire version (a field V);
// what names the request in the refusal of another version.
type versioned interface {
	wireVersion() (v int, what string)
}

func (r ServiceKeyUsed) wireVersion() (int, string)    { return r.V, "service key use report" }
func (r SetupOffer) wireVersion() (int, string)        { return r.V, "setup offer" }
func (r SetupClaim) wireVersion() (int, string)        { return r.V, "setup claim" }
func (r PolicyNames) wireVersion() (int, string)       { return r.V, "policy names query" }
func (r KeyPageQuery) wireVersion() (int, string)      { return r.V, "key page query" }
func (r KeyNames) wireVersion() (int, string)          { return r.V, "key names query" }
func (r CustomerPageQuery) wireVersion() (int, string) { return r.V, "customer page query" }
func (r ReservationBatch) wireVersion() (int, string)  { return r.V, "reservations" }
func (r PolicyRankRequest) wireVersion() (int, string) { return r.V, "policy ranking query" }
func (r UsageRequest) wireVersion() (int, string)      { return r.V, "usage query" }

// EncodeAnswer is the reply to a request that res and err answer: a
// RawReply's own bytes and headers (with RawReplyHeader) when res has
// them and they fit in maxSize bytes, otherwise the envelope
// (EncodeReply) and no headers.
func EncodeAnswer(res any, err error, maxSize int) (data []byte, header nats.Header) {
	if raw, ok := res.(RawReply); ok && err == nil {
		if data, hdr, ok := raw.RawReply(); ok && len(data) <= maxSize {
			h := nats.Header{RawReplyHeader: []string{"1"}}
			for k, v := range hdr {
				h[k] = v
			}
			return data, h
		}
	}
	return EncodeReply(res, err), nil
}
