package tenants

// JWT issuers: the identity providers whose tokens a tenant's checks may
// carry instead of a consumer key. An issuer names its "iss", the
// audiences a token must be for, where its public keys are (a JWKS URL
// each server fetches, or a set given inline), the algorithms it signs
// with, and which claims name the caller and its tier.
//
// Only public-key algorithms are accepted: a shared HMAC secret able to
// verify a tenant's tokens could also mint them, and Sluice does not hold
// such secrets. A key is used only with the algorithms its type serves
// (KeySuits), so an RSA public key is never taken for an HMAC secret.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// JWT issuer bounds.
const (
	// MaxJWTIssuers is the most issuers one tenant may have.
	MaxJWTIssuers = 20
	// MaxJWTIssuerName is the longest "iss" an issuer may name.
	MaxJWTIssuerName = 512
	// MaxJWKSURL is the longest JWKS URL.
	MaxJWKSURL = 2048
	// MaxJWKSBytes bounds a fetched key set.
	MaxJWKSBytes = 256 << 10
	// MaxInlineJWKSBytes bounds a key set given inline: every server
	// keeps it in its config.
	MaxInlineJWKSBytes = 64 << 10
	// MaxJWKSKeys is the most keys a set may hold.
	MaxJWKSKeys = 100
	// MaxJWTAudiences is the most audiences an issuer may list.
	MaxJWTAudiences = 20
	// MaxJWTClaimName is the longest claim name.
	MaxJWTClaimName = 64
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
	// MaxRSABits is the largest RSA modulus accepted, and MaxRSAExponent
	// the largest public exponent: a check's token is verified on the
	// servers every tenant shares, and the cost of an RSA verification
	// grows with both (a 4096-bit key with e = 65537 takes about four
	// times a 2048-bit one; a 16384-bit one with a 32-bit exponent, over
	// a hundred times).
	MaxRSABits     = 4096
	MaxRSAExponent = 65537
)

// IDJWTIssuer prefixes issuer ids.
const IDJWTIssuer = "iss_"

// JWTAlgorithms are the algorithms an issuer may sign with.
var JWTAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// DefaultJWTAlgorithms are an issuer's algorithms when it lists none.
var DefaultJWTAlgorithms = []string{"RS256"}

// DefaultSubjectClaim is the claim that names the caller when an issuer
// names none.
const DefaultSubjectClaim = "sub"

// JWTClaims names the claims Sluice reads from a verified token.
type JWTClaims struct {
	// Subject is the claim whose string value is the caller's id.
	Subject string `json:"subject"`
	// Tier, when set, is the claim whose string value is the caller's
	// tier; a token without it, or with a tier a policy does not list,
	// is decided under the policy's default tier.
	Tier string `json:"tier,omitempty"`
	// Customer, when set, is the claim whose string value is the
	// external_id of the caller's customer; a token without it, or naming
	// no customer of the tenant, is a caller without a customer.
	Customer string `json:"customer,omitempty"`
}

// JWTIssuer is one identity provider of a tenant. Exactly one of JWKSURL
// and JWKS is set.
type JWTIssuer struct {
	ID         string          `json:"id"`
	TenantID   string          `json:"tenant_id"`
	Issuer     string          `json:"issuer"`
	Audiences  []string        `json:"audiences"`
	JWKSURL    string          `json:"jwks_url,omitempty"`
	JWKS       json.RawMessage `json:"jwks,omitempty"`
	Algorithms []string        `json:"algorithms"`
	Claims     JWTClaims       `json:"claims"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// JWTIssuerBody is an issuer as clients write it: the body of POST and
// PATCH /v1/jwt/issuers. In a PATCH every field is optional, and giving
// one of jwks_url and jwks replaces the other.
type JWTIssuerBody struct {
	Issuer     *string          `json:"issuer,omitempty"`
	Audiences  *[]string        `json:"audiences,omitempty"`
	JWKSURL    *string          `json:"jwks_url,omitempty"`
	JWKS       *json.RawMessage `json:"jwks,omitempty"`
	Algorithms *[]string        `json:"algorithms,omitempty"`
	Claims     *JWTClaims       `json:"claims,omitempty"`
}

// Apply writes b over iss and validates the result, naming the field at
// fault; iss is left partly written on an error.
func (b JWTIssuerBody) Apply(iss *JWTIssuer) error {
	if b.JWKSURL != nil && *b.JWKSURL != "" && b.JWKS != nil && !isJSONNull(*b.JWKS) {
		return invalid("jwks_url", "give jwks_url or jwks, not both")
	}
	if b.Issuer != nil {
		iss.Issuer = *b.Issuer
	}
	if b.Audiences != nil {
		iss.Audiences = slices.Clone(*b.Audiences)
	}
	if b.JWKSURL != nil && *b.JWKSURL != "" {
		iss.JWKSURL, iss.JWKS = *b.JWKSURL, nil
	}
	if b.JWKS != nil && !isJSONNull(*b.JWKS) {
		iss.JWKSURL, iss.JWKS = "", slices.Clone(*b.JWKS)
	}
	if b.Algorithms != nil {
		iss.Algorithms = slices.Clone(*b.Algorithms)
	}
	if b.Claims != nil {
		iss.Claims = *b.Claims
	}
	return iss.normalize()
}

func isJSONNull(raw json.RawMessage) bool {
	return len(raw) == 0 || strings.TrimSpace(string(raw)) == "null"
}

// normalize fills defaults and validates iss, naming the field at fault.
func (iss *JWTIssuer) normalize() error {
	if iss.Issuer == "" {
		return invalid("issuer", "required: the \"iss\" the tokens carry, such as https://id.example.com/")
	}
	if len(iss.Issuer) > MaxJWTIssuerName || !printable(iss.Issuer) {
		return invalid("issuer", "must be at most %d printable characters", MaxJWTIssuerName)
	}
	if err := iss.normalizeKeys(); err != nil {
		return err
	}
	if len(iss.Audiences) > MaxJWTAudiences {
		return invalid("audiences", "at most %d", MaxJWTAudiences)
	}
	for i, a := range iss.Audiences {
		if a == "" || len(a) > MaxJWTIssuerName || !printable(a) {
			return invalid(fmt.Sprintf("audiences[%d]", i), "must be 1 to %d printable characters", MaxJWTIssuerName)
		}
	}
	if iss.Audiences == nil {
		iss.Audiences = []string{}
	}
	if err := iss.normalizeAlgorithms(); err != nil {
		return err
	}
	if iss.JWKS != nil {
		if err := checkInlineKeys(iss.JWKS, iss.Algorithms); err != nil {
			return err
		}
	}
	return iss.Claims.normalize()
}

// normalizeKeys checks that exactly one of jwks_url and jwks is set, and
// its form. Where the URL points is checked by the caller that resolves
// it (the server's SSRF guard).
func (iss *JWTIssuer) normalizeKeys() error {
	hasURL, hasSet := iss.JWKSURL != "", !isJSONNull(iss.JWKS)
	switch {
	case hasURL && hasSet:
		return invalid("jwks_url", "give jwks_url or jwks, not both")
	case !hasURL && !hasSet:
		return invalid("jwks_url", "required: give jwks_url (where the issuer publishes its keys) or an inline jwks")
	case hasURL:
		iss.JWKS = nil
		_, err := validateHTTPSURL("jwks_url", iss.JWKSURL, MaxJWKSURL)
		return err
	}
	if len(iss.JWKS) > MaxInlineJWKSBytes {
		return invalid("jwks", "larger than %d bytes; publish a larger set at a jwks_url", MaxInlineJWKSBytes)
	}
	return nil
}

func (iss *JWTIssuer) normalizeAlgorithms() error {
	if len(iss.Algorithms) == 0 {
		iss.Algorithms = slices.Clone(DefaultJWTAlgorithms)
		return nil
	}
	var out []string
	for i, a := range iss.Algorithms {
		field := fmt.Sprintf("algorithms[%d]", i)
		switch {
		case strings.EqualFold(a, "none"):
			return invalid(field, "\"none\" is refused: a token must be signed")
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return invalid(field, "%q is refused: an HMAC secret able to verify tokens could also mint them, and Sluice holds no such secret; use a public-key algorithm (%s)", a, strings.Join(JWTAlgorithms, ", "))
		case !slices.Contains(JWTAlgorithms, a):
			return invalid(field, "must be one of %s", strings.Join(JWTAlgorithms, ", "))
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	iss.Algorithms = out
	return nil
}

// checkInlineKeys parses an inline set strictly: every key must be a
// well-formed public key, and one at least must suit an algorithm.
func checkInlineKeys(raw json.RawMessage, algs []string) error {
	keys, err := ParseJWKS(raw, true)
	if err != nil {
		return invalid("jwks", "%s", err)
	}
	for _, k := range keys {
		for _, a := range algs {
			if k.Suits(a) {
				return nil
			}
		}
	}
	return invalid("jwks", "no key suits the algorithms %s", strings.Join(algs, ", "))
}

func (c *JWTClaims) normalize() error {
	if c.Subject == "" {
		c.Subject = DefaultSubjectClaim
	}
	for _, f := range []struct{ field, v string }{{"claims.subject", c.Subject}, {"claims.tier", c.Tier}, {"claims.customer", c.Customer}} {
		if len(f.v) > MaxJWTClaimName || !printable(f.v) {
			return invalid(f.field, "must be a claim name of at most %d printable characters", MaxJWTClaimName)
		}
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// JWK is one public key of a set.
type JWK struct {
	KeyID string
	// Alg is the algorithm the set pins the key to, "" when it does not.
	Alg string
	Key crypto.PublicKey
}

// Suits reports whether k may verify a token signed with alg: the key's
// type serves alg, and the set does not pin the key to another one.
func (k JWK) Suits(alg string) bool {
	if k.Alg != "" && k.Alg != alg {
		return false
	}
	return KeySuits(alg, k.Key)
}

// KeySuits reports whether a public key's type serves the algorithm: RSA
// for RS* and PS*, ECDSA on the named curve for ES*, Ed25519 for EdDSA.
// Nothing suits an HMAC or "none".
func KeySuits(alg string, key crypto.PublicKey) bool {
	switch k := key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return k.Curve == elliptic.P256()
		case "ES384":
			return k.Curve == elliptic.P384()
		case "ES512":
			return k.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

type jwkJSON struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d"`
}

// ParseJWKS parses a JSON Web Key Set ({"keys": [...]}) into its public
// keys. Strict, any key Sluice cannot use is an error (a set a tenant
// gives inline); else such keys (encryption keys, other types) are
// skipped, and only a set with no usable key is an error (a fetched set).
func ParseJWKS(raw []byte, strict bool) ([]JWK, error) {
	if len(raw) > MaxJWKSBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxJWKSBytes)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set ({\"keys\": [...]})")
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("holds no key")
	}
	if len(set.Keys) > MaxJWKSKeys {
		return nil, fmt.Errorf("holds more than %d keys", MaxJWKSKeys)
	}
	var out []JWK
	for i, rk := range set.Keys {
		k, err := parseJWK(rk)
		if err != nil {
			if strict {
				return nil, fmt.Errorf("keys[%d]: %s", i, err)
			}
			continue
		}
		if strict && k.KeyID != "" && slices.ContainsFunc(out, func(o JWK) bool { return o.KeyID == k.KeyID }) {
			return nil, fmt.Errorf("keys[%d]: kid %q appears twice", i, k.KeyID)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("holds no usable public key")
	}
	return out, nil
}

func parseJWK(raw json.RawMessage) (JWK, error) {
	var j jwkJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return JWK{}, fmt.Errorf("not a JSON Web Key")
	}
	if j.Use != "" && j.Use != "sig" {
		return JWK{}, fmt.Errorf("use %q: only signing keys (sig) are used", j.Use)
	}
	if j.D != "" {
		return JWK{}, fmt.Errorf("holds a private key (d): give the public key only")
	}
	if j.Alg != "" && !slices.Contains(JWTAlgorithms, j.Alg) {
		return JWK{}, fmt.Errorf("alg %q: must be one of %s", j.Alg, strings.Join(JWTAlgorithms, ", "))
	}
	k := JWK{KeyID: j.Kid, Alg: j.Alg}
	var err error
	switch j.Kty {
	case "RSA":
		k.Key, err = rsaKey(j)
	case "EC":
		k.Key, err = ecKey(j)
	case "OKP":
		k.Key, err = okpKey(j)
	case "oct":
		err = fmt.Errorf("kty \"oct\" (a shared secret) is refused: only public keys verify tokens")
	default:
		err = fmt.Errorf("kty %q: must be RSA, EC or OKP", j.Kty)
	}
	return k, err
}

func b64(field, s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("%s: not base64url", field)
	}
	return b, nil
}

func rsaKey(j jwkJSON) (crypto.PublicKey, error) {
	n, err := b64("n", j.N)
	if err != nil {
		return nil, err
	}
	e, err := b64("e", j.E)
	if err != nil {
		return nil, err
	}
	if len(e) > 4 {
		return nil, fmt.Errorf("e: too large")
	}
	var exp int
	for _, c := range e {
		exp = exp<<8 | int(c)
	}
	pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
	if pub.N.BitLen() < MinRSABits {
		return nil, fmt.Errorf("an RSA key of %d bits: at least %d are needed", pub.N.BitLen(), MinRSABits)
	}
	if pub.N.BitLen() > MaxRSABits {
		return nil, fmt.Errorf("an RSA key of %d bits: at most %d are accepted", pub.N.BitLen(), MaxRSABits)
	}
	if exp < 3 || exp%2 == 0 {
		return nil, fmt.Errorf("e: not a valid RSA exponent")
	}
	if exp > MaxRSAExponent {
		return nil, fmt.Errorf("e: at most %d is accepted", MaxRSAExponent)
	}
	return pub, nil
}

func ecKey(j jwkJSON) (crypto.PublicKey, error) {
	var curve elliptic.Curve
	switch j.Crv {
	case "P-256":
		curve = elliptic.P256()
	case "P-384":
		curve = elliptic.P384()
	case "P-521":
		curve = elliptic.P521()
	default:
		return nil, fmt.Errorf("crv %q: must be P-256, P-384 or P-521", j.Crv)
	}
	x, err := b64("x", j.X)
	if err != nil {
		return nil, err
	}
	y, err := b64("y", j.Y)
	if err != nil {
		return nil, err
	}
	size := (curve.Params().BitSize + 7) / 8
	if len(x) != size || len(y) != size {
		return nil, fmt.Errorf("x, y: must be %d bytes each for %s", size, j.Crv)
	}
	// The uncompressed point form checks that the point is on the curve.
	pt := append(append([]byte{4}, x...), y...)
	pub, err := ecdsa.ParseUncompressedPublicKey(curve, pt)
	if err != nil {
		return nil, fmt.Errorf("x, y: not a point of %s", j.Crv)
	}
	return pub, nil
}

func okpKey(j jwkJSON) (crypto.PublicKey, error) {
	if j.Crv != "Ed25519" {
		return nil, fmt.Errorf("crv %q: must be Ed25519", j.Crv)
	}
	x, err := b64("x", j.X)
	if err != nil {
		return nil, err
	}
	if len(x) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("x: must be %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(x), nil
}

// ValidateJWKSURL checks a jwks_url's form: https, a host, no user or
// password, no fragment. Where the host points is the server's to check.
func ValidateJWKSURL(raw string) error {
	_, err := validateHTTPSURL("jwks_url", raw, MaxJWKSURL)
	return err
}
