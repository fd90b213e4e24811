package engine

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/bus/bustest"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// testKeys are one key of each type, generated once for the package's tests.
var testKeys = sync.OnceValue(func() (k struct {
	rsa, rsa2 *rsa.PrivateKey
	ec        *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}) {
	k.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.rsa2, _ = rsa.GenerateKey(rand.Reader, 2048)
	k.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, k.ed, _ = ed25519.GenerateKey(rand.Reader)
	return k
})

var b64u = base64.RawURLEncoding.EncodeToString

// jwkJSON is a public key as a JSON Web Key with kid.
func jwkJSON(kid string, pub any) map[string]string {
	m := map[string]string{"kid": kid}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", b64u(k.N.Bytes()), b64u(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PublicKey:
		b, _ := k.Bytes()
		size := (len(b) - 1) / 2
		m["kty"], m["crv"], m["x"], m["y"] = "EC", k.Curve.Params().Name, b64u(b[1:1+size]), b64u(b[1+size:])
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", b64u(k)
	}
	return m
}

func jwks(keys ...map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// sign makes a compact token of claims signed with key under m, with kid
// in its header when not empty.
func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// claimsAt are valid claims for issuer iss at now, subject sub.
func claimsAt(iss, sub string, now time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": iss, "sub": sub, "aud": "api", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
}

const issA = "https://id.a.test/"

// jwtSnapshot is the engine tests' snapshot with tenant A's issuer issA
// holding one inline key of each type, and a policy on /jwt/* of 2 checks
// a minute by default and 5 for the pro tier.
func jwtSnapshot(t testing.TB) tenants.Snapshot {
	snap, _ := snapshot(t)
	k := testKeys()
	set := jwks(jwkJSON("r1", &k.rsa.PublicKey), jwkJSON("e1", &k.ec.PublicKey), jwkJSON("d1", k.ed.Public()))
	snap.JWTIssuers = []tenants.JWTIssuer{{ID: "iss_a", TenantID: "ten_a", Issuer: issA, Audiences: []string{"api"}, JWKS: set,
		Algorithms: []string{"RS256", "ES256", "EdDSA"}, Claims: tenants.JWTClaims{Subject: "sub", Tier: "plan"}}}
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_jwt", TenantID: "ten_a", Name: "jwt", Method: "*", Path: "/jwt/*", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"default": limit("fixed_window", 2, "1m"), "pro": limit("fixed_window", 5, "1m")}})
	return snap
}

func TestJWTVerification(t *testing.T) {
	e := newTestEngine(t, jwtSnapshot(t))
	k := testKeys()
	now := t0
	with := func(f func(jwt.MapClaims)) jwt.MapClaims {
		c := claimsAt(issA, "user-1", now)
		f(c)
		return c
	}
	rsaPub, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claimsAt(issA, "user-1", now)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, c := range []struct {
		name string
		tok  string
		ok   bool
		tier string
	}{
		{"RS256", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "user-1", now)), true, "default"},
		{"ES256 with a tier", sign(t, jwt.SigningMethodES256, k.ec, "e1", with(func(c jwt.MapClaims) { c["plan"] = "pro" })), true, "pro"},
		{"EdDSA without kid", sign(t, jwt.SigningMethodEdDSA, k.ed, "", claimsAt(issA, "user-1", now)), true, "default"},
		{"an unknown tier is default", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["plan"] = "gold" })), true, "default"},
		{"expired within the leeway", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-20 * time.Second).Unix() })), true, "default"},
		{"expired", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["exp"] = now.Add(-31 * time.Second).Unix() })), false, ""},
		{"no exp", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { delete(c, "exp") })), false, ""},
		{"not yet valid", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() })), false, ""},
		{"wrong iss", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" })), false, ""},
		{"wrong aud", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["aud"] = []string{"other"} })), false, ""},
		{"no aud", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { delete(c, "aud") })), false, ""},
		{"unknown kid", sign(t, jwt.SigningMethodRS256, k.rsa, "r9", claimsAt(issA, "user-1", now)), false, ""},
		{"another key under a known kid", sign(t, jwt.SigningMethodRS256, k.rsa2, "r1", claimsAt(issA, "user-1", now)), false, ""},
		{"kid of a key of another type", sign(t, jwt.SigningMethodRS256, k.rsa, "e1", claimsAt(issA, "user-1", now)), false, ""},
		{"alg not allowed", sign(t, jwt.SigningMethodPS256, k.rsa, "r1", claimsAt(issA, "user-1", now)), false, ""},
		{"HS256 keyed with the RSA public key", sign(t, jwt.SigningMethodHS256, rsaPub, "r1", claimsAt(issA, "user-1", now)), false, ""},
		{"none", none, false, ""},
		{"no subject", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { delete(c, "sub") })), false, ""},
		{"subject too long", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["sub"] = strings.Repeat("s", MaxJWTSubject+1) })), false, ""},
		{"oversized", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", with(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("p", MaxJWTBytes) })), false, ""},
		{"malformed", "not.a.token", false, ""},
		{"tampered", sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "user-1", now)) + "x", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A fresh subject each case, so no bucket is shared; the IP is
			// there to show an invalid token never falls back to it.
			r := CheckRequest{JWT: c.tok, IP: "192.0.2.50", Path: "/jwt/x", Peek: true}
			a, err := e.Check(t.Context(), "ten_a", &r, now)
			if err != nil {
				t.Fatal(err)
			}
			if !c.ok {
				if a.Allowed || a.Reason != ReasonInvalidToken || a.IdentityKind != KindJWT || a.IdentityID != InvalidTokenIdentity {
					t.Fatalf("answer %+v, want invalid_token", a)
				}
				return
			}
			if !a.Allowed || a.IdentityKind != KindJWT || a.IdentityID != "user-1" || a.Tier != c.tier || a.Policy != "jwt" {
				t.Fatalf("answer %+v, want allowed as jwt user-1 of tier %s", a, c.tier)
			}
		})
	}
}

// Checks with tokens are limited per subject, whatever token carries it.
func TestJWTLimitsPerSubject(t *testing.T) {
	e := newTestEngine(t, jwtSnapshot(t))
	k := testKeys()
	check := func(tok string) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/jwt/x"}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	first := sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "alice", t0))
	second := sign(t, jwt.SigningMethodES256, k.ec, "e1", claimsAt(issA, "alice", t0.Add(-time.Second)))
	for i, tok := range []string{first, second} {
		if a := check(tok); !a.Allowed || a.Remaining != int64(1-i) {
			t.Fatalf("check %d: %+v", i, a)
		}
	}
	if a := check(first); a.Allowed || a.Reason != ReasonRateLimited {
		t.Fatalf("third check of alice: %+v", a)
	}
	if a := check(sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "bob", t0))); !a.Allowed {
		t.Fatalf("bob: %+v", a)
	}
	key := BucketKey("ten_a", "pol_jwt", KindJWT, "alice")
	if key != "ten_a/pol_jwt/jwt:alice" {
		t.Fatalf("bucket key %q", key)
	}
}

// A tenant's issuers verify only its own checks: tenant B's issuer with
// the same iss and B's key does not make B's tokens valid for A, even
// after B verified (and cached) them.
func TestJWTTenantIsolation(t *testing.T) {
	snap := jwtSnapshot(t)
	k := testKeys()
	snap.JWTIssuers = append(snap.JWTIssuers, tenants.JWTIssuer{ID: "iss_b", TenantID: "ten_b", Issuer: issA, Audiences: []string{"api"},
		JWKS: jwks(jwkJSON("r1", &k.rsa2.PublicKey)), Algorithms: []string{"RS256"}, Claims: tenants.JWTClaims{Subject: "sub"}})
	e := newTestEngine(t, snap)
	tokB := sign(t, jwt.SigningMethodRS256, k.rsa2, "r1", claimsAt(issA, "mallory", t0))
	if a, _ := e.Check(t.Context(), "ten_b", &CheckRequest{JWT: tokB, Path: "/x"}, t0); !a.Allowed || a.IdentityID != "mallory" {
		t.Fatalf("B's token in B: %+v", a)
	}
	if a, _ := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tokB, Path: "/jwt/x"}, t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("B's token in A: %+v", a)
	}
	tokA := sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "alice", t0))
	if a, _ := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tokA, Path: "/jwt/x"}, t0); !a.Allowed {
		t.Fatalf("A's token in A: %+v", a)
	}
	if a, _ := e.Check(t.Context(), "ten_b", &CheckRequest{JWT: tokA, Path: "/x"}, t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("A's cached token in B: %+v", a)
	}
}

// A cached verification lapses when the issuer's config changes or the
// token expires.
func TestJWTCacheFollowsConfig(t *testing.T) {
	snap := jwtSnapshot(t)
	e := newTestEngine(t, snap)
	k := testKeys()
	tok := sign(t, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "alice", t0))
	check := func(at time.Time) Answer {
		t.Helper()
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/x"}, at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := check(t0); !a.Allowed {
		t.Fatalf("first: %+v", a)
	}
	// Past exp and the leeway, the cached entry no longer answers.
	if a := check(t0.Add(time.Hour + 31*time.Second)); a.Reason != ReasonInvalidToken {
		t.Fatalf("after exp: %+v", a)
	}
	swap := func(c tenants.Change) {
		t.Helper()
		v, err := e.view.Load().apply(c)
		if err != nil {
			t.Fatal(err)
		}
		e.view.Store(v)
	}
	swap(tenants.Change{Version: 2, Kind: tenants.ChangeJWTIssuerDeleted, TenantID: "ten_a", ID: "iss_a"})
	if a := check(t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("issuer deleted: %+v", a)
	}
	iss := snap.JWTIssuers[0]
	iss.Audiences = []string{"other"}
	swap(tenants.Change{Version: 3, Kind: tenants.ChangeJWTIssuer, TenantID: "ten_a", JWTIssuer: &iss})
	if a := check(t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("audience changed: %+v", a)
	}
	iss.Audiences = []string{"api"}
	swap(tenants.Change{Version: 4, Kind: tenants.ChangeJWTIssuer, TenantID: "ten_a", JWTIssuer: &iss})
	if a := check(t0); !a.Allowed {
		t.Fatalf("audience back: %+v", a)
	}
}

// jwksServer is an issuer's key set endpoint over TLS on loopback, whose
// answer a test changes.
type jwksServer struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	body   []byte
	status int
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	s := &jwksServer{body: body, status: http.StatusOK}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.status)
		w.Write(s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

// jwksEngine is an engine whose tenant A has one issuer at srv's URL,
// fetching with loopback allowed and srv's certificate trusted.
func jwksEngine(t *testing.T, srv *jwksServer) *Engine {
	snap := jwtSnapshot(t)
	snap.JWTIssuers[0].JWKS, snap.JWTIssuers[0].JWKSURL = nil, srv.URL+"/jwks.json"
	snap.JWTIssuers[0].Algorithms = []string{"RS256"}
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	nc := bustest.InProcess(t, bus.EmbeddedConfig{DataDir: t.TempDir(), Name: "engine-test"})
	e, err := New(Config{Node: "test", JWKS: JWKSOptions{AllowPrivate: true, RootCAs: roots}}, nc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := viewFromSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	e.view.Store(v)
	e.hyd.done.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	e.jwt.jwks.start(ctx)
	e.jwt.jwks.load(snap.JWTIssuers)
	t.Cleanup(func() {
		cancel()
		e.jwt.jwks.close()
	})
	return e
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The fetched set: a token of an unknown kid asks for the set again at
// most every 30 s, a rotated key is then found, and a failed or oversized
// fetch keeps the last good set.
func TestJWKSFetch(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, jwks(jwkJSON("k1", &k.rsa.PublicKey)))
	e := jwksEngine(t, srv)
	check := func(kid string, key *rsa.PrivateKey, sub string, at time.Time) Answer {
		t.Helper()
		tok := sign(t, jwt.SigningMethodRS256, key, kid, claimsAt(issA, sub, at))
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/x"}, at)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	waitFor(t, "the first fetch", func() bool { return e.jwt.jwks.keys("iss_a", srv.URL+"/jwks.json") != nil })
	if a := check("k1", k.rsa, "u1", t0); !a.Allowed || a.IdentityID != "u1" {
		t.Fatalf("k1: %+v", a)
	}

	// The issuer rotates in k2: the first token with it is refused and
	// asks for the set again; the next one is verified.
	srv.serve(http.StatusOK, jwks(jwkJSON("k1", &k.rsa.PublicKey), jwkJSON("k2", &k.rsa2.PublicKey)))
	if a := check("k2", k.rsa2, "u2", t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("k2 before the refresh: %+v", a)
	}
	waitFor(t, "the refresh", func() bool { return srv.hits.Load() == 2 })
	waitFor(t, "k2", func() bool { return check("k2", k.rsa2, "u2", t0.Add(time.Second)).Allowed })

	// An unknown kid asks again at most once per 30 s. The same set
	// fetched again is kept as it was, and so are the tokens verified
	// with it.
	rotated := e.jwt.jwks.keys("iss_a", srv.URL+"/jwks.json")
	check("k3", k.rsa, "u3", t0.Add(31*time.Second))
	waitFor(t, "the third fetch", func() bool { return srv.hits.Load() == 3 })
	time.Sleep(100 * time.Millisecond)
	if e.jwt.jwks.keys("iss_a", srv.URL+"/jwks.json") != rotated {
		t.Fatal("the same set fetched again replaced the kept one")
	}
	check("k3", k.rsa, "u3", t0.Add(50*time.Second))
	time.Sleep(200 * time.Millisecond)
	if n := srv.hits.Load(); n != 3 {
		t.Fatalf("%d fetches within 30 s of the last asked, want 3", n)
	}

	// A failing issuer: the last good set stays, and failures are counted.
	srv.serve(http.StatusInternalServerError, nil)
	check("k3", k.rsa, "u3", t0.Add(62*time.Second))
	waitFor(t, "the failed fetch", func() bool { return testutil.ToFloat64(e.metrics.jwksFailures) == 1 })
	if a := check("k1", k.rsa, "u4", t0.Add(63*time.Second)); !a.Allowed {
		t.Fatalf("k1 after a failed fetch: %+v", a)
	}
	// A set past the size bound is refused the same way.
	srv.serve(http.StatusOK, append(jwks(jwkJSON("k9", &k.rsa.PublicKey))[:0:0], make([]byte, tenants.MaxJWKSBytes+1)...))
	check("k9", k.rsa, "u5", t0.Add(93*time.Second))
	waitFor(t, "the oversized fetch", func() bool { return testutil.ToFloat64(e.metrics.jwksFailures) == 2 })
	if a := check("k2", k.rsa2, "u6", t0.Add(94*time.Second)); !a.Allowed {
		t.Fatalf("k2 after an oversized set: %+v", a)
	}
}

// Before any fetch succeeded, every token of the issuer is invalid.
func TestJWKSUnreachable(t *testing.T) {
	k := testKeys()
	srv := newJWKSServer(t, nil)
	srv.serve(http.StatusServiceUnavailable, nil)
	e := jwksEngine(t, srv)
	waitFor(t, "the failed fetch", func() bool { return testutil.ToFloat64(e.metrics.jwksFailures) >= 1 })
	tok := sign(t, jwt.SigningMethodRS256, k.rsa, "k1", claimsAt(issA, "u1", t0))
	if a, _ := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/x"}, t0); a.Reason != ReasonInvalidToken {
		t.Fatalf("before any fetch: %+v", a)
	}
}

// Where a jwks_url may point, without --jwks-allow-private.
func TestCheckJWKSURL(t *testing.T) {
	check := JWKSURLChecker(false)
	for _, u := range []string{"https://127.0.0.1/jwks", "https://10.1.2.3/jwks", "https://[::1]/jwks", "https://8.8.8.8:9000/jwks", "https://localhost/jwks", "http://8.8.8.8/jwks"} {
		err := check(t.Context(), u)
		if !errs.Is(err, errs.Invalid) || !strings.HasPrefix(errs.Message(err), "jwks_url:") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if err := check(t.Context(), "https://8.8.8.8/jwks"); err != nil {
		t.Errorf("a public address: %v", err)
	}
}

func TestRefreshAfter(t *testing.T) {
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", 10 * time.Minute},
		{"public, max-age=3600", time.Hour},
		{"max-age=5", time.Minute},
		{"max-age=999999999", 24 * time.Hour},
		{"no-store", 10 * time.Minute},
	} {
		if got := refreshAfter(c.header, 10*time.Minute); got != c.want {
			t.Errorf("%q: %v, want %v", c.header, got, c.want)
		}
	}
}

// BenchmarkEngineCheckJWT compares a check with a cached JWT to one with
// a consumer key.
func BenchmarkEngineCheckJWT(b *testing.B) {
	snap := jwtSnapshot(b)
	plain, prefix, hash, _ := tenants.GenerateKey("ck_")
	snap.ConsumerKeys = []tenants.ConsumerKeyRecord{{ConsumerKey: tenants.ConsumerKey{ID: "ckey_b", TenantID: "ten_a", Tier: "default", Prefix: prefix, Hash: hash}}}
	snap.Policies = append(snap.Policies, tenants.Policy{ID: "pol_wide", TenantID: "ten_a", Name: "wide-jwt", Method: "*", Path: "/wide/*", CreatedAt: t0,
		Tiers: map[string]tenants.Limits{"default": limit("token_bucket", 1_000_000_000, "1s")}})
	e := newTestEngine(b, snap)
	k := testKeys()
	tok := sign(b, jwt.SigningMethodRS256, k.rsa, "r1", claimsAt(issA, "bench-user", t0))
	for _, c := range []struct {
		name string
		req  CheckRequest
	}{
		{"api_key", CheckRequest{APIKey: plain, Path: "/wide/items"}},
		{"jwt_cached", CheckRequest{JWT: tok, Path: "/wide/items"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := c.req
				a, err := e.Check(context.Background(), "ten_a", &r, t0)
				if err != nil || !a.Allowed {
					b.Fatal(a, err)
				}
			}
		})
	}
	b.Run("jwt_uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e.jwt.cache = newTokenCache(jwtCachePerShard)
			r := CheckRequest{JWT: tok, Path: "/wide/items"}
			if a, err := e.Check(context.Background(), "ten_a", &r, t0); err != nil || !a.Allowed {
				b.Fatal(a, err)
			}
		}
	})
}

// A token without a kid is tried against at most maxKeysTried keys of its
// algorithm, the first in the set: an outsider's token costs at most that
// many signature checks, however many keys the issuer publishes.
func TestJWTKeysTriedAreBounded(t *testing.T) {
	snap := jwtSnapshot(t)
	var pubs []map[string]string
	var privs []ed25519.PrivateKey
	for range maxKeysTried + 1 {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		pubs, privs = append(pubs, jwkJSON("", pub)), append(privs, priv)
	}
	snap.JWTIssuers[0].JWKS = jwks(pubs...)
	snap.JWTIssuers[0].Algorithms = []string{"EdDSA"}
	e := newTestEngine(t, snap)
	for i, want := range map[int]bool{0: true, maxKeysTried - 1: true, maxKeysTried: false} {
		tok := sign(t, jwt.SigningMethodEdDSA, privs[i], "", claimsAt(issA, "user-1", t0))
		a, err := e.Check(t.Context(), "ten_a", &CheckRequest{JWT: tok, Path: "/jwt/x", Peek: true}, t0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Allowed != want || (!want && a.Reason != ReasonInvalidToken) {
			t.Fatalf("a token of key %d of %d without kid: %+v, want allowed %v", i+1, len(privs), a, want)
		}
	}
}
