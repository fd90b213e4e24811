package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Looking a caller up shows each policy's bucket as a check would find it,
// and takes nothing: the next checks see the same bucket.
func TestPeekCallerTakesNothing(t *testing.T) {
	snap, _ := snapshot(t)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{
		{ConsumerKey: tenants.ConsumerKey{ID: "ckey_pro", TenantID: "ten_a", Tier: "pro", Prefix: prefix, Hash: hash}},
	}
	e := newTestEngine(t, snap)
	for range 4 {
		if _, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, t0); err != nil {
			t.Fatal(err)
		}
	}
	heavy := func(st CallerState) CallerPolicy {
		t.Helper()
		for _, p := range st.Policies {
			if p.Policy == "heavy" {
				return p
			}
		}
		t.Fatalf("no heavy policy in %+v", st)
		return CallerPolicy{}
	}
	for range 3 { // looking three times changes nothing
		st, err := e.PeekCaller("ten_a", Caller{Kind: "ip", ID: "192.0.2.1"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		p := heavy(st)
		if st.Tier != "anonymous" || p.Tier != "anonymous" || !p.Allowed || len(p.Limits) != 1 || p.Limits[0].Remaining != 6 || p.Limits[0].Limit != 10 {
			t.Fatalf("peek: %+v", p)
		}
		if p.Limits[0].Reset != 24*time.Second { // 4 tokens at 10 per 60 s
			t.Fatalf("reset %v, want 24s", p.Limits[0].Reset)
		}
	}
	// The caller still has exactly 6 checks left.
	for i := range 7 {
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{IP: "192.0.2.1", Path: "/api/example?mode=heavy"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed != (i < 6) {
			t.Fatalf("check %d after the peeks: %+v", i, a)
		}
	}
	st, _ := e.PeekCaller("ten_a", Caller{Kind: "ip", ID: "192.0.2.1"}, t0)
	if p := heavy(st); p.Allowed || p.Limits[0].Remaining != 0 || p.RetryAfter != 6*time.Second {
		t.Fatalf("drained: %+v", p)
	}

	// A key: its own tier's two limits; a blocked IPv6 caller shows its
	// block under its /64.
	if _, err := e.Check(t.Context(), "ten_a", &CheckRequest{APIKey: plain, Path: "/api/example?mode=heavy"}, t0); err != nil {
		t.Fatal(err)
	}
	st, err := e.PeekCaller("ten_a", Caller{Kind: "key", ID: "ckey_pro"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if p := heavy(st); st.KeyStatus != "active" || p.Tier != "pro" || len(p.Limits) != 2 || p.Limits[0].Remaining != 4 || p.Limits[1].Remaining != 999 {
		t.Fatalf("key: %+v %+v", st, p)
	}
	st, err = e.PeekCaller("ten_a", Caller{Kind: "ip", ID: "2001:db8:1:2::99"}, t0)
	if err != nil || st.Block == nil || st.Block.ID != "blk_1" || st.ID != "2001:db8:1:2::/64" {
		t.Fatalf("blocked caller: %+v, %v", st, err)
	}
	// Another tenant's key does not exist for this one; nor does a bad IP.
	if _, err := e.PeekCaller("ten_b", Caller{Kind: "key", ID: "ckey_pro"}, t0); !errs.Is(err, errs.NotFound) {
		t.Fatalf("another tenant's key: %v", err)
	}
	if _, err := e.PeekCaller("ten_a", Caller{Kind: "ip", ID: "not an ip"}, t0); !errors.Is(err, err) || errs.Code(err) != errs.Invalid {
		t.Fatalf("bad ip: %v", err)
	}
	// Tenant B sees its own (untouched) state for an IP tenant A drained.
	st, err = e.PeekCaller("ten_b", Caller{Kind: "ip", ID: "192.0.2.1"}, t0)
	if err != nil || len(st.Policies) != 0 {
		t.Fatalf("tenant B: %+v, %v", st, err)
	}
}

// A JWT caller is looked up by its subject under the tier its token names
// (default when none): its bucket shows what its checks took, another
// tenant's subject of the same name has none, and a tier is refused for a
// caller that has its own.
func TestPeekJWTCaller(t *testing.T) {
	e := newTestEngine(t, jwtSnapshot(t))
	k := testKeys()
	c := claimsAt(issA, "alice", t0)
	c["plan"] = "pro"
	tok := sign(t, jwt.SigningMethodRS256, k.rsa, "r1", c)
	for range 3 {
		if a, err := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/jwt/x"}, t0); err != nil || !a.Allowed {
			t.Fatalf("check: %+v %v", a, err)
		}
	}
	remaining := func(tenant string, who Caller) (string, int64) {
		t.Helper()
		st, err := e.PeekCaller(tenant, who, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Policies {
			if p.Policy == "jwt" {
				return p.Tier, p.Limits[0].Remaining
			}
		}
		t.Fatalf("no jwt policy in %+v", st)
		return "", 0
	}
	if tier, n := remaining("ten_a", Caller{Kind: KindJWT, ID: "alice", Tier: "pro"}); tier != "pro" || n != 2 {
		t.Fatalf("alice as pro: tier %q, %d left, want pro and 2 of 5", tier, n)
	}
	if tier, _ := remaining("ten_a", Caller{Kind: KindJWT, ID: "alice"}); tier != "default" {
		t.Fatalf("alice without a tier: %q", tier)
	}
	if _, n := remaining("ten_a", Caller{Kind: KindJWT, ID: "bob", Tier: "pro"}); n != 5 {
		t.Fatalf("bob: %d left", n)
	}
	for _, bad := range []Caller{{Kind: KindIP, ID: "192.0.2.1", Tier: "pro"}, {Kind: KindKey, ID: "ckey_pro", Tier: "pro"},
		{Kind: KindJWT, ID: ""}, {Kind: KindJWT, ID: "alice", Tier: strings.Repeat("t", 65)}, {Kind: "email", ID: "a@b"}} {
		if _, err := e.PeekCaller("ten_a", bad, t0); errs.Code(err) != errs.Invalid {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
}
