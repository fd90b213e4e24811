package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// counting binds op to a function that counts its calls and answers the
// zero reply.
func counting[Req, Res any](op Op[Req, Res], calls *int) Binding {
	return Bind(op, func(context.Context, Req) (Res, error) {
		*calls++
		var res Res
		return res, nil
	})
}

// answer decodes one request of b and serves it, as the worker does.
func answer(b Binding, data []byte) (any, error) {
	call, err := b.Decode(data)
	if err != nil {
		return nil, err
	}
	return call(context.Background())
}

// answerWire answers one request and returns the reply as it goes on the
// wire.
func answerWire(b Binding, body string) string {
	res, err := answer(b, []byte(body))
	return string(EncodeReply(res, err))
}

// Every request that carries a wire version is refused, before its
// function runs, with the message workers have always answered for it;
// the same request at WireVersion is served.
func TestBindRefusesOtherWireVersions(t *testing.T) {
	var calls int
	cases := []struct {
		b    Binding
		what string
	}{
		{counting(OpServiceKeyUsed, &calls), "service key use report"},
		{counting(OpSetupOffer, &calls), "setup offer"},
		{counting(OpSetupClaim, &calls), "setup claim"},
		{counting(OpPolicyNames, &calls), "policy names query"},
		{counting(OpKeyPage, &calls), "key page query"},
		{counting(OpKeyNames, &calls), "key names query"},
		{counting(OpCustomerPage, &calls), "customer page query"},
		{counting(OpReservationCreateAll, &calls), "reservations"},
		{counting(OpReservationCancel, &calls), "reservations"},
		{counting(QueryTopPolicies, &calls), "policy ranking query"},
		{counting(QueryUsage, &calls), "usage query"},
	}
	for _, c := range cases {
		t.Run(c.b.Name, func(t *testing.T) {
			calls = 0
			for _, v := range []int{WireVersion + 1, 0} {
				body := fmt.Sprintf(`{"v":%d,"tenant_id":"ten_a"}`, v)
				want := fmt.Sprintf(`{"v":1,"error":{"code":"%s","message":"%s: wire version %d"}}`, errs.Invalid, c.what, v)
				if got := answerWire(c.b, body); got != want {
					t.Fatalf("version %d answered\n%s\nwant\n%s", v, got, want)
				}
			}
			// A request that leaves the version out is version 0.
			if _, err := answer(c.b, []byte(`{}`)); !errs.Is(err, errs.Invalid) {
				t.Fatalf("no version: %v", err)
			}
			if calls != 0 {
				t.Fatalf("the function ran %d times for refused versions", calls)
			}
			if _, err := answer(c.b, fmt.Appendf(nil, `{"v":%d}`, WireVersion)); err != nil || calls != 1 {
				t.Fatalf("current version: %v, %d calls", err, calls)
			}
		})
	}
}

// A request without a wire version of its own is served whatever it holds,
// as before versions were checked in one place.
func TestBindServesUnversionedRequests(t *testing.T) {
	var got TenantScoped
	b := Bind(OpTenantGet, func(_ context.Context, r TenantScoped) (tenants.TenantSummary, error) {
		got = r
		return tenants.TenantSummary{}, nil
	})
	if _, err := answer(b, []byte(`{"v":7,"tenant_id":"ten_a","id":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if got != (TenantScoped{TenantID: "ten_a", ID: "x"}) {
		t.Fatalf("decoded %+v", got)
	}
}

// An empty body is the zero request; a body that is not the request's JSON
// is refused as invalid without running the function.
func TestBindDecodes(t *testing.T) {
	var calls int
	b := counting(OpTenantList, &calls)
	if _, err := answer(b, nil); err != nil || calls != 1 {
		t.Fatalf("empty body: %v, %d calls", err, calls)
	}
	scoped := counting(OpTenantGet, &calls)
	for _, body := range []string{`{`, `[]`, `{"tenant_id":5}`} {
		_, err := answer(scoped, []byte(body))
		if !errs.Is(err, errs.Invalid) || !strings.HasPrefix(errs.Message(err), "malformed request: ") {
			t.Fatalf("%s: %v", body, err)
		}
	}
	if calls != 1 {
		t.Fatalf("the function ran for malformed requests: %d calls", calls)
	}
	if scoped.Subject != ConfigPrefix+".tenant.get" || scoped.Name != "tenant.get" {
		t.Fatal("a binding is not served on its operation's subject")
	}
}

// The function's answer goes on the wire as before: a coded error keeps
// its code and message, any other error travels as internal without its
// text, and a result travels in the envelope.
func TestBindErrorsOnTheWire(t *testing.T) {
	fail := func(err error) Binding {
		return Bind(OpTenantGet, func(context.Context, TenantScoped) (tenants.TenantSummary, error) {
			return tenants.TenantSummary{}, err
		})
	}
	cases := []struct {
		err  error
		want string
	}{
		{errs.Errorf(errs.NotFound, "no tenant"), `{"v":1,"error":{"code":"not_found","message":"no tenant"}}`},
		{fmt.Errorf("wrapped: %w", errs.Errorf(errs.Conflict, "taken")), `{"v":1,"error":{"code":"conflict","message":"taken"}}`},
		{errors.New("disk on fire"), `{"v":1,"error":{"code":"internal","message":"An internal error occurred."}}`},
	}
	for _, c := range cases {
		if got := answerWire(fail(c.err), `{"tenant_id":"ten_a"}`); got != c.want {
			t.Errorf("%v answered %s, want %s", c.err, got, c.want)
		}
	}
	ok := Bind(OpTenantGet, func(_ context.Context, r TenantScoped) (tenants.TenantSummary, error) {
		return tenants.TenantSummary{Tenant: tenants.Tenant{ID: r.TenantID}}, nil
	})
	var out tenants.TenantSummary
	if err := DecodeReply([]byte(answerWire(ok, `{"tenant_id":"ten_a"}`)), &out); err != nil || out.ID != "ten_a" {
		t.Fatalf("answered %+v, %v", out, err)
	}
}

// A packed page goes raw when it fits, in the envelope when it does not or
// when the request failed.
func TestEncodeAnswer(t *testing.T) {
	page := BucketsPage{Packed: []byte("packed"), Next: "k", Order: OrderPartitionKey, Term: 3}
	data, h := EncodeAnswer(page, nil, 100)
	if string(data) != "packed" || h.Get(RawReplyHeader) != "1" || h.Get(PageNextHeader) != "k" || h.Get(PageOrderHeader) != OrderPartitionKey || h.Get(PageTermHeader) != "3" {
		t.Fatalf("raw answer %q %v", data, h)
	}
	var back BucketsPage
	if err := back.SetRaw(data, nats.Header(h)); err != nil || back.Next != "k" || back.Term != 3 {
		t.Fatalf("read back %+v %v", back, err)
	}
	for name, c := range map[string]struct {
		err error
		max int
	}{"too large": {nil, 3}, "failed": {errs.Errorf(errs.Unavailable, "later"), 100}} {
		data, h := EncodeAnswer(page, c.err, c.max)
		if h != nil || !json.Valid(data) {
			t.Fatalf("%s: answered %q with %v, want the envelope", name, data, h)
		}
		if got := DecodeReply(data, &back); errs.Code(got) != errs.Code(c.err) && c.err != nil {
			t.Fatalf("%s: %v", name, got)
		}
	}
}
