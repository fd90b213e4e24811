package worker

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// receiver is a real HTTPS endpoint on 127.0.0.1 that verifies every
// delivery's signature by itself (not with package webhook) and keeps
// what it received, in order.
type receiver struct {
	t      *testing.T
	addr   string
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []received
	// answer, when set, decides the status of the n-th request (from 1);
	// 200 otherwise.
	answer func(n int) int
	n      int
}

type received struct {
	ID, Type string
	Data     map[string]any
	At       time.Time // when it arrived
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.start("127.0.0.1:0")
	t.Cleanup(r.stop)
	return r
}

func (r *receiver) start(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = l.Addr().String()
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Listener.Close()
	r.srv.Listener = l
	r.srv.StartTLS()
}

func (r *receiver) stop() {
	if r.srv != nil {
		r.srv.CloseClientConnections()
		r.srv.Close()
		r.srv = nil
	}
}

func (r *receiver) url() string { return "https://" + r.addr + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.n++
	n, answer, secret := r.n, r.answer, r.secret
	r.mu.Unlock()
	id, ts, sigs := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	if !verify(secret, id, ts, body, sigs) {
		r.t.Errorf("delivery %s: signature %q does not verify", id, sigs)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		r.t.Errorf("delivery %s: timestamp %q", id, ts)
	}
	status := http.StatusOK
	if answer != nil {
		status = answer(n)
	}
	if status == 0 { // hang past the attempt's timeout
		select {
		case <-req.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	if status/100 == 2 {
		var ev received
		if err := json.Unmarshal(body, &ev); err != nil {
			r.t.Errorf("delivery %s: body %s: %v", id, body, err)
		}
		ev.ID, ev.At = id, time.Now()
		r.mu.Lock()
		r.got = append(r.got, ev)
		r.mu.Unlock()
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte("answer " + strconv.Itoa(status)))
}

// verify checks a Standard Webhooks signature as a receiver would.
func verify(secret, id, ts string, body []byte, header string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(header) {
		v, sig, ok := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(sig)
		if ok && v == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

func (r *receiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *receiver) setSecret(s string) {
	r.mu.Lock()
	r.secret = s
	r.mu.Unlock()
}

// caFile writes the certificate of httptest's TLS servers (the same for
// all of them) where --webhook-ca-file can read it.
func caFile(t *testing.T) string {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// webhookConfig delivers to 127.0.0.1 quickly: short timeout, retries
// within a second or two.
func webhookConfig(t *testing.T) Config {
	return Config{Webhooks: WebhookOptions{AllowPrivate: true, CAFile: caFile(t), Timeout: 300 * time.Millisecond,
		KeyFile:  filepath.Join(t.TempDir(), "webhook.key"),
		Schedule: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		Poll:     20 * time.Millisecond}}
}

func ptr[T any](v T) *T { return &v }

func (e *env) hook(t *testing.T, tenantID string, r *receiver, events ...string) tenants.Webhook {
	t.Helper()
	b := tenants.WebhookBody{URL: ptr(r.url())}
	if len(events) > 0 {
		b.Events = &events
	}
	c, err := e.w.config.Services().Webhooks.Create(context.Background(), tenantID, b)
	if err != nil {
		t.Fatal(err)
	}
	r.setSecret(c.Secret)
	return c.Webhook
}

func (e *env) tenant(t *testing.T, name string) tenants.Tenant {
	t.Helper()
	tn, _, _, err := e.w.store.Tenants().Create(context.Background(), name, "owner@"+name+".test", "a long passphrase", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func (e *env) deliveries(t *testing.T, tenantID, webhookID string) []tenants.WebhookDelivery {
	t.Helper()
	p, err := e.w.config.Services().Webhooks.Deliveries(context.Background(), tenants.DeliveryQuery{TenantID: tenantID, WebhookID: webhookID, Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	return p.Deliveries
}

// keyIDs are the key ids of the events of a type received, sorted: keys
// are ordering keys of their own, so events of different keys may arrive
// in any order.
func keyIDs(rs []received, event string) []string {
	var out []string
	for _, r := range rs {
		if r.Type == event {
			out = append(out, r.Data["id"].(string))
		}
	}
	slices.Sort(out)
	return out
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// Real deliveries to real HTTPS receivers: one that answers at once, one
// that answers 500 for a while, one that hangs past the attempt's
// timeout, and one that is down for a while (its port closed, then open
// again). Every delivery arrives, signed, in order per key.
func TestWebhookDeliveriesToRealReceivers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, webhookConfig(t))
	e.run(t)
	tn := e.tenant(t, "acme")
	keysEv := []string{tenants.EventKeyCreated, tenants.EventKeyRevoked}

	ok, failing, slow, down := newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)
	failing.answer = func(n int) int {
		if n <= 3 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	}
	slow.answer = func(n int) int {
		if n == 1 {
			return 0
		}
		return http.StatusOK
	}
	hooks := map[*receiver]tenants.Webhook{}
	for _, r := range []*receiver{ok, failing, slow, down} {
		hooks[r] = e.hook(t, tn.ID, r, keysEv...)
	}
	downAddr := down.addr
	down.stop()

	keys := e.w.config.Services().Keys
	var created []string
	for i := range 3 {
		k, err := keys.Create(ctx, serviceKeyCreate(tn.ID, "key-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, k.Result.Key.ID)
	}
	if _, err := keys.Revoke(ctx, tn.ID, created[0]); err != nil {
		t.Fatal(err)
	}
	wantEvents := func(r *receiver) bool {
		rs := r.events()
		return slices.Equal(keyIDs(rs, tenants.EventKeyCreated), sorted(created)) && slices.Equal(keyIDs(rs, tenants.EventKeyRevoked), created[:1])
	}
	for name, r := range map[string]*receiver{"answering": ok, "500 for a while": failing, "timing out": slow} {
		eventually(t, 10*time.Second, name+" receives every event", func() bool { return wantEvents(r) })
	}
	// Key 0's revoke came after its create, also where its create
	// failed at first.
	for _, r := range []*receiver{ok, failing, slow} {
		rs := r.events()
		if i, j := slices.IndexFunc(rs, func(r received) bool { return r.Type == tenants.EventKeyCreated && r.Data["id"] == created[0] }),
			slices.IndexFunc(rs, func(r received) bool { return r.Type == tenants.EventKeyRevoked }); i > j {
			t.Fatalf("revoke before create: %+v", rs)
		}
	}
	// The 500s and the timeout were retried (requests of different keys
	// go in parallel, so any of them may have been the first), and the
	// list shows it.
	for r, wantRetries := range map[*receiver]int{failing: 3, slow: 1} {
		// A receiver has an event before the worker has recorded its
		// answer: wait for the records.
		eventually(t, 10*time.Second, "the deliveries to "+r.addr+" recorded", func() bool {
			for _, d := range e.deliveries(t, tn.ID, hooks[r].ID) {
				if d.Status == tenants.DeliveryPending {
					return false
				}
			}
			return true
		})
		retries := 0
		for _, d := range e.deliveries(t, tn.ID, hooks[r].ID) {
			if d.Status != tenants.DeliveryDelivered || d.ResponseCode/100 != 2 {
				t.Fatalf("not delivered: %+v", d)
			}
			retries += d.Attempts - 1
		}
		if retries != wantRetries {
			t.Fatalf("%d retries to %s, want %d", retries, r.addr, wantRetries)
		}
	}

	// The endpoint that is down: attempts fail, and the next of each key
	// waits behind the first.
	eventually(t, 10*time.Second, "attempts to the down endpoint", func() bool {
		for _, d := range e.deliveries(t, tn.ID, hooks[down].ID) {
			if d.Attempts >= 2 && strings.Contains(d.LastError, "refused") {
				return true
			}
		}
		return false
	})
	for _, d := range e.deliveries(t, tn.ID, hooks[down].ID) {
		if d.Status == tenants.DeliveryDelivered {
			t.Fatalf("delivered to a closed port: %+v", d)
		}
	}
	down.start(downAddr)
	eventually(t, 10*time.Second, "the endpoint back up receives every event", func() bool { return wantEvents(down) })
	// Nothing twice: each delivery id once.
	seen := map[string]bool{}
	for _, r := range down.events() {
		if seen[r.ID] {
			t.Fatalf("delivery %s received twice", r.ID)
		}
		seen[r.ID] = true
	}
}

func serviceKeyCreate(tenantID, name string) service.KeyCreate {
	return service.KeyCreate{TenantID: tenantID, Name: name, Tier: "pro"}
}

// A quota crossing reported by two servers, one of them twice, is one
// delivery per threshold; the reset comes once the period ends.
func TestQuotaCrossingsAreDeliveredOncePerThreshold(t *testing.T) {
	e := newEnv(t, webhookConfig(t))
	e.run(t)
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	e.hook(t, tn.ID, r, tenants.EventQuotaThreshold, tenants.EventQuotaReset)

	now := time.Now()
	start, end := now.Add(-time.Hour).Unix(), now.Add(2*time.Second).Unix()
	crossing := func(before, after int64) bus.QuotaCrossing {
		return bus.QuotaCrossing{TenantID: tn.ID, KeyID: "ck_1", Policy: "api", Limit: "monthly", Calendar: "month", Quota: 1000,
			Before: before, After: after, PeriodStart: start, PeriodEnd: end, At: now.UnixNano()}
	}
	batch := func(node string, cs ...bus.QuotaCrossing) bus.QuotaBatch {
		return bus.QuotaBatch{V: bus.WireVersion, Node: node, Crossings: cs}
	}
	e.publish(t, bus.QuotaSubjectPrefix+"n1", "n1-q-1", batch("n1", crossing(790, 805)))
	e.publish(t, bus.QuotaSubjectPrefix+"n1", "n1-q-1", batch("n1", crossing(790, 805))) // a retried publish
	e.publish(t, bus.QuotaSubjectPrefix+"n2", "n2-q-1", batch("n2", crossing(795, 801), crossing(999, 1000)))
	e.publish(t, bus.QuotaSubjectPrefix+"n1", "n1-q-2", batch("n1", crossing(998, 1001)))

	eventually(t, 10*time.Second, "80 %, 100 % and the reset", func() bool { return len(r.events()) >= 3 })
	time.Sleep(500 * time.Millisecond)
	got := r.events()
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3: %+v", len(got), got)
	}
	if got[0].Type != tenants.EventQuotaThreshold || got[0].Data["threshold"] != 80.0 ||
		got[1].Type != tenants.EventQuotaThreshold || got[1].Data["threshold"] != 100.0 || got[2].Type != tenants.EventQuotaReset {
		t.Fatalf("deliveries %+v", got)
	}
	if got[0].Data["key_id"] != "ck_1" || got[0].Data["quota"] != 1000.0 || got[0].Data["period_end"] != time.Unix(end, 0).UTC().Format(time.RFC3339) {
		t.Fatalf("threshold data %+v", got[0].Data)
	}
	if time.Now().Before(time.Unix(end, 0)) {
		t.Fatal("the reset came before the period's end")
	}
}

// Deliveries pending when the worker stops are sent by the next one.
func TestWebhookDeliveriesSurviveARestart(t *testing.T) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	e := newEnv(t, cfg)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.w.Run(runCtx) }()
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	wh := e.hook(t, tn.ID, r, tenants.EventKeyCreated)
	addr := r.addr
	r.stop()
	var created []string
	for i := range 3 {
		k, err := e.w.config.Services().Keys.Create(ctx, serviceKeyCreate(tn.ID, "key-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, k.Result.Key.ID)
	}
	eventually(t, 10*time.Second, "a failed attempt", func() bool {
		ds := e.deliveries(t, tn.ID, wh.ID)
		return len(ds) == 3 && ds[2].Attempts > 0
	})
	stop()
	<-done

	w2, err := New(cfg, e.db, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	e.w = w2
	r.start(addr)
	e.run(t)
	defer func() {
		if t.Failed() {
			for _, d := range e.deliveries(t, tn.ID, wh.ID) {
				t.Logf("%+v", d)
			}
		}
	}()
	eventually(t, 10*time.Second, "the new worker delivers what was pending", func() bool {
		return slices.Equal(keyIDs(r.events(), tenants.EventKeyCreated), sorted(created))
	})
}

// Another tenant's webhook is not found, and a URL that is not HTTPS or
// points at a private address is refused naming url, with nothing stored.
func TestWebhookIsolationAndRefusals(t *testing.T) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	cfg.Webhooks.AllowPrivate = false
	e := newEnv(t, cfg)
	a, b := e.tenant(t, "acme"), e.tenant(t, "globex")
	svc := e.w.config.Services().Webhooks
	for _, u := range []string{"http://example.com/hook", "https://127.0.0.1:8443/hook", "https://10.0.0.1/hook", "https://localhost/hook", "https://[::1]/hook", "https://169.254.169.254/"} {
		_, err := svc.Create(ctx, a.ID, tenants.WebhookBody{URL: ptr(u)})
		if !errs.Is(err, errs.Invalid) || !strings.HasPrefix(errs.Message(err), "url: ") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if ws, _ := svc.List(ctx, a.ID); len(ws) != 0 {
		t.Fatalf("refused URLs stored: %+v", ws)
	}
	// Stored directly (as if it had resolved elsewhere), a loopback
	// endpoint is still not reached: the dialer refuses it.
	c, err := e.w.store.Webhooks().Create(ctx, a.ID, tenants.WebhookBody{URL: ptr("https://127.0.0.1:1/hook")}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(ctx, b.ID, c.Webhook.ID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
	if _, err := svc.Update(ctx, b.ID, c.Webhook.ID, tenants.WebhookBody{URL: ptr("https://example.com/")}); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's update: %v", err)
	}
	if _, err := svc.Deliveries(ctx, tenants.DeliveryQuery{TenantID: b.ID, WebhookID: c.Webhook.ID}); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's deliveries: %v", err)
	}
	if _, err := svc.Rotate(ctx, b.ID, c.Webhook.ID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's rotate: %v", err)
	}
	if _, err := svc.Delete(ctx, b.ID, c.Webhook.ID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's delete: %v", err)
	}
	e.run(t)
	eventually(t, 10*time.Second, "the attempt refused by the dialer", func() bool {
		for _, d := range e.deliveries(t, a.ID, c.Webhook.ID) {
			if d.LastError == "refused to connect: the host's address is not a public one" {
				return true
			}
		}
		return false
	})
}

// A caller that enters the tenant's top offenders is announced once, not
// again at the next look.
func TestTopOffenderAnnouncedOnce(t *testing.T) {
	cfg := webhookConfig(t)
	cfg.Webhooks.TopOffenderInterval = 100 * time.Millisecond
	e := newEnv(t, cfg)
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	e.hook(t, tn.ID, r, tenants.EventTopOffender)
	e.run(t)
	minute := time.Now().Unix() / 60
	row := func(ip string, allowed, denied int64) bus.CounterRow {
		return bus.CounterRow{CounterKey: bus.CounterKey{TenantID: tn.ID, Policy: "p", Tier: "anonymous", IdentityKind: "ip", IdentityID: ip, Minute: minute},
			Allowed: allowed, Denied: denied, RateLimited: denied}
	}
	e.publish(t, bus.CounterSubjectPrefix+"n1", "n1-c-1", bus.CounterBatch{V: bus.WireVersion, Node: "n1",
		Rows: []bus.CounterRow{row("192.0.2.1", 5, 40), row("192.0.2.2", 9, 0)}})
	eventually(t, 10*time.Second, "the offender announced", func() bool { return len(r.events()) == 1 })
	time.Sleep(500 * time.Millisecond) // several more looks
	got := r.events()
	if len(got) != 1 || got[0].Type != tenants.EventTopOffender {
		t.Fatalf("events %+v", got)
	}
	id, _ := got[0].Data["identity"].(map[string]any)
	if id["id"] != "192.0.2.1" || got[0].Data["denied"] != 40.0 || got[0].Data["rank"] != 1.0 {
		t.Fatalf("offender %+v", got[0].Data)
	}
}

// Events of one ordering key (config changes are the tenant's) arrive in
// the order they happened, each once, through an endpoint that answers
// 500, then hangs past the timeout, then works.
func TestWebhookOrderPerKeyThroughFailures(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, webhookConfig(t))
	e.run(t)
	tn := e.tenant(t, "acme")
	r := newReceiver(t)
	r.answer = func(n int) int {
		switch {
		case n <= 2:
			return http.StatusInternalServerError
		case n == 3:
			return 0
		}
		return http.StatusOK
	}
	e.hook(t, tn.ID, r, tenants.EventConfigChanged)
	for i := range 10 {
		if _, err := e.w.config.Services().Keys.Create(ctx, serviceKeyCreate(tn.ID, "key-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The endpoint's own creation and the ten keys'.
	eventually(t, 15*time.Second, "eleven config changes", func() bool { return len(r.events()) >= 11 })
	got := r.events()
	if len(got) != 11 {
		t.Fatalf("%d events, want 11", len(got))
	}
	var last float64
	for i, ev := range got {
		id, _ := ev.Data["id"].(float64)
		if ev.Type != tenants.EventConfigChanged || id <= last {
			t.Fatalf("event %d: audit entry %v after %v: %+v", i, id, last, got)
		}
		last = id
	}
}

// A tenant whose endpoint hangs on every request does not hold up another
// tenant's deliveries: they all arrive while the hanging endpoint's first
// attempts are still waiting for their timeout.
func TestWebhookDownEndpointDoesNotSlowOthers(t *testing.T) {
	ctx := context.Background()
	cfg := webhookConfig(t)
	cfg.Webhooks.Timeout = 5 * time.Second
	e := newEnv(t, cfg)
	e.run(t)
	slowTenant, fastTenant := e.tenant(t, "slow"), e.tenant(t, "fast")
	hanging, fine := newReceiver(t), newReceiver(t)
	hanging.answer = func(int) int { return 0 }
	slow := e.hook(t, slowTenant.ID, hanging, tenants.EventKeyCreated)
	e.hook(t, fastTenant.ID, fine, tenants.EventKeyCreated)
	keys := e.w.config.Services().Keys
	for i := range 40 {
		if _, err := keys.Create(ctx, serviceKeyCreate(slowTenant.ID, "slow-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		if _, err := keys.Create(ctx, serviceKeyCreate(fastTenant.ID, "fast-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the other tenant's deliveries", func() bool { return len(fine.events()) == 40 })
	for _, d := range e.deliveries(t, slowTenant.ID, slow.ID) {
		if d.Attempts > 0 {
			t.Fatalf("the other tenant's deliveries waited for the hanging endpoint's timeout: %+v", d)
		}
	}
}
