package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/sdk"
)

// ecJWKS is a new P-256 key and its public half as a JSON Web Key Set.
func ecJWKS(t testing.TB, kid string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": kid, "x": enc(b[1:33]), "y": enc(b[33:])}}})
	return k, string(set)
}

func signES256(t testing.TB, k *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims(claims))
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every bad issuer is refused with a 400 naming its field, and nothing is
// stored.
func TestJWTIssuerRefusals(t *testing.T) {
	m := bootWith(t, nil)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "idp", "owner_email": "o@idp.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	_, set := ecJWKS(t, "k1")
	do(t, m, "POST", "/v1/jwt/issuers", sk, map[string]any{"issuer": "https://taken.test/", "jwks": json.RawMessage(set), "algorithms": []string{"ES256"}})
	for _, c := range []struct{ name, body, field string }{
		{"missing issuer", `{"jwks_url":"https://id.test/jwks"}`, "issuer"},
		{"neither jwks_url nor jwks", `{"issuer":"x"}`, "jwks_url"},
		{"both", `{"issuer":"x","jwks_url":"https://id.test/jwks","jwks":` + set + `}`, "jwks_url"},
		{"not https", `{"issuer":"x","jwks_url":"http://id.test/jwks"}`, "jwks_url"},
		{"loopback", `{"issuer":"x","jwks_url":"https://127.0.0.1/jwks"}`, "jwks_url"},
		{"private", `{"issuer":"x","jwks_url":"https://10.0.0.7/jwks"}`, "jwks_url"},
		{"other port", `{"issuer":"x","jwks_url":"https://8.8.8.8:8080/jwks"}`, "jwks_url"},
		{"HS256", `{"issuer":"x","jwks":` + set + `,"algorithms":["HS256"]}`, "algorithms[0]"},
		{"none", `{"issuer":"x","jwks":` + set + `,"algorithms":["none"]}`, "algorithms[0]"},
		{"malformed jwks", `{"issuer":"x","jwks":{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}}`, "jwks"},
		{"duplicate issuer", `{"issuer":"https://taken.test/","jwks":` + set + `,"algorithms":["ES256"]}`, "issuer"},
		{"customer claim not a claim name", `{"issuer":"x","jwks":` + set + `,"algorithms":["ES256"],"claims":{"customer":"org\u0007"}}`, "claims.customer"},
	} {
		status, out := call(t, m, "POST", "/v1/jwt/issuers", sk, c.body)
		e, _ := out["error"].(map[string]any)
		if msg, _ := e["message"].(string); status != http.StatusBadRequest || e["code"] != "invalid_request" || !strings.HasPrefix(msg, c.field+":") {
			t.Errorf("%s: %d %v, want 400 naming %s", c.name, status, out, c.field)
		}
	}
	status, out := call(t, m, "POST", "/v1/jwt/issuers", sk, `{"issuer":"y","jwks":`+set+`,"algorithms":["ES256"],"claims":{"customer":"org"}}`)
	if claims, _ := out["claims"].(map[string]any); status != http.StatusCreated || claims["customer"] != "org" {
		t.Errorf("a customer claim: %d %v", status, out)
	}
	list := do(t, m, "GET", "/v1/jwt/issuers", sk, nil)
	if n := len(list["issuers"].([]any)); n != 2 {
		t.Fatalf("%d issuers after the refusals and the customer claim, want 2", n)
	}
}

// A tenant configures an issuer at a JWKS URL (a TLS server on loopback,
// allowed here), and checks and forward-auth requests with its tokens are
// limited per subject; a bad token is refused, never counted as the IP.
func TestJWTChecksThroughAPI(t *testing.T) {
	key, set := ecJWKS(t, "k1")
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, set)
	}))
	t.Cleanup(idp.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	m := bootWith(t, func(c *Config) {
		c.JWKSAllowPrivate, c.Webhooks.CAFile = true, ca
		trusted, _ := api.ParseTrustedProxies("127.0.0.1")
		c.TrustedProxies = trusted
	})
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "idp", "owner_email": "o@idp.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "fixed_window", "limit": 2, "period": "1m"}}})
	do(t, m, "POST", "/v1/jwt/issuers", sk, map[string]any{"issuer": "https://id.idp.test/", "jwks_url": idp.URL + "/jwks", "algorithms": []string{"ES256"}})
	tok := func(sub string) string {
		return signES256(t, key, "k1", map[string]any{"iss": "https://id.idp.test/", "sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	}
	check := func(jwt string) map[string]any {
		return do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": jwt, "ip": "192.0.2.1", "path": "/api/x"})
	}
	waitUntil(t, 5*time.Second, "the issuer's keys on the server", func() bool {
		return do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": tok("probe"), "path": "/api/x", "peek": true})["allowed"] == true
	})
	for i := range 3 {
		a := check(tok("alice"))
		if id, _ := a["identity"].(map[string]any); (i < 2) != (a["allowed"] == true) || id["kind"] != "jwt" || id["id"] != "alice" {
			t.Fatalf("alice's check %d: %v", i, a)
		}
	}
	if a := check("eyJhbGciOiJub25lIn0.e30."); a["reason"] != "invalid_token" {
		t.Fatalf("a token with alg none: %v", a)
	}
	// Support tooling reaches a subject as it reaches a key: a bucket
	// reset refills alice, and the operator's block stops mallory.
	do(t, m, "POST", "/v1/buckets/reset", sk, map[string]any{"policy": "api", "identity": map[string]any{"kind": "jwt", "id": "alice"}})
	waitUntil(t, 2*time.Second, "alice refilled", func() bool {
		return do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": tok("alice"), "path": "/api/x", "peek": true})["allowed"] == true
	})
	do(t, m, "POST", "/v1/admin/blocks", testToken, map[string]any{"tenant_id": tn["id"], "identity": map[string]any{"kind": "jwt", "id": "mallory"}, "reason": "abuse"})
	waitUntil(t, 2*time.Second, "mallory blocked", func() bool { return check(tok("mallory"))["reason"] == "blocked" })

	// Forward-auth reads the bearer token when the proxy's forward-auth URL
	// says so; a header the client could add does not.
	fa := func(bearer string, jwtURL bool) *http.Response {
		url := "http://" + m.Addr() + api.ForwardAuthPath
		if jwtURL {
			url += "?" + api.JWTBearerQuery
		}
		r, _ := http.NewRequest("GET", url, nil)
		r.Header.Set(api.ServiceKeyHeader, sk)
		r.Header.Set("X-Forwarded-Uri", "/api/y")
		r.Header.Set("X-Forwarded-For", "192.0.2.77")
		r.Header.Set("Authorization", "Bearer "+bearer)
		r.Header.Set("X-Sluice-Jwt-Bearer", "true") // a client's own header: ignored
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	bob := tok("bob")
	for i := range 2 {
		if resp := fa(bob, true); resp.StatusCode != http.StatusOK {
			t.Fatalf("forward-auth %d for bob: %d", i, resp.StatusCode)
		}
	}
	if resp := fa(bob, true); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("bob's third forward-auth: %d", resp.StatusCode)
	}
	if resp := fa("garbage", true); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
		t.Fatalf("forward-auth with a bad token: %d %v", resp.StatusCode, resp.Header)
	}
	// Without ?jwt=bearer in the URL the bearer token is not read, whatever
	// headers the client adds: the client is its address.
	if resp := fa("garbage", false); resp.StatusCode != http.StatusOK {
		t.Fatalf("forward-auth without ?%s: %d", api.JWTBearerQuery, resp.StatusCode)
	}

	// The Go SDK's middleware sends the bearer token as jwt with WithBearerJWT.
	client := sdk.New("http://"+m.Addr(), sk, sdk.WithBearerJWT(), sdk.WithDenialCache(0))
	app := client.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	serve := func(bearer string) int {
		r := httptest.NewRequest("GET", "/api/z", nil)
		r.Header.Set("Authorization", "Bearer "+bearer)
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		return w.Code
	}
	carol := tok("carol")
	for i, want := range []int{http.StatusNoContent, http.StatusNoContent, http.StatusTooManyRequests} {
		if got := serve(carol); got != want {
			t.Fatalf("SDK request %d for carol: %d, want %d", i, got, want)
		}
	}
	if got := serve("garbage"); got != http.StatusUnauthorized {
		t.Fatalf("SDK request with a bad token: %d", got)
	}
}

// A restarted server finds its issuers in the snapshot and fetches their
// key sets again: tokens verify after the restart as before.
func TestJWTIssuersSurviveARestart(t *testing.T) {
	key, set := ecJWKS(t, "k1")
	idp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, set) }))
	t.Cleanup(idp.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func() (*Main, func()) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", dir, "restart", testToken
		cfg.JWKSAllowPrivate, cfg.Webhooks.CAFile = true, ca
		return runMain(t, cfg, nil)
	}
	m, closeM := start()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "idp", "owner_email": "o@idp.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/jwt/issuers", sk, map[string]any{"issuer": "https://id.idp.test/", "jwks_url": idp.URL + "/jwks", "algorithms": []string{"ES256"}})
	tok := signES256(t, key, "k1", map[string]any{"iss": "https://id.idp.test/", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	verified := func(m *Main) func() bool {
		return func() bool {
			a := do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": tok, "path": "/x", "peek": true})
			id, _ := a["identity"].(map[string]any)
			return a["allowed"] == true && id["id"] == "alice"
		}
	}
	waitUntil(t, 5*time.Second, "the token verified", verified(m))
	closeM()
	m, _ = start()
	waitUntil(t, 5*time.Second, "the token verified after the restart", verified(m))
}
