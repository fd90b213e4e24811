package ui_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The setup form shows every problem at once, and its submissions are
// limited per client address as sign-ins are: the sixth within 5 minutes
// answers 429, a wrong token included. Looking at the link is charged to
// its own per-address bound (setup_limit_test.go in package ui).
func TestSetupFormProblemsAndLimit(t *testing.T) {
	var out lockedBuffer
	s := bootSiteOut(t, func(c *app.Config) { c.OperatorEmail, c.OperatorPassword = "", "" }, &out)
	link := regexp.MustCompile(`/ui/setup\?token=(st_\w+)`)
	waitFor(t, 10*time.Second, "the setup link", func() bool { return link.MatchString(out.String()) })
	token := link.FindStringSubmatch(out.String())[1]

	a := s.agent()
	p := want(t, a.get("/ui/setup?token="+token), http.StatusOK, "the live link")
	if !p.has("setup-form") {
		t.Fatalf("no setup form:\n%.1000s", p.body)
	}
	want(t, a.get("/ui/setup?token=st_wrong"), http.StatusGone, "a wrong link")
	a.get("/ui/setup?token=" + token) // the form token again

	p = want(t, a.post("/ui/setup", url.Values{"token": {token}, "email": {"not an address"}, "password": {"short"}, "password_again": {"other"}}),
		http.StatusBadRequest, "three bad inputs")
	for _, id := range []string{"error-email", "error-password", "error-password_again"} {
		if !p.has(id) {
			t.Errorf("no %s on the page", id)
		}
	}
	if got := p.inputValue("email"); got != "not an address" {
		t.Errorf("email shown again as %q", got)
	}
	good := url.Values{"email": {"first@operator.test"}, "password": {"first operator passphrase"}, "password_again": {"first operator passphrase"}}
	for i := range 4 {
		f := url.Values{"token": {"st_wrong"}}
		for k, v := range good {
			f[k] = v
		}
		want(t, a.post("/ui/setup", f), http.StatusGone, "wrong token "+string(rune('1'+i)))
		a.get("/ui/setup?token=" + token)
	}
	f := url.Values{"token": {token}}
	for k, v := range good {
		f[k] = v
	}
	p = want(t, a.post("/ui/setup", f), http.StatusTooManyRequests, "the sixth submission")
	if !strings.Contains(p.body, "Too many attempts") {
		t.Errorf("the refusal does not say why:\n%.500s", p.body)
	}
}
