package tenants_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func descriptorPolicy(path ...tenants.DescriptorEntry) tenants.Policy {
	r := &tenants.DescriptorRule{Domain: "edge", Path: path, Limited: true, Unit: "MINUTE", RequestsPerUnit: 10, RuleName: "per-ip", Replaces: []string{"global"}, Metadata: `{"team":"api"}`}
	return tenants.Policy{Name: r.FullKey(), Descriptor: r, Tiers: map[string]tenants.Limits{
		tenants.TierDefault: {{Algorithm: tenants.FixedWindow, Limit: 10, Period: "60s"}},
	}}
}

// A descriptor policy is stored and read back whole on a real SQLite
// file, and changed; it takes no path.
func TestDescriptorPolicyCRUD(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	want := descriptorPolicy(tenants.DescriptorEntry{Key: "remote_address"})
	p, _, err := s.Policies().Create(ctx, a.ID, want, t0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "edge.remote_address" || p.Path != "" || p.Method != "*" {
		t.Fatalf("stored %+v", p)
	}
	got := must[tenants.Policy](t)(s.Policies().Get(ctx, a.ID, p.ID))
	if !reflect.DeepEqual(got, p) || !reflect.DeepEqual(got.Descriptor, want.Descriptor) {
		t.Fatalf("GetPolicy = %+v (%+v)\nwant %+v", got, got.Descriptor, want.Descriptor)
	}
	upd := got
	upd.Descriptor = &tenants.DescriptorRule{Domain: "edge", Path: got.Descriptor.Path, Limited: true, Unlimited: true}
	upd.Tiers = nil
	if _, _, err := s.Policies().Update(ctx, a.ID, p.ID, upd, t0); err != nil {
		t.Fatal(err)
	}
	got = must[tenants.Policy](t)(s.Policies().Get(ctx, a.ID, p.ID))
	if !got.Descriptor.Unlimited || len(got.Tiers) != 0 {
		t.Fatalf("after update: %+v %+v", got, got.Descriptor)
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Policies) != 1 || snap.Policies[0].Descriptor == nil || !snap.Policies[0].Descriptor.Unlimited {
		t.Fatalf("snapshot policies: %+v", snap.Policies)
	}
}

// Every problem of a descriptor policy is named by its field.
func TestDescriptorPolicyProblems(t *testing.T) {
	ok := descriptorPolicy(tenants.DescriptorEntry{Key: "k", Value: "v"})
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid policy refused: %v", err)
	}
	// requests_per_unit: 0, the reference's banned rule: a fixed window of
	// limit 0.
	banned := descriptorPolicy(tenants.DescriptorEntry{Key: "k", Value: "v"})
	banned.Descriptor.RequestsPerUnit, banned.Descriptor.DeniedUncounted, banned.Descriptor.Order = 0, true, 3
	banned.Tiers[tenants.TierDefault][0].Limit = 0
	if err := banned.Validate(); err != nil {
		t.Fatalf("banned rule refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(p *tenants.Policy)
		field string
	}{
		{"no domain", func(p *tenants.Policy) { p.Descriptor.Domain = "" }, "descriptor.domain"},
		{"no path", func(p *tenants.Policy) { p.Descriptor.Path = nil }, "descriptor.path"},
		{"empty key", func(p *tenants.Policy) { p.Descriptor.Path[0].Key = ""; p.Name = p.Descriptor.FullKey() }, "descriptor.path[0].key"},
		{"control character", func(p *tenants.Policy) { p.Descriptor.Path[0].Value = "a\nb"; p.Name = p.Descriptor.FullKey() }, "descriptor.path[0].value"},
		{"bad unit", func(p *tenants.Policy) { p.Descriptor.Unit = "fortnight" }, "descriptor.unit"},
		{"unit with unlimited", func(p *tenants.Policy) { p.Descriptor.Unlimited = true; p.Tiers = nil }, "descriptor.unit"},
		{"replaces itself", func(p *tenants.Policy) { p.Descriptor.Replaces = []string{"per-ip"} }, "descriptor.replaces[0]"},
		{"empty replaces", func(p *tenants.Policy) { p.Descriptor.Replaces = []string{""} }, "descriptor.replaces[0]"},
		{"share threshold without wildcard", func(p *tenants.Policy) { p.Descriptor.ShareThreshold = true }, "descriptor.share_threshold"},
		{"a path as well", func(p *tenants.Policy) { p.Path = "/api" }, "path"},
		{"a name of its own", func(p *tenants.Policy) { p.Name = "mine" }, "name"},
		{"limits without a rate limit", func(p *tenants.Policy) {
			p.Descriptor = &tenants.DescriptorRule{Domain: "edge", Path: p.Descriptor.Path}
		}, "tiers"},
		{"no limits with a rate limit", func(p *tenants.Policy) { p.Tiers = nil }, "tiers"},
		{"limit 0 without requests_per_unit 0", func(p *tenants.Policy) { p.Tiers[tenants.TierDefault][0].Limit = 0 }, "tiers.default.limit"},
		{"limit 0 in a token bucket", func(p *tenants.Policy) {
			p.Descriptor.RequestsPerUnit = 0
			p.Tiers[tenants.TierDefault] = tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 0, Period: "60s"}}
		}, "tiers.default.limit"},
		{"denied_uncounted without a rate limit", func(p *tenants.Policy) {
			p.Descriptor = &tenants.DescriptorRule{Domain: "edge", Path: p.Descriptor.Path, DeniedUncounted: true}
			p.Tiers = nil
		}, "descriptor.denied_uncounted"},
		{"negative order", func(p *tenants.Policy) { p.Descriptor.Order = -1 }, "descriptor.order"},
		{"too deep", func(p *tenants.Policy) {
			for len(p.Descriptor.Path) <= tenants.MaxDescriptorDepth {
				p.Descriptor.Path = append(p.Descriptor.Path, tenants.DescriptorEntry{Key: "k"})
			}
			p.Name = p.Descriptor.FullKey()
		}, "descriptor.path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := descriptorPolicy(tenants.DescriptorEntry{Key: "k", Value: "v"})
			tc.edit(&p)
			probs := p.Problems()
			found := false
			for _, e := range probs {
				if !errs.Is(e, errs.Invalid) {
					t.Fatalf("problem %v is not invalid_request", e)
				}
				if strings.HasPrefix(errs.Message(e), tc.field+": ") {
					found = true
				}
			}
			if !found {
				t.Fatalf("problems %v name no %q", probs, tc.field)
			}
		})
	}
}

// The Envoy door cannot give a slot back, so a descriptor policy refuses a
// concurrency limit, naming the field.
func TestDescriptorPolicyRefusesConcurrency(t *testing.T) {
	p := descriptorPolicy(tenants.DescriptorEntry{Key: "remote_address"})
	p.Tiers[tenants.TierDefault] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10}}
	err := p.Validate()
	if !strings.HasPrefix(errs.Message(err), "tiers.default.algorithm: must not be concurrency") {
		t.Fatalf("Validate = %v, want a refusal naming tiers.default.algorithm", err)
	}
}
