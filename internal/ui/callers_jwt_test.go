package ui_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestCallerLookupJWT: a token's caller is looked up as jwt:<subject>,
// under the tier its token names (default until one is asked for), and
// its page's buckets show what its checks took.
func TestCallerLookupJWT(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("idp")
	a := s.agent()
	a.signIn(tn.email, tn.password)

	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	const iss = "https://id.idp.test/"
	if got := s.api("POST", "/v1/jwt/issuers", tn.key, map[string]any{"issuer": iss, "algorithms": []string{"ES256"},
		"jwks":   map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": "k1", "x": enc(b[1:33]), "y": enc(b[33:])}}},
		"claims": map[string]string{"subject": "sub", "tier": "plan"}}); got["id"] == nil {
		t.Fatalf("create the issuer: %v", got)
	}
	if got := s.api("POST", "/v1/policies", tn.key, map[string]any{"name": "api", "path": "/api/*", "tiers": map[string]any{
		"default": map[string]any{"algorithm": "fixed_window", "limit": 3, "period": "1h"},
		"pro":     map[string]any{"algorithm": "fixed_window", "limit": 10, "period": "1h"}}}); got["id"] == nil {
		t.Fatalf("create the policy: %v", got)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": iss, "sub": "alice", "plan": "pro", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the issuer on the server", func() bool {
		return s.check(tn, map[string]any{"jwt": signed, "path": "/api/x"})["allowed"] == true
	})
	for range 3 {
		if c := s.check(tn, map[string]any{"jwt": signed, "path": "/api/x"}); c["allowed"] != true {
			t.Fatalf("check: %v", c)
		}
	}

	p := want(t, a.get("/ui/callers?q=jwt:alice"), http.StatusOK, "look up jwt:alice")
	if p.attr("caller", "data-kind") != "jwt" || p.attr("caller", "data-identity") != "alice" || p.text("caller-tier") != "default" || !p.has("caller-tier-form") {
		t.Fatalf("caller: kind %q, id %q, tier %q", p.attr("caller", "data-kind"), p.attr("caller", "data-identity"), p.text("caller-tier"))
	}
	p = want(t, a.get("/ui/callers?kind=jwt&id=alice&tier=pro"), http.StatusOK, "alice as pro")
	if got := bucketRemaining(t, p, "api"); p.text("caller-tier") != "pro" || got != "6" {
		t.Fatalf("alice as pro: tier %q, %s left, want 6 of 10", p.text("caller-tier"), got)
	}
	// Another tenant's subject of the same name has its own buckets.
	other := s.tenant("other")
	o := s.agent()
	o.signIn(other.email, other.password)
	s.api("POST", "/v1/policies", other.key, map[string]any{"name": "api", "path": "/api/*", "tiers": map[string]any{
		"pro": map[string]any{"algorithm": "fixed_window", "limit": 10, "period": "1h"}}})
	waitFor(t, 10*time.Second, "the other tenant's policy on its page", func() bool {
		return o.get("/ui/callers?kind=jwt&id=alice&tier=pro").has("caller-bucket")
	})
	if got := bucketRemaining(t, o.get("/ui/callers?kind=jwt&id=alice&tier=pro"), "api"); got != "10" {
		t.Fatalf("another tenant's alice has %s left, want 10", got)
	}
	want(t, a.get("/ui/callers?kind=jwt&id=alice&tier="+strings.Repeat("t", 65)), http.StatusNotFound, "a tier too long")
}
