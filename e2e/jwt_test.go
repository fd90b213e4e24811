package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Callers with a JWT, on real processes: two servers behind one worker
// fetch an issuer's key set from an HTTPS server on loopback (allowed with
// --jwks-allow-private, its certificate trusted through --webhook-ca-file),
// and a subject's checks spread over both servers are limited as one caller.
func TestJWTCallersAcrossServers(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": "k1", "x": enc(pub[1:33]), "y": enc(pub[33:])}}})
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(set)
	}))
	t.Cleanup(idp.Close)
	ca := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	tp := startTopology(t, 2, nil, "--jwks-allow-private", "--webhook-ca-file", ca)
	s1, s2 := tp.servers[0], tp.servers[1]
	tn := createTenant(t, s1, "jwt")
	createPolicy(t, s1, tn, map[string]any{"name": "jwt", "path": "/jwt", "consistency": "exact",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "token_bucket", "limit": 5, "period": "1h"}}})
	mustStatus(t, call(t, "POST", s1.base+"/v1/jwt/issuers", tn.Key, map[string]any{
		"issuer": "https://id.jwt.test/", "jwks_url": idp.URL + "/jwks", "algorithms": []string{"ES256"}}), 201)
	token := func(sub string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "https://id.jwt.test/", "sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitFor(t, 10*time.Second, "both servers verifying the issuer's tokens", func() bool {
		for _, s := range tp.servers {
			if c, err := tryCheck(s, tn, map[string]any{"jwt": token("probe"), "path": "/jwt", "peek": true}); err != nil || !c.Allowed || c.Policy != "jwt" {
				return false
			}
		}
		return true
	})

	alice := token("alice")
	allowed := 0
	for i := range 10 {
		c, err := tryCheck(tp.servers[i%2], tn, map[string]any{"jwt": alice, "path": "/jwt"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Allowed {
			allowed++
		} else if c.Reason != "rate_limited" {
			t.Fatalf("alice's check %d: %+v", i, c)
		}
	}
	if allowed != 5 {
		t.Fatalf("alice: %d checks allowed over two servers, want 5", allowed)
	}
	if c, err := tryCheck(s2, tn, map[string]any{"jwt": token("bob"), "path": "/jwt"}); err != nil || !c.Allowed {
		t.Fatalf("bob: %+v %v", c, err)
	}
	for _, s := range []*server{s1, s2} {
		if c, err := tryCheck(s, tn, map[string]any{"jwt": alice + "x", "ip": "192.0.2.1", "path": "/jwt"}); err != nil || c.Allowed || c.Reason != "invalid_token" {
			t.Fatalf("a tampered token on %s: %+v %v", s.addr, c, err)
		}
	}
}
