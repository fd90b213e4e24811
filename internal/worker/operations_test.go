package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
)

// A server of another release that sends a wire version this worker does
// not know gets, on every operation that carries one, the same refusal
// byte for byte as workers have always answered; a malformed request is
// refused as invalid too.
func TestOperationsRefuseOtherWireVersions(t *testing.T) {
	e := newEnv(t, Config{})
	e.run(t)
	cases := []struct {
		op   bus.AnyOp
		what string
	}{
		{bus.OpServiceKeyUsed, "service key use report"},
		{bus.OpSetupOffer, "setup offer"},
		{bus.OpSetupClaim, "setup claim"},
		{bus.OpPolicyNames, "policy names query"},
		{bus.OpKeyPage, "key page query"},
		{bus.OpKeyNames, "key names query"},
		{bus.OpReservationCreateAll, "reservations"},
		{bus.OpReservationCancel, "reservations"},
		{bus.QueryTopPolicies, "policy ranking query"},
		{bus.QueryUsage, "usage query"},
	}
	for _, c := range cases {
		want := fmt.Sprintf(`{"v":1,"error":{"code":"%s","message":"%s: wire version 2"}}`, errs.Invalid, c.what)
		var got string
		eventually(t, 10*time.Second, c.op.OpName()+" answers", func() bool {
			msg, err := e.nc.Request(c.op.Subject(), []byte(`{"v":2,"tenant_id":"ten_a"}`), time.Second)
			if err != nil {
				return false
			}
			got = string(msg.Data)
			return true
		})
		if got != want {
			t.Errorf("%s answered\n%s\nwant\n%s", c.op.OpName(), got, want)
		}
	}
	msg, err := e.nc.Request(bus.OpTenantGet.Subject(), []byte(`{"tenant_id":`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.DecodeReply(msg.Data, nil); !errs.Is(err, errs.Invalid) || !strings.HasPrefix(errs.Message(err), "malformed request: ") {
		t.Fatalf("a malformed request: %v", err)
	}
}

// The micro service names its endpoints as before the table was bound.
func TestEndpointNames(t *testing.T) {
	w := &Worker{}
	names := map[string]string{}
	for _, b := range append(w.analyticsOperations(), w.configOperations()...) {
		names[b.Subject] = endpointName(b)
	}
	for subject, want := range map[string]string{
		bus.OpTenantCreate.Subject():      "config_tenant_create",
		bus.OpServiceKeyUsed.Subject():    "config_service_key_used",
		bus.OpWebhookDeliveries.Subject(): "config_webhook_deliveries",
		bus.QueryTopPolicies.Subject():    "analytics_top_policies",
		bus.QueryTimeseries.Subject():     "analytics_timeseries",
	} {
		if names[subject] != want {
			t.Errorf("%s is served as %q, want %q", subject, names[subject], want)
		}
	}
	if got := endpointName(bus.BindSubject("buckets", bus.BucketsSubject, (&Worker{}).syncs.wait)); got != "buckets" {
		t.Errorf("hydration is served as %q", got)
	}
}
