package configsvc

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A write holding a concurrency limit asks which servers cannot compile
// one: named ones answer 409 naming the field, a failed read 503, none the
// write; writes without one never ask; nothing is written or announced
// when refused.
func TestConcurrencyWritesAskTheServers(t *testing.T) {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "sluice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var older []string
	var readErr error
	asked, announced := 0, 0
	svc := New(tenants.NewStore(db), nil, Hooks{
		Announce: func([]tenants.Change) { announced++ },
		ServersWithoutConcurrency: func(context.Context) ([]string, error) {
			asked++
			return older, readErr
		},
	}, nil).Services()
	ten, err := svc.Tenants.Create(ctx, "acme", "owner@acme.test", "a long passphrase")
	if err != nil {
		t.Fatal(err)
	}
	id := ten.Result.Tenant.ID
	slots := tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 5}}
	rate := tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 5, Period: "1s"}}
	policy := func(name string, ls tenants.Limits) tenants.Policy {
		return tenants.Policy{Name: name, Path: "/" + name, Tiers: map[string]tenants.Limits{"default": ls}}
	}

	older = []string{"s2"}
	before := announced
	if _, err := svc.Policies.Create(ctx, id, policy("a", slots)); !errs.Is(err, errs.Conflict) || !strings.HasPrefix(errs.Message(err), "tiers.default.algorithm: ") || strings.Contains(errs.Message(err), "s2") {
		t.Fatalf("with an older server: %v", err)
	}
	readErr = errors.New("no answer")
	if _, err := svc.Keys.Create(ctx, service.KeyCreate{TenantID: id, Name: "k", Tier: "default", Overrides: map[string]tenants.Limits{"a": slots}}); !errs.Is(err, errs.Unavailable) || !strings.HasPrefix(errs.Message(err), "overrides.a.algorithm: ") {
		t.Fatalf("when the servers cannot be read: %v", err)
	}
	if announced != before {
		t.Fatal("a refused write was announced")
	}
	if n, err := svc.Policies.Count(ctx, id); err != nil || n != 0 {
		t.Fatalf("%d policies after the refusals, %v", n, err)
	}
	asked = 0
	p, err := svc.Policies.Create(ctx, id, policy("b", rate))
	if err != nil || asked != 0 {
		t.Fatalf("a write without a concurrency limit: %v, asked %d times", err, asked)
	}
	older, readErr = nil, nil
	if _, err := svc.Policies.Update(ctx, id, p.Result.ID, policy("b", slots)); err != nil || asked != 1 {
		t.Fatalf("with every server able: %v, asked %d times", err, asked)
	}
}
