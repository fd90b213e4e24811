package tenants_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

var rawURL = base64.RawURLEncoding.EncodeToString

// jwkSet is the JSON Web Key Set of public keys, each with a kid.
func jwkSet(t *testing.T, keys map[string]any) json.RawMessage {
	t.Helper()
	var out []map[string]string
	for kid, k := range keys {
		m := map[string]string{"kid": kid}
		switch k := k.(type) {
		case *rsa.PublicKey:
			m["kty"], m["n"], m["e"] = "RSA", rawURL(k.N.Bytes()), rawURL(big.NewInt(int64(k.E)).Bytes())
		case *ecdsa.PublicKey:
			b, _ := k.Bytes()
			size := (len(b) - 1) / 2
			m["kty"], m["crv"], m["x"], m["y"] = "EC", k.Curve.Params().Name, rawURL(b[1:1+size]), rawURL(b[1+size:])
		case ed25519.PublicKey:
			m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", rawURL(k)
		}
		out = append(out, m)
	}
	b, err := json.Marshal(map[string]any{"keys": out})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestJWTIssuerCRUD(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a, b := mustTenant(t, s, "a"), mustTenant(t, s, "b")
	before := version(t, s)
	iss, cs, err := s.JWTIssuers().Create(ctx, a.ID, tenants.JWTIssuerBody{
		Issuer: ptr("https://id.a.test/"), Audiences: &[]string{"api"}, JWKSURL: ptr("https://id.a.test/jwks.json"),
		Claims: &tenants.JWTClaims{Tier: "plan"},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, before, cs, tenants.ChangeJWTIssuer)
	if !strings.HasPrefix(iss.ID, tenants.IDJWTIssuer) || iss.Claims.Subject != "sub" || strings.Join(iss.Algorithms, ",") != "RS256" {
		t.Fatalf("defaults: %+v", iss)
	}
	if got := must[tenants.JWTIssuer](t)(s.JWTIssuers().Get(ctx, a.ID, iss.ID)); got.Issuer != iss.Issuer || got.Claims.Tier != "plan" || got.JWKSURL != iss.JWKSURL {
		t.Fatalf("get: %+v", got)
	}
	// Another tenant sees nothing of it, and may use the same "iss".
	_, err = s.JWTIssuers().Get(ctx, b.ID, iss.ID)
	wantCode(t, err, errs.NotFound)
	_, _, err = s.JWTIssuers().Update(ctx, b.ID, iss.ID, tenants.JWTIssuerBody{Audiences: &[]string{}}, t0)
	wantCode(t, err, errs.NotFound)
	_, err = s.JWTIssuers().Delete(ctx, b.ID, iss.ID, t0)
	wantCode(t, err, errs.NotFound)
	if _, _, err := s.JWTIssuers().Create(ctx, b.ID, tenants.JWTIssuerBody{Issuer: ptr("https://id.a.test/"), JWKSURL: ptr("https://id.b.test/jwks")}, t0); err != nil {
		t.Fatalf("another tenant's issuer with the same iss: %v", err)
	}

	// A patch with an inline set replaces the URL.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := jwkSet(t, map[string]any{"k1": &key.PublicKey})
	up, cs, err := s.JWTIssuers().Update(ctx, a.ID, iss.ID, tenants.JWTIssuerBody{JWKS: &set, Algorithms: &[]string{"ES256"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if up.JWKSURL != "" || len(up.JWKS) == 0 || cs[0].JWTIssuer.ID != iss.ID {
		t.Fatalf("update: %+v", up)
	}
	snap := must[tenants.Snapshot](t)(s.Snapshot(ctx))
	if len(snap.JWTIssuers) != 2 {
		t.Fatalf("snapshot holds %d issuers", len(snap.JWTIssuers))
	}
	list := must[[]tenants.JWTIssuer](t)(s.JWTIssuers().List(ctx, a.ID))
	if len(list) != 1 || list[0].ID != iss.ID {
		t.Fatalf("list: %+v", list)
	}
	before = version(t, s)
	cs, err = s.JWTIssuers().Delete(ctx, a.ID, iss.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	checkChanges(t, s, before, cs, tenants.ChangeJWTIssuerDeleted)
	if err := snap.Apply(cs...); err != nil || len(snap.JWTIssuers) != 1 {
		t.Fatalf("snapshot after delete: %v, %d", err, len(snap.JWTIssuers))
	}
}

// Every bad input is refused naming its field, and nothing changes.
func TestJWTIssuerRefusals(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	good := jwkSet(t, map[string]any{"r1": &rsaKey.PublicKey})
	weak := jwkSet(t, map[string]any{"r1": &small.PublicKey})
	url := ptr("https://id.test/jwks")
	if _, _, err := s.JWTIssuers().Create(ctx, a.ID, tenants.JWTIssuerBody{Issuer: ptr("https://taken.test/"), JWKSURL: url}, t0); err != nil {
		t.Fatal(err)
	}
	raw := func(s string) *json.RawMessage { r := json.RawMessage(s); return &r }
	// Keys whose verification would cost every tenant's servers too much:
	// a modulus above MaxRSABits, an exponent above MaxRSAExponent.
	bigN := new(big.Int).Lsh(big.NewInt(1), tenants.MaxRSABits+7)
	bigN.Add(bigN, big.NewInt(1))
	huge := raw(`{"keys":[{"kty":"RSA","n":"` + rawURL(bigN.Bytes()) + `","e":"AQAB"}]}`)
	bigE := raw(`{"keys":[{"kty":"RSA","n":"` + rawURL(rsaKey.N.Bytes()) + `","e":"` + rawURL(big.NewInt(1<<31-1).Bytes()) + `"}]}`)
	for _, c := range []struct {
		name, field string
		b           tenants.JWTIssuerBody
	}{
		{"no issuer", "issuer", tenants.JWTIssuerBody{JWKSURL: url}},
		{"neither keys", "jwks_url", tenants.JWTIssuerBody{Issuer: ptr("x")}},
		{"both keys", "jwks_url", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, JWKS: &good}},
		{"http URL", "jwks_url", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: ptr("http://id.test/jwks")}},
		{"HS256", "algorithms[0]", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, Algorithms: &[]string{"HS256"}}},
		{"none", "algorithms[1]", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, Algorithms: &[]string{"RS256", "none"}}},
		{"unknown alg", "algorithms[0]", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, Algorithms: &[]string{"RS1"}}},
		{"not a set", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: raw(`{"kty":"RSA"}`)}},
		{"oct key", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: raw(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`)}},
		{"bad base64", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: raw(`{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`)}},
		{"weak RSA", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: &weak}},
		{"huge RSA", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: huge}},
		{"large RSA exponent", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: bigE}},
		{"key fits no alg", "jwks", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKS: &good, Algorithms: &[]string{"ES256"}}},
		{"duplicate issuer", "issuer", tenants.JWTIssuerBody{Issuer: ptr("https://taken.test/"), JWKSURL: url}},
		{"customer claim not a claim name", "claims.customer", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, Claims: &tenants.JWTClaims{Customer: "org\u0000"}}},
		{"empty audience", "audiences[0]", tenants.JWTIssuerBody{Issuer: ptr("x"), JWKSURL: url, Audiences: &[]string{""}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := version(t, s)
			_, _, err := s.JWTIssuers().Create(ctx, a.ID, c.b, t0)
			wantCode(t, err, errs.Invalid)
			if !strings.HasPrefix(errs.Message(err), c.field+":") {
				t.Fatalf("message %q does not name %s", errs.Message(err), c.field)
			}
			if version(t, s) != before {
				t.Fatal("a refused write changed the config")
			}
		})
	}
	if n := len(must[[]tenants.JWTIssuer](t)(s.JWTIssuers().List(ctx, a.ID))); n != 1 {
		t.Fatalf("%d issuers after refusals", n)
	}
}

func TestJWTIssuerCap(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTenant(t, s, "a")
	for i := range tenants.MaxJWTIssuers {
		if _, _, err := s.JWTIssuers().Create(ctx, a.ID, tenants.JWTIssuerBody{Issuer: ptr(fmt.Sprint("iss-", i)), JWKSURL: ptr("https://id.test/jwks")}, t0); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := s.JWTIssuers().Create(ctx, a.ID, tenants.JWTIssuerBody{Issuer: ptr("one more"), JWKSURL: ptr("https://id.test/jwks")}, t0)
	wantCode(t, err, errs.Conflict)
}

// A fetched set skips the keys Sluice cannot use; an inline one refuses them.
func TestParseJWKS(t *testing.T) {
	ed, _, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	set := jwkSet(t, map[string]any{"e": ed, "p": &ec.PublicKey})
	var m map[string][]map[string]string
	json.Unmarshal(set, &m)
	m["keys"] = append(m["keys"], map[string]string{"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"})
	mixed, _ := json.Marshal(m)
	if _, err := tenants.ParseJWKS(mixed, true); err == nil {
		t.Fatal("strict parse took an encryption key")
	}
	keys, err := tenants.ParseJWKS(mixed, false)
	if err != nil || len(keys) != 2 {
		t.Fatalf("lenient parse: %d keys, %v", len(keys), err)
	}
	for _, k := range keys {
		switch k.KeyID {
		case "e":
			if !k.Suits("EdDSA") || k.Suits("ES256") || k.Suits("HS256") {
				t.Error("Ed25519 key suits the wrong algorithms")
			}
		case "p":
			if !k.Suits("ES384") || k.Suits("ES256") || k.Suits("RS256") {
				t.Error("P-384 key suits the wrong algorithms")
			}
		}
	}
}
