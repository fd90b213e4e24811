package ui

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// signIn posts the sign-in form as a browser would: fetch the form (which
// sets the sign-in cookie), then post it with its token.
func (u *testUI) signIn(email, password, next string) *httptest.ResponseRecorder {
	u.t.Helper()
	form := u.do("GET", "/ui/login", nil)
	if form.Code != http.StatusOK {
		u.t.Fatalf("GET /ui/login: %d", form.Code)
	}
	return u.do("POST", "/ui/login", url.Values{
		"email": {email}, "password": {password}, "next": {next},
		csrfField: {formTokenIn(u.t, form.Body.String())},
	}, cookieNamed(form, loginCookie))
}

func TestSignIn(t *testing.T) {
	u := newTestUI(t, 100, 100)
	w := u.signIn(fakeEmail, fakePassword, "")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/ui/" {
		t.Fatalf("sign-in: %d to %q", w.Code, w.Header().Get("Location"))
	}
	c := cookieNamed(w, sessionCookie)
	if c == nil || c.Value == "" {
		t.Fatal("no session cookie")
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/ui" || c.Secure {
		t.Errorf("cookie attributes over plain HTTP: %+v", c)
	}
	if c.MaxAge < int((11 * time.Hour).Seconds()) {
		t.Errorf("cookie lasts %ds, want about 12h", c.MaxAge)
	}
	s, err := u.sessions().parse(c.Value)
	if err != nil || s.UserID != "usr_1" || s.TenantID != "ten_1" || s.TenantName != "fake" || s.Role != "owner" {
		t.Fatalf("session %+v, %v", s, err)
	}
	if got := u.do("GET", "/ui/members", nil, c); got.Code != http.StatusOK || !strings.Contains(got.Body.String(), fakeEmail) {
		t.Fatalf("signed-in page: %d", got.Code)
	}

	// A sign-in over TLS gets a Secure cookie.
	form := u.do("GET", "/ui/login", nil)
	r := httptest.NewRequest("POST", "/ui/login", strings.NewReader(url.Values{"email": {fakeEmail}, "password": {fakePassword}, csrfField: {formTokenIn(t, form.Body.String())}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.AddCookie(cookieNamed(form, loginCookie))
	r.TLS = &tlsState
	tw := httptest.NewRecorder()
	u.e.ServeHTTP(tw, r)
	if c := cookieNamed(tw, sessionCookie); c == nil || !c.Secure {
		t.Errorf("cookie over TLS is not Secure: %+v", c)
	}
}

func TestSignInRefusals(t *testing.T) {
	u := newTestUI(t, 100, 100)
	for _, tc := range []struct{ name, email, password string }{
		{"unknown email", "nobody@fake.test", fakePassword},
		{"wrong password", fakeEmail, "not the passphrase"},
	} {
		w := u.signIn(tc.email, tc.password, "")
		if w.Code != http.StatusUnauthorized || cookieNamed(w, sessionCookie) != nil {
			t.Errorf("%s: %d, cookie %v", tc.name, w.Code, cookieNamed(w, sessionCookie))
		}
		if !strings.Contains(w.Body.String(), "Wrong email or password.") {
			t.Errorf("%s: page does not say so", tc.name)
		}
	}

	// Without the sign-in form's token (or its cookie) nothing is checked.
	before := u.work.SignIns
	w := u.do("POST", "/ui/login", url.Values{"email": {fakeEmail}, "password": {fakePassword}})
	if w.Code != http.StatusForbidden || cookieNamed(w, sessionCookie) != nil {
		t.Errorf("sign-in without form token: %d", w.Code)
	}
	form := u.do("GET", "/ui/login", nil)
	w = u.do("POST", "/ui/login", url.Values{"email": {fakeEmail}, "password": {fakePassword}, csrfField: {formTokenIn(t, form.Body.String())}})
	if w.Code != http.StatusForbidden {
		t.Errorf("sign-in with a token but without its cookie: %d", w.Code)
	}
	if u.work.SignIns != before {
		t.Error("a sign-in without a valid form token looked the user up")
	}

	// The redirect after sign-in stays on the dashboard.
	for next, want := range map[string]string{
		"/ui/keys?q=x":       "/ui/keys?q=x",
		"//evil.example/ui/": "/ui/",
		"https://evil.test/": "/ui/",
		"/ui/\\evil":         "/ui/",
		"/v1/admin/tenants":  "/ui/",
	} {
		if w := u.signIn(fakeEmail, fakePassword, next); w.Header().Get("Location") != want {
			t.Errorf("next=%q: redirected to %q, want %q", next, w.Header().Get("Location"), want)
		}
	}
}

func TestSignInRateLimit(t *testing.T) {
	u := newTestUI(t, 5, 8)
	for i := range 5 {
		if w := u.signIn(fakeEmail, "wrong password!", ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, w.Code)
		}
	}
	// The sixth attempt within five minutes is refused before any check,
	// even with the right password.
	before := u.work.SignIns
	w := u.signIn(fakeEmail, fakePassword, "")
	if w.Code != http.StatusTooManyRequests || cookieNamed(w, sessionCookie) != nil {
		t.Fatalf("sixth attempt: %d", w.Code)
	}
	if !strings.Contains(w.Body.String(), "Too many sign-in attempts") || w.Header().Get("Retry-After") == "" {
		t.Errorf("429 page: Retry-After %q, body lacks the message", w.Header().Get("Retry-After"))
	}
	if u.work.SignIns != before {
		t.Error("a refused attempt still looked the user up")
	}
	// Other emails from the same address: the per-address bucket (8) runs
	// out after three more.
	for i := range 3 {
		if w := u.signIn("other"+string(rune('a'+i))+"@fake.test", "whatever pass", ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("other email %d: %d", i, w.Code)
		}
	}
	if w := u.signIn("another@fake.test", "whatever pass", ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("per-address limit: %d", w.Code)
	}
	// A minute refills one attempt of each bucket (5 and 8 per 5 minutes).
	u.now = u.now.Add(time.Minute)
	if w := u.signIn(fakeEmail, fakePassword, ""); w.Code != http.StatusSeeOther {
		t.Fatalf("after a minute: %d", w.Code)
	}
}

func TestSignInBehindProxy(t *testing.T) {
	u := newTestUIWith(t, 5, 3, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	attempts := func(n int) (codes []int) {
		for i := range n {
			codes = append(codes, u.signIn(fmt.Sprintf("user%d@fake.test", i), "whatever pass", "").Code)
		}
		return codes
	}
	// Behind the trusted proxy, X-Forwarded-For names the client: each has
	// its own 3 attempts.
	u.peer, u.xff = "127.0.0.1:40000", "198.51.100.1"
	if got := attempts(4); !slices.Equal(got, []int{401, 401, 401, 429}) {
		t.Fatalf("first client: %v, want three refusals then 429", got)
	}
	u.xff = "203.0.113.9, 198.51.100.2" // a hop the client made up is skipped
	if got := attempts(3); !slices.Equal(got, []int{401, 401, 401}) {
		t.Fatalf("second client: %v, want its own three attempts", got)
	}
	if w := u.signIn(fakeEmail, fakePassword, ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("second client's fourth attempt: %d", w.Code)
	}
	u.xff = "198.51.100.3"
	if w := u.signIn(fakeEmail, fakePassword, ""); w.Code != http.StatusSeeOther {
		t.Fatalf("third client signing in: %d", w.Code)
	}

	// From a peer that is not a trusted proxy, X-Forwarded-For is the
	// client's own claim: the peer is the client, whatever it says.
	u.peer = "192.0.2.50:40000"
	var got []int
	for i := range 4 {
		u.xff = fmt.Sprintf("198.51.100.%d", 10+i)
		got = append(got, u.signIn(fmt.Sprintf("user%d@fake.test", i), "whatever pass", "").Code)
	}
	if !slices.Equal(got, []int{401, 401, 401, 429}) {
		t.Fatalf("untrusted peer with invented addresses: %v, want one budget of three", got)
	}
}

// An attacker guessing the owner's password slows the owner's sign-in
// down but never stops it.
func TestSignInOwnerNotLockedOut(t *testing.T) {
	u := newTestUI(t, 5, 20)
	u.peer = "203.0.113.66:40000"
	for i := range 30 {
		w := u.signIn(fakeEmail, "a wrong guess", "")
		if want := map[bool]int{true: 401, false: 429}[i < 5]; w.Code != want {
			t.Fatalf("attacker's attempt %d: %d, want %d", i+1, w.Code, want)
		}
	}
	u.peer = "192.0.2.10:40000"
	if w := u.signIn(fakeEmail, fakePassword, ""); w.Code != http.StatusSeeOther {
		t.Fatalf("the owner, from another address: %d", w.Code)
	}
	if !slices.Equal(u.slept, []time.Duration{250 * time.Millisecond}) {
		t.Errorf("the owner waited %v, want 250ms", u.slept)
	}

	// From many addresses the attacker makes every attempt wait longer,
	// up to 3 s; the owner still signs in.
	for a := range 20 {
		u.peer = fmt.Sprintf("203.0.113.%d:40000", 100+a)
		for range 6 {
			u.signIn(fakeEmail, "a wrong guess", "")
		}
	}
	u.slept = nil
	u.peer = "192.0.2.10:40000"
	if w := u.signIn(fakeEmail, fakePassword, ""); w.Code != http.StatusSeeOther {
		t.Fatalf("the owner, after a distributed attack: %d", w.Code)
	}
	if !slices.Equal(u.slept, []time.Duration{3 * time.Second}) {
		t.Errorf("the owner waited %v, want the 3 s cap", u.slept)
	}
}

func TestSignOut(t *testing.T) {
	u := newTestUI(t, 100, 100)
	c := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	page := u.do("GET", "/ui/members", nil, c)
	w := u.do("POST", "/ui/logout", url.Values{csrfField: {formTokenIn(t, page.Body.String())}}, c)
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/login") {
		t.Fatalf("sign-out: %d to %q", w.Code, w.Header().Get("Location"))
	}
	if gone := cookieNamed(w, sessionCookie); gone == nil || gone.MaxAge >= 0 {
		t.Fatalf("sign-out does not clear the cookie: %+v", gone)
	}
	// A copy of the signed-out token is refused, though its signature and
	// expiry are still good.
	if w := u.do("GET", "/ui/members", nil, c); w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/login") {
		t.Fatalf("signed-out token reused: %d to %q", w.Code, w.Header().Get("Location"))
	}
	// Signing in again gives a new session that works.
	c2 := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	if w := u.do("GET", "/ui/members", nil, c2); w.Code != http.StatusOK {
		t.Fatalf("new session after sign-out: %d", w.Code)
	}
}

// TestSessionTokens feeds the dashboard tokens an attacker could make.
func TestSessionTokens(t *testing.T) {
	u := newTestUI(t, 100, 100)
	s := u.sessions()
	good := claims{Role: "owner", TenantID: "ten_1", Email: fakeEmail, SID: "sid1", SV: 1, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: sessionIssuer, Subject: "usr_1", Audience: jwt.ClaimStrings{sessionAud},
		IssuedAt: jwt.NewNumericDate(u.now), ExpiresAt: jwt.NewNumericDate(u.now.Add(time.Hour)),
	}}
	sign := func(m jwt.SigningMethod, c claims, key any) string {
		t.Helper()
		tok, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	expired := good
	expired.ExpiresAt = jwt.NewNumericDate(u.now.Add(-time.Minute))
	noExpiry := good
	noExpiry.ExpiresAt = nil
	future := good
	future.IssuedAt = jwt.NewNumericDate(u.now.Add(time.Hour))
	otherAud := good
	otherAud.Audience = jwt.ClaimStrings{"someone-else"}
	operator := good
	operator.Role, operator.TenantID = "operator", ""
	oldVersion := good
	oldVersion.SV = 0
	unknownUser := good
	unknownUser.Subject = "usr_removed"
	forgedRole := sign(jwt.SigningMethodHS256, good, s.signKey)
	parts := strings.Split(forgedRole, ".")
	tampered := parts[0] + "." + strings.Split(sign(jwt.SigningMethodHS256, operator, []byte("x")), ".")[1] + "." + parts[2]

	if w := u.do("GET", "/ui/members", nil, &http.Cookie{Name: sessionCookie, Value: sign(jwt.SigningMethodHS256, good, s.signKey)}); w.Code != http.StatusOK {
		t.Fatalf("a well-formed token was refused: %d", w.Code)
	}
	for name, tok := range map[string]string{
		"expired":                  sign(jwt.SigningMethodHS256, expired, s.signKey),
		"without expiry":           sign(jwt.SigningMethodHS256, noExpiry, s.signKey),
		"issued in the future":     sign(jwt.SigningMethodHS256, future, s.signKey),
		"other audience":           sign(jwt.SigningMethodHS256, otherAud, s.signKey),
		"signed with another key":  sign(jwt.SigningMethodHS256, good, []byte("not the server's key, 32 bytes!!")),
		"signed with the raw file": sign(jwt.SigningMethodHS256, good, u.key),
		"alg none":                 sign(jwt.SigningMethodNone, good, jwt.UnsafeAllowNoneSignatureType),
		"alg HS512, right key":     sign(jwt.SigningMethodHS512, good, s.signKey),
		"alg RS256":                sign(jwt.SigningMethodRS256, good, rsaKey),
		"tampered payload":         tampered,
		"garbage":                  "not.a.jwt",
		"older session version":    sign(jwt.SigningMethodHS256, oldVersion, s.signKey),
		"user not on the server":   sign(jwt.SigningMethodHS256, unknownUser, s.signKey),
	} {
		w := u.do("GET", "/ui/members", nil, &http.Cookie{Name: sessionCookie, Value: tok})
		if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/login") {
			t.Errorf("%s: %d to %q, want a redirect to sign in", name, w.Code, w.Header().Get("Location"))
		}
		if c := cookieNamed(w, sessionCookie); c == nil || c.MaxAge >= 0 {
			t.Errorf("%s: the bad cookie is not cleared", name)
		}
	}

	// HS/RS confusion the other way: the server's key as an RSA public key
	// is meaningless, and a token that claims RS256 is refused before any
	// key is used.
	if _, err := s.parse(sign(jwt.SigningMethodRS256, good, rsaKey)); err == nil {
		t.Error("parse accepted RS256")
	}

	// The clock moving past the expiry ends a real session.
	c := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	u.now = u.now.Add(13 * time.Hour)
	if w := u.do("GET", "/ui/members", nil, c); w.Code != http.StatusSeeOther {
		t.Errorf("a 13 hour old session: %d", w.Code)
	}
}

func TestFormTokens(t *testing.T) {
	u := newTestUI(t, 100, 100)
	c := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	other := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	page := u.do("GET", "/ui/members", nil, other)
	otherToken := formTokenIn(t, page.Body.String())
	for name, form := range map[string]url.Values{
		"no token":                 {"email": {"m@fake.test"}, "password": {"long enough pass"}},
		"empty token":              {"email": {"m@fake.test"}, "password": {"long enough pass"}, csrfField: {""}},
		"another session's token":  {"email": {"m@fake.test"}, "password": {"long enough pass"}, csrfField: {otherToken}},
		"a sign-in form's token":   {"email": {"m@fake.test"}, "password": {"long enough pass"}, csrfField: {u.sessions().formToken(purposeLogin, "x")}},
		"token of the wrong shape": {"email": {"m@fake.test"}, "password": {"long enough pass"}, csrfField: {"AAAA"}},
	} {
		w := u.do("POST", "/ui/members", form, c)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "Reload the page") {
			t.Errorf("%s: %d", name, w.Code)
		}
	}
	// Every POST route checks it, sign-out included.
	for _, path := range []string{"/ui/logout", "/ui/policies", "/ui/policies/test", "/ui/keys", "/ui/keys/x/revoke", "/ui/analytics/reset", "/ui/members"} {
		if w := u.do("POST", path, url.Values{}, c); w.Code != http.StatusForbidden {
			t.Errorf("POST %s without a token: %d", path, w.Code)
		}
	}
}

func TestRolesAndErrors(t *testing.T) {
	u := newTestUI(t, 100, 100)
	c := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	for _, path := range []string{"/ui/admin/tenants", "/ui/admin/abuse", "/ui/admin/blocks"} {
		if w := u.do("GET", path, nil, c); w.Code != http.StatusForbidden {
			t.Errorf("owner GET %s: %d, want 403", path, w.Code)
		}
	}
	w := u.do("GET", "/ui/no-such-page", nil, c)
	if w.Code != http.StatusNotFound || !strings.Contains(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), `data-testid="error-page"`) {
		t.Errorf("unknown page: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
	w = u.do("GET", "/ui/logout", nil, c)
	if w.Code != http.StatusMethodNotAllowed || !strings.Contains(w.Body.String(), `data-testid="error-page"`) {
		t.Errorf("GET on a POST-only page: %d", w.Code)
	}
	// The API keeps its JSON errors.
	if w := u.do("GET", "/v1/nope", nil); strings.Contains(w.Header().Get("Content-Type"), "text/html") {
		t.Errorf("an API path got an HTML error")
	}
	// Security headers on pages.
	w = u.do("GET", "/ui/login", nil)
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
		if w.Header().Get(h) == "" {
			t.Errorf("sign-in page lacks %s", h)
		}
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", w.Header().Get("Cache-Control"))
	}
}

func TestStaticAssets(t *testing.T) {
	u := newTestUI(t, 100, 100)
	w := u.do("GET", assets.CSS, nil)
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/css") {
		t.Fatalf("%s: %d %s", assets.CSS, w.Code, w.Header().Get("Content-Type"))
	}
	if !strings.Contains(w.Header().Get("Cache-Control"), "immutable") {
		t.Errorf("current asset not cached for long: %q", w.Header().Get("Cache-Control"))
	}
	stale := u.do("GET", "/ui/static/000000000000/app.css", nil)
	if stale.Code != http.StatusOK || stale.Header().Get("Cache-Control") != "no-cache" {
		t.Errorf("stale hash: %d %q", stale.Code, stale.Header().Get("Cache-Control"))
	}
	if w := u.do("GET", "/ui/static/"+strings.Split(assets.CSS, "/")[3]+"/nope.css", nil); w.Code != http.StatusNotFound {
		t.Errorf("unknown asset: %d", w.Code)
	}
}

// TestSessionsFailClosed: a moved session version ends a session; until
// the signed-out sessions are loaded no session is accepted (the sign-in
// page, not an error); once they are known to be unavailable, sessions
// issued from then on are accepted by session version and older ones are not.
func TestSessionsFailClosed(t *testing.T) {
	u := newTestUI(t, 100, 100)
	old := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	if w := u.do("GET", "/ui/members", nil, old); w.Code != http.StatusOK {
		t.Fatalf("fresh session: %d", w.Code)
	}

	u.rev.set(true, time.Time{})
	w := u.do("GET", "/ui/members", nil, old)
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/ui/login") {
		t.Fatalf("while sign-outs load: %d to %q, want the sign-in page", w.Code, w.Header().Get("Location"))
	}
	if w := u.do("GET", "/ui/login", nil, old); w.Code != http.StatusOK {
		t.Fatalf("the sign-in page while sign-outs load: %d", w.Code)
	}

	u.now = u.now.Add(time.Minute)
	u.rev.set(false, u.now)
	if w := u.do("GET", "/ui/members", nil, old); w.Code != http.StatusSeeOther {
		t.Fatalf("a session older than the outage: %d", w.Code)
	}
	u.now = u.now.Add(2 * time.Second)
	fresh := cookieNamed(u.signIn(fakeEmail, fakePassword, ""), sessionCookie)
	if w := u.do("GET", "/ui/members", nil, fresh); w.Code != http.StatusOK {
		t.Fatalf("a session signed in during the outage: %d", w.Code)
	}
	// ...is still checked against the user's session version.
	u.eng.setVersion("usr_1", 2)
	if w := u.do("GET", "/ui/members", nil, fresh); w.Code != http.StatusSeeOther {
		t.Fatalf("a session of an older version during the outage: %d", w.Code)
	}

	// Loaded again: the session version still rules, and sign-outs count.
	u.rev.set(false, time.Time{})
	if w := u.do("GET", "/ui/members", nil, fresh); w.Code != http.StatusSeeOther {
		t.Fatalf("a session of an older version: %d", w.Code)
	}
}

// A secret carried across a redirect opens only for the session that
// sealed it, and only unaltered.
func TestSealedSecrets(t *testing.T) {
	u := newTestUI(t, 100, 100)
	s := u.sessions()
	sealed := s.seal("sid1", "sk_secret")
	if strings.Contains(sealed, "sk_secret") {
		t.Fatal("the sealed secret shows its plain text")
	}
	if got, ok := s.open("sid1", sealed); !ok || got != "sk_secret" {
		t.Fatalf("open: %q %v", got, ok)
	}
	if _, ok := s.open("sid2", sealed); ok {
		t.Fatal("another session opened the secret")
	}
	other := newSessions([]byte("another server's key, 32 bytes!!"), time.Hour, time.Now)
	if _, ok := other.open("sid1", sealed); ok {
		t.Fatal("another key opened the secret")
	}
	flipped := "A" + sealed[1:]
	if sealed[0] == 'A' {
		flipped = "B" + sealed[1:]
	}
	for _, bad := range []string{"", "x", sealed[:len(sealed)-2], flipped} {
		if _, ok := s.open("sid1", bad); ok {
			t.Errorf("opened %q", bad)
		}
	}
	if s.seal("sid1", "sk_secret") == sealed {
		t.Error("two seals of one secret are equal (nonce reused)")
	}
}
