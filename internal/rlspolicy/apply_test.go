package rlspolicy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/rlsconf"
	"github.com/sluicehq/sluice/internal/service/servicetest"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A file applied, applied again (no change), shrunk (its dropped node
// deleted, another domain and an HTTP policy left alone), and a file the
// server would refuse refused before anything changes.
func TestApply(t *testing.T) {
	ctx := context.Background()
	m := servicetest.New(time.Now)
	m.AddTenant(tenants.Tenant{ID: "ten_a", Name: "a"})
	svc := m.Services()
	if _, err := svc.Policies.Create(ctx, "ten_a", tenants.Policy{Name: "http", Path: "/api", Tiers: map[string]tenants.Limits{"default": {{Algorithm: "fixed_window", Limit: 1, Period: "1s"}}}}); err != nil {
		t.Fatal(err)
	}
	apply := func(text string) Applied {
		t.Helper()
		f, err := rlsconf.Parse("f.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		have, err := svc.Policies.List(ctx, "ten_a")
		if err != nil {
			t.Fatal(err)
		}
		plan, err := Diff(f, have)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Apply(ctx, svc.Policies, "ten_a", plan)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	other := "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	if a := apply(other); a.Created != 1 {
		t.Fatalf("other domain: %+v", a)
	}
	full := "domain: edge\ndescriptors:\n  - key: path\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 100}\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	if a := apply(full); a.Created != 3 || a.Changed != 0 || a.Deleted != 0 || a.Version == 0 {
		t.Fatalf("first apply: %+v", a)
	}
	if a := apply(full); a.Created+a.Changed+a.Deleted != 0 {
		t.Fatalf("again: %+v", a)
	}
	if a := apply("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 7}\n"); a.Changed != 1 || a.Deleted != 2 {
		t.Fatalf("shrunk: %+v", a)
	}
	ps, _ := svc.Policies.List(ctx, "ten_a")
	names := []string{}
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "http") || !strings.Contains(got, "other.k") || !strings.Contains(got, "edge.remote_address") || len(ps) != 3 {
		t.Fatalf("policies after: %s", got)
	}
	// A node whose metadata is larger than a policy holds: refused whole.
	f, err := rlsconf.Parse("big.yaml", []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    metadata: {note: \""+strings.Repeat("x", 5000)+"\"}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Diff(f, ps); !errs.Is(err, errs.Invalid) || !strings.Contains(errs.Message(err), "big.yaml: edge.b: descriptor.metadata") {
		t.Fatalf("a node the server refuses: %v", err)
	}
}
