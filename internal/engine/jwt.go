package engine

// Callers identified by a JWT. A check's token is verified against the
// check's own tenant's issuers only: its "iss" selects one of them, and a
// token no issuer of the tenant names is invalid, whatever another tenant
// holds. Verification never waits on the network: the keys are the
// issuer's inline set or the last set the server fetched (jwks.go). A token
// that fails any check answers invalid_token; it never falls back to the IP.
//
// A verified token is kept (tokenCache) until its exp, by the SHA-256 of
// the token, with the issuer's compiled config and key set it was verified
// with: a change of either (a new issuerView or keySet pointer) makes the
// next check verify again.

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/keyed"
	"github.com/sluicehq/sluice/internal/tenants"
)

// JWT bounds.
const (
	// MaxJWTBytes is the longest token verified; a longer one is invalid.
	MaxJWTBytes = 8 << 10
	// MaxJWTSubject is the longest subject accepted.
	MaxJWTSubject = 256
	// maxJWTTier is the longest tier claim value taken as a tier.
	maxJWTTier = 64
	// JWTLeeway is the clock skew allowed on exp and nbf.
	JWTLeeway = 30 * time.Second
	// jwtCacheShards and jwtCachePerShard bound the verified-token cache.
	jwtCacheShards   = 16
	jwtCachePerShard = 4096
	// maxKeysTried bounds the keys one token is verified against: those
	// its kid names, or without a kid those that suit its algorithm, the
	// first maxKeysTried of them in the set's order. A token an outsider
	// sends costs at most that many signature checks.
	maxKeysTried = 2
)

// InvalidTokenIdentity is the identity id (kind "jwt") an invalid token's
// answer names and analytics count it under.
const InvalidTokenIdentity = "invalid_token"

// issuerView is one JWT issuer of a tenant, compiled. A change makes a new
// one, which is how cached verifications of the old one lapse.
type issuerView struct {
	id, tenantID, issuer string
	audiences            []string
	algs                 []string
	subject, tier        string
	// customer is the claim naming the caller's customer's external id;
	// "" when the issuer names none.
	customer string
	// inline is the issuer's own key set; nil when it has a URL.
	inline *keySet
	url    string
}

// keySet is one set of an issuer's public keys, never changed once made.
type keySet struct {
	keys []tenants.JWK
	// sum is the SHA-256 of the fetched body, so that fetching the same
	// set again keeps this one and the tokens verified with it.
	sum [32]byte
}

func compileIssuer(iss tenants.JWTIssuer) *issuerView {
	iv := &issuerView{id: iss.ID, tenantID: iss.TenantID, issuer: iss.Issuer, audiences: iss.Audiences, algs: iss.Algorithms,
		subject: iss.Claims.Subject, tier: iss.Claims.Tier, customer: iss.Claims.Customer, url: iss.JWKSURL}
	if iv.subject == "" {
		iv.subject = tenants.DefaultSubjectClaim
	}
	if len(iss.JWKS) > 0 {
		// Validated when stored; a set that does not parse here verifies
		// nothing rather than failing the tenant's other changes.
		keys, _ := tenants.ParseJWKS(iss.JWKS, false)
		iv.inline = &keySet{keys: keys}
	}
	return iv
}

// setIssuer replaces (iss set) or removes (iss nil) the issuer id in tv, a
// copy no reader has seen.
func (tv *tenantView) setIssuer(id string, iss *tenants.JWTIssuer) {
	next := make(map[string]*issuerView, len(tv.issuers)+1)
	for k, iv := range tv.issuers {
		if iv.id != id {
			next[k] = iv
		}
	}
	if iss != nil {
		next[iss.Issuer] = compileIssuer(*iss)
	}
	tv.issuers = next
}

// verifiedToken is a token that passed every check, as the cache keeps it.
type verifiedToken struct {
	tenantID      string
	iv            *issuerView
	keys          *keySet
	subject, tier string
	// customer is the customer claim's value, "" when none: an external
	// id, looked up at each check since customers change on their own.
	customer string
	until    int64 // unix ns: exp plus the leeway
}

// tokenCache keeps verified tokens by their SHA-256, bounded in entries.
// It is safe for concurrent use.
type tokenCache struct {
	shards [jwtCacheShards]struct {
		mu sync.Mutex
		t  *keyed.Table[[32]byte, verifiedToken]
	}
}

func newTokenCache(perShard int) *tokenCache {
	c := &tokenCache{}
	for i := range c.shards {
		c.shards[i].t = keyed.NewTable[[32]byte, verifiedToken](perShard)
	}
	return c
}

func (c *tokenCache) get(h [32]byte) (verifiedToken, bool) {
	s := &c.shards[h[0]%jwtCacheShards]
	s.mu.Lock()
	v, ok := s.t.Peek(h)
	var out verifiedToken
	if ok {
		out = *v
	}
	s.mu.Unlock()
	return out, ok
}

func (c *tokenCache) put(h [32]byte, v verifiedToken) {
	s := &c.shards[h[0]%jwtCacheShards]
	s.mu.Lock()
	p, _ := s.t.Get(h, v)
	*p = v
	s.mu.Unlock()
}

// jwtVerifier verifies checks' tokens for one engine: the cache and where
// fetched key sets are.
type jwtVerifier struct {
	cache *tokenCache
	jwks  *jwksFetcher
}

// keysOf is the key set iv's tokens are verified with now: its inline
// set, else the last fetched one (nil before any fetch succeeded).
func (j *jwtVerifier) keysOf(iv *issuerView) *keySet {
	if iv.inline != nil {
		return iv.inline
	}
	return j.jwks.keys(iv.id, iv.url)
}

// identify verifies tok for tenant tv at now. It answers the caller's
// subject and tier (the tier claim's value, "" when none), or ok false
// for a token that is invalid for any reason.
func (j *jwtVerifier) identify(tv *tenantView, tok string, now time.Time) (v verifiedToken, ok bool) {
	if len(tok) > MaxJWTBytes || tok == "" {
		return verifiedToken{}, false
	}
	h := hashToken(tok)
	nowNS := now.UnixNano()
	if v, hit := j.cache.get(h); hit && v.tenantID == tv.id && nowNS < v.until &&
		tv.issuers[v.iv.issuer] == v.iv && j.keysOf(v.iv) == v.keys {
		return v, true
	}
	v, err := j.verify(tv, tok, now)
	if err != nil {
		return verifiedToken{}, false
	}
	j.cache.put(h, v)
	return v, true
}

// hashToken is the SHA-256 of a token, hashed from a stack buffer when
// the token is of a usual size: no allocation per cached check.
func hashToken(tok string) [32]byte {
	var buf [2048]byte
	if len(tok) <= len(buf) {
		return sha256.Sum256(append(buf[:0], tok...))
	}
	return sha256.Sum256([]byte(tok))
}

// errJWT is every verification failure: the check answers invalid_token
// and says no more.
var errJWT = errors.New("invalid token")

// verify checks tok's signature, algorithm, key, issuer, audience, exp and
// nbf against tv's issuers.
func (j *jwtVerifier) verify(tv *tenantView, tok string, now time.Time) (verifiedToken, error) {
	var unverified jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &unverified); err != nil {
		return verifiedToken{}, errJWT
	}
	iv := tv.issuers[unverified.Issuer]
	if iv == nil {
		return verifiedToken{}, errJWT
	}
	keys := j.keysOf(iv)
	opts := []jwt.ParserOption{jwt.WithValidMethods(iv.algs), jwt.WithLeeway(JWTLeeway), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }), jwt.WithIssuer(iv.issuer)}
	if len(iv.audiences) > 0 {
		opts = append(opts, jwt.WithAudience(iv.audiences...))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.NewParser(opts...).ParseWithClaims(tok, claims, func(t *jwt.Token) (any, error) {
		return j.keyFor(iv, keys, t, now)
	})
	if err != nil {
		return verifiedToken{}, errJWT
	}
	sub, _ := claims[iv.subject].(string)
	if sub == "" || len(sub) > MaxJWTSubject {
		return verifiedToken{}, errJWT
	}
	v := verifiedToken{tenantID: tv.id, iv: iv, keys: keys, subject: sub}
	if iv.tier != "" {
		if t, _ := claims[iv.tier].(string); len(t) <= maxJWTTier {
			v.tier = t
		}
	}
	if iv.customer != "" {
		if c, _ := claims[iv.customer].(string); len(c) <= tenants.MaxExternalID {
			v.customer = c
		}
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return verifiedToken{}, errJWT
	}
	v.until = exp.Add(JWTLeeway).UnixNano()
	return v, nil
}

// keyFor picks the key a token is verified with: the one its kid names, or
// without a kid the keys that suit its algorithm (at most maxKeysTried). A kid the set does not
// hold asks the issuer's set again (at most every 30 s) and fails this
// token.
func (j *jwtVerifier) keyFor(iv *issuerView, keys *keySet, t *jwt.Token, now time.Time) (any, error) {
	alg := t.Method.Alg()
	if !slices.Contains(iv.algs, alg) {
		return nil, errJWT
	}
	if keys == nil {
		if iv.inline == nil {
			j.jwks.unknownKey(iv.id, now)
		}
		return nil, errJWT
	}
	kid, hasKid := t.Header["kid"].(string)
	var set jwt.VerificationKeySet
	for _, k := range keys.keys {
		if hasKid && k.KeyID != kid {
			continue
		}
		if k.Suits(alg) && len(set.Keys) < maxKeysTried {
			set.Keys = append(set.Keys, k.Key)
		}
	}
	if len(set.Keys) == 0 {
		if iv.inline == nil {
			j.jwks.unknownKey(iv.id, now)
		}
		return nil, errJWT
	}
	if len(set.Keys) == 1 {
		return set.Keys[0], nil
	}
	return set, nil
}

// JWKSURLChecker answers the check of where an issuer's jwks_url points
// before it is stored: unless private addresses are allowed
// (--jwks-allow-private), its host must resolve to public addresses only
// and its port be 443 or 8443. Errors name the field jwks_url.
func JWKSURLChecker(allowPrivate bool) func(ctx context.Context, raw string) error {
	return func(ctx context.Context, raw string) error {
		return checkJWKSURL(ctx, raw, allowPrivate)
	}
}
