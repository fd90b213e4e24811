package engine

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

func TestSessionVersionsFollowChanges(t *testing.T) {
	snap, _ := snapshot(t)
	snap.Users = []tenants.UserSession{{ID: "usr_a", TenantID: "ten_a", Version: 1}, {ID: "usr_op", Version: 3}}
	e := newTestEngine(t, snap)
	if _, ok := e.SessionVersion("usr_a"); ok {
		t.Fatal("a session version answered before hydration")
	}
	e.readiness.hydrated.Store(true)
	if v, ok := e.SessionVersion("usr_op"); !ok || v != 3 {
		t.Fatalf("operator: %d %v", v, ok)
	}
	steps := []struct {
		change tenants.Change
		user   string
		want   int64
		known  bool
	}{
		{tenants.Change{Version: 2, Kind: tenants.ChangeUserSession, UserSession: &tenants.UserSession{ID: "usr_a", TenantID: "ten_a", Version: 2}}, "usr_a", 2, true},
		{tenants.Change{Version: 3, Kind: tenants.ChangeUserSession, UserSession: &tenants.UserSession{ID: "usr_new", TenantID: "ten_a", Version: 1}}, "usr_new", 1, true},
		{tenants.Change{Version: 4, Kind: tenants.ChangeUserDeleted, TenantID: "ten_a", ID: "usr_a"}, "usr_a", 0, false},
	}
	for _, s := range steps {
		nv, err := e.view.Load().apply(s.change)
		if err != nil {
			t.Fatal(err)
		}
		e.view.Store(nv)
		if v, ok := e.SessionVersion(s.user); ok != s.known || v != s.want {
			t.Fatalf("after change %d: %s = %d %v, want %d %v", s.change.Version, s.user, v, ok, s.want, s.known)
		}
	}
	if _, err := e.view.Load().apply(tenants.Change{Version: 5, Kind: tenants.ChangeUserSession}); err == nil {
		t.Fatal("a user session change without its payload was applied")
	}
}

// usedReports answers the worker's side of service key use reports and
// keeps what arrives.
type usedReports struct {
	mu  sync.Mutex
	got []bus.ServiceKeyUsed
}

func (r *usedReports) all() []bus.ServiceKeyUsed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bus.ServiceKeyUsed(nil), r.got...)
}

func TestServiceKeyUseIsReported(t *testing.T) {
	snap, _ := snapshot(t)
	plain, prefix, hash, _ := tenants.GenerateKey(tenants.KindServiceKey)
	key := tenants.ServiceKey{ID: "skey_1", TenantID: "ten_a", Prefix: prefix, Hash: hash, CreatedAt: t0}
	snap.ServiceKeys = []tenants.ServiceKeyRecord{{ServiceKey: key}}
	e := newTestEngine(t, snap)
	reports := &usedReports{}
	sub, err := e.nc.Subscribe(bus.OpServiceKeyUsed.Subject(), func(m *nats.Msg) {
		var r bus.ServiceKeyUsed
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Error(err)
		}
		reports.mu.Lock()
		reports.got = append(reports.got, r)
		reports.mu.Unlock()
		m.Respond(bus.EncodeReply(struct{}{}, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	ctx := context.Background()
	minute := t0.Unix() / 60

	e.keyUse.report(ctx)
	if n := len(reports.all()); n != 0 {
		t.Fatalf("%d reports before any use", n)
	}
	e.keyUse.minute.Store(minute)
	for range 3 {
		if tenant, ok := e.TenantForServiceKey(plain); !ok || tenant != "ten_a" {
			t.Fatalf("key: %q %v", tenant, ok)
		}
	}
	e.keyUse.report(ctx)
	e.keyUse.report(ctx) // nothing new
	got := reports.all()
	if len(got) != 1 || got[0].V != bus.WireVersion || len(got[0].Used) != 1 || got[0].Used[0].ID != "skey_1" || !got[0].Used[0].At.Equal(time.Unix(minute*60, 0)) {
		t.Fatalf("reports after one minute of use: %+v", got)
	}

	// A fresh snapshot keeps what the server saw; a later minute is reported again.
	old := e.view.Load()
	nv, err := viewFromSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	nv.carryKeyUse(old)
	e.view.Store(nv)
	e.keyUse.report(ctx)
	if n := len(reports.all()); n != 1 {
		t.Fatalf("a resync made the same use be reported again (%d reports)", n)
	}
	e.keyUse.minute.Store(minute + 1)
	e.TenantForServiceKey(plain)
	e.keyUse.report(ctx)
	if got := reports.all(); len(got) != 2 || !got[1].Used[0].At.Equal(time.Unix((minute+1)*60, 0)) {
		t.Fatalf("reports after a second minute: %+v", got)
	}

	// A revoked key is refused at once.
	revoked := key
	revokedAt := t0
	revoked.RevokedAt = &revokedAt
	nv, err = e.view.Load().apply(tenants.Change{Version: 2, Kind: tenants.ChangeServiceKey, TenantID: "ten_a", ServiceKey: &tenants.ServiceKeyRecord{ServiceKey: revoked}})
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(nv)
	if _, ok := e.TenantForServiceKey(plain); ok {
		t.Fatal("a revoked service key accepted")
	}
}
