package ui

// Sessions are stateless: a JWT (HS256, and only HS256) in an HttpOnly,
// SameSite=Lax cookie carries the user's id, tenant, role, session version
// and a random session id. The signing key is 32 random bytes generated once and kept in
// the data directory (session.key, mode 0600), so sessions survive a
// restart. Form tokens (CSRF) are an HMAC of the session id under a key
// derived from the same secret, so they need no storage either and change
// with every sign-in.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicehq/sluice/internal/httpsec"
)

const (
	sessionCookie = "sluice_session"
	// loginCookie carries the random nonce the sign-in form's token is
	// derived from, before there is a session.
	loginCookie    = "sluice_login"
	csrfField      = "_csrf"
	sessionIssuer  = "sluice"
	sessionAud     = "sluice-dashboard"
	sessionKeyFile = "session.key"
	sessionKeyLen  = 32
)

// claims is the session token's payload.
type claims struct {
	TenantID   string `json:"tid,omitempty"`
	TenantName string `json:"tname,omitempty"`
	Role       string `json:"role"`
	Email      string `json:"email"`
	SID        string `json:"sid"`
	// SV is the user's session version at sign-in; a token whose version
	// is not the user's current one is refused.
	SV int64 `json:"sv"`
	jwt.RegisteredClaims
}

// session is a signed-in user, as a request sees it.
type session struct {
	UserID     string
	TenantID   string
	TenantName string
	Role       string
	Email      string
	SID        string
	Version    int64 // the user's session version it was issued with
	Issued     time.Time
	Expires    time.Time
}

// sessions issues and verifies session tokens and form tokens.
type sessions struct {
	signKey []byte // HS256 key of the JWT
	csrfKey []byte // HMAC key of form tokens
	sealKey []byte // AES-256-GCM key of secrets carried across a redirect
	ttl     time.Duration
	now     func() time.Time
	// transport decides which requests came over HTTPS; its zero value
	// trusts only a TLS connection.
	transport httpsec.Transport
}

func newSessions(secret []byte, ttl time.Duration, now func() time.Time) *sessions {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return &sessions{signKey: derive("sluice session jwt v1"), csrfKey: derive("sluice form token v1"), sealKey: derive("sluice sealed secret v1"), ttl: ttl, now: now}
}

// loadSessionKey reads the data directory's session key, creating it on a
// first start. O_EXCL makes two processes starting at once agree on one key.
func loadSessionKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, sessionKeyFile)
	for range 3 {
		key, err := os.ReadFile(path)
		if err == nil {
			if len(key) < sessionKeyLen {
				return nil, fmt.Errorf("session key %s: %d bytes, want %d; delete it to generate a new one (signs everyone out)", path, len(key), sessionKeyLen)
			}
			return key, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("session key: %w", err)
		}
		key = make([]byte, sessionKeyLen)
		rand.Read(key)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // another process won the race; read its key
		}
		if err != nil {
			return nil, fmt.Errorf("session key: %w", err)
		}
		_, werr := f.Write(key)
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			os.Remove(path)
			return nil, fmt.Errorf("session key: %w", err)
		}
		return key, nil
	}
	return nil, fmt.Errorf("session key %s: could not be read or created", path)
}

// issue signs a new session; its SID and Expires are filled here.
func (s *sessions) issue(u session) (string, session, error) {
	now := s.now()
	u.SID = randomToken(16)
	u.Issued = now
	u.Expires = now.Add(s.ttl)
	c := claims{TenantID: u.TenantID, TenantName: u.TenantName, Role: u.Role, Email: u.Email, SID: u.SID, SV: u.Version, RegisteredClaims: jwt.RegisteredClaims{
		Issuer:    sessionIssuer,
		Subject:   u.UserID,
		Audience:  jwt.ClaimStrings{sessionAud},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(u.Expires),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.signKey)
	if err != nil {
		return "", session{}, err
	}
	return tok, u, nil
}

// parse verifies a session token: HS256 only (so "none" and RS/ES
// confusion are refused before the signature is looked at), our issuer and
// audience, and an expiry that has not passed.
func (s *sessions) parse(token string) (session, error) {
	var c claims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.signKey, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(sessionIssuer),
		jwt.WithAudience(sessionAud),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(s.now),
		jwt.WithLeeway(5*time.Second),
	)
	if err != nil {
		return session{}, err
	}
	if c.Subject == "" || c.SID == "" || c.Role == "" {
		return session{}, errors.New("session token lacks claims")
	}
	s2 := session{UserID: c.Subject, TenantID: c.TenantID, TenantName: c.TenantName, Role: c.Role, Email: c.Email, SID: c.SID, Version: c.SV, Expires: c.ExpiresAt.Time}
	if c.IssuedAt != nil {
		s2.Issued = c.IssuedAt.Time
	}
	return s2, nil
}

// formToken is the CSRF token of a session (or of a sign-in nonce).
func (s *sessions) formToken(purpose, id string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(purpose + "\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkFormToken compares in constant time.
func (s *sessions) checkFormToken(purpose, id, got string) bool {
	if id == "" || got == "" {
		return false
	}
	want := s.formToken(purpose, id)
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// seal encrypts a secret that must survive one redirect (a new service
// key, shown on the page the form redirects to) for the session sid only.
func (s *sessions) seal(sid, secret string) string {
	aead := s.aead()
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, []byte(secret), []byte(sid)))
}

// open decrypts what seal made for the same session; ok is false for
// anything else.
func (s *sessions) open(sid, sealed string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	aead := s.aead()
	if err != nil || len(b) < aead.NonceSize() {
		return "", false
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], []byte(sid))
	if err != nil {
		return "", false
	}
	return string(plain), true
}

func (s *sessions) aead() cipher.AEAD {
	block, err := aes.NewCipher(s.sealKey)
	if err != nil {
		panic(err) // the key is always 32 bytes
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// cookie builds a dashboard cookie: HttpOnly, SameSite=Lax, scoped to /ui,
// Secure when the request came over HTTPS (httpsec.Transport.Secure: the
// public URL is https, the connection is TLS, or the proxy says https).
func (s *sessions) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     name,
		Value:    value,
		Path:     "/ui",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   s.transport.Secure(r),
		SameSite: http.SameSiteLaxMode,
	}
}

func randomToken(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
