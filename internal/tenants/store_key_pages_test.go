package tenants_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func pageNames(p tenants.KeyPage) []string {
	out := []string{}
	for _, k := range p.Keys {
		out = append(out, k.Name)
	}
	return out
}

func TestConsumerKeyPages(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	// Created in this order, one millisecond apart; names sort otherwise.
	specs := []struct{ name, tier string }{
		{"Delta", "pro"}, {"alpha", "free"}, {"Échelle", "pro"}, {"charlie", "free"}, {"bravo", "pro"}, {"alpha", "pro"},
	}
	ids := map[string]string{}
	for i, sp := range specs {
		exp := t0.Add(time.Duration(10-i) * time.Hour)
		var expires *time.Time
		if i%2 == 0 {
			expires = &exp
		}
		k, _, _, err := s.Keys().Create(ctx, a.ID, sp.name, sp.tier, expires, nil, t0.Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ids[sp.name] = k.ID
	}
	// Another tenant's key matches every filter below; it must never show.
	other, _, _, err := s.Keys().Create(ctx, b.ID, "alpha bravo charlie", "pro", nil, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Keys().Revoke(ctx, a.ID, ids["charlie"], t0); err != nil {
		t.Fatal(err)
	}

	page := func(q tenants.KeyQuery) tenants.KeyPage {
		t.Helper()
		q.TenantID = a.ID
		p, err := s.Keys().Page(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range p.Keys {
			if k.TenantID != a.ID || k.ID == other.ID {
				t.Fatalf("page holds another tenant's key %+v", k)
			}
		}
		return p
	}
	cases := []struct {
		name                           string
		q                              tenants.KeyQuery
		want                           []string
		offset, total, matched, hidden int
	}{
		{"default: by name, case-insensitively, ties oldest first, revoked hidden", tenants.KeyQuery{},
			[]string{"alpha", "alpha", "bravo", "Delta", "Échelle"}, 0, 6, 5, 1},
		{"with revoked", tenants.KeyQuery{IncludeRevoked: true},
			[]string{"alpha", "alpha", "bravo", "charlie", "Delta", "Échelle"}, 0, 6, 6, 0},
		{"page two", tenants.KeyQuery{Limit: 2, Offset: 2}, []string{"bravo", "Delta"}, 2, 6, 5, 1},
		{"past the end: the last page", tenants.KeyQuery{Limit: 2, Offset: 40}, []string{"Échelle"}, 4, 6, 5, 1},
		{"search folds case beyond ASCII", tenants.KeyQuery{Search: "éCH"}, []string{"Échelle"}, 0, 6, 1, 0},
		{"search covers prefix and tier", tenants.KeyQuery{Search: "FREE", IncludeRevoked: true}, []string{"alpha", "charlie"}, 0, 6, 2, 0},
		{"search counts the revoked it hides", tenants.KeyQuery{Search: "free"}, []string{"alpha"}, 0, 6, 1, 1},
		{"tier", tenants.KeyQuery{Tier: "pro"}, []string{"alpha", "bravo", "Delta", "Échelle"}, 0, 6, 4, 0},
		{"by tier then age", tenants.KeyQuery{Sort: tenants.KeySortTier}, []string{"alpha", "Delta", "Échelle", "bravo", "alpha"}, 0, 6, 5, 1},
		{"by expiry, never last", tenants.KeyQuery{Sort: tenants.KeySortExpires}, []string{"bravo", "Échelle", "Delta", "alpha", "alpha"}, 0, 6, 5, 1},
		{"ranked first, then oldest first; unknown and foreign ids ignored", tenants.KeyQuery{Sort: tenants.KeySortRanked,
			Ranked: []string{ids["bravo"], other.ID, "ckey_nope", ids["Delta"], ids["bravo"]}}, []string{"bravo", "Delta", "alpha", "Échelle", "alpha"}, 0, 6, 5, 1},
		{"nothing matches", tenants.KeyQuery{Search: "zulu"}, []string{}, 0, 6, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := page(c.q)
			if got := pageNames(p); !reflect.DeepEqual(got, c.want) {
				t.Errorf("keys %q, want %q", got, c.want)
			}
			if p.Offset != c.offset || p.Total != c.total || p.Matched != c.matched || p.HiddenRevoked != c.hidden {
				t.Errorf("offset %d total %d matched %d hidden %d, want %d %d %d %d", p.Offset, p.Total, p.Matched, p.HiddenRevoked, c.offset, c.total, c.matched, c.hidden)
			}
		})
	}
	if p := page(tenants.KeyQuery{}); p.Limit != tenants.DefaultKeyPage {
		t.Errorf("default limit %d", p.Limit)
	}
	for _, q := range []tenants.KeyQuery{{Sort: "hash"}, {Limit: tenants.MaxKeyPage + 1}, {Offset: -1}, {Sort: tenants.KeySortRanked, Ranked: make([]string, tenants.MaxRankedKeys+1)}} {
		q.TenantID = a.ID
		if _, err := s.Keys().Page(ctx, q); !errs.Is(err, errs.Invalid) {
			t.Errorf("%+v: err %v, want invalid", q, err)
		}
	}

	// Another tenant sees only its own key, and an unknown tenant none.
	if p := must[tenants.KeyPage](t)(s.Keys().Page(ctx, tenants.KeyQuery{TenantID: b.ID, Search: "alpha"})); len(p.Keys) != 1 || p.Keys[0].ID != other.ID || p.Total != 1 {
		t.Errorf("tenant b's page %+v", p)
	}
	if p := must[tenants.KeyPage](t)(s.Keys().Page(ctx, tenants.KeyQuery{TenantID: "ten_nope"})); len(p.Keys) != 0 || p.Total != 0 {
		t.Errorf("unknown tenant's page %+v", p)
	}

	names := must[map[string]string](t)(s.Keys().Names(ctx, a.ID, []string{ids["Delta"], ids["charlie"], other.ID, "ckey_nope"}))
	if want := map[string]string{ids["Delta"]: "Delta", ids["charlie"]: "charlie"}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %v, want %v (never another tenant's)", names, want)
	}
	if names := must[map[string]string](t)(s.Keys().Names(ctx, b.ID, []string{ids["Delta"], other.ID})); !reflect.DeepEqual(names, map[string]string{other.ID: "alpha bravo charlie"}) {
		t.Errorf("tenant b's names %v", names)
	}
	if _, err := s.Keys().Names(ctx, a.ID, make([]string, tenants.MaxRankedKeys+1)); !errs.Is(err, errs.Invalid) {
		t.Errorf("too many ids: %v", err)
	}

	if c := must[tenants.KeyCounts](t)(s.Keys().Count(ctx, a.ID)); c != (tenants.KeyCounts{Total: 6, Revoked: 1}) {
		t.Errorf("counts %+v", c)
	}
	if c := must[tenants.KeyCounts](t)(s.Keys().Count(ctx, b.ID)); c != (tenants.KeyCounts{Total: 1}) {
		t.Errorf("tenant b's counts %+v", c)
	}
}
