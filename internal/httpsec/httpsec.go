// Package httpsec holds what every Sluice HTTP answer shares for its
// safety: the security headers (API, dashboard, static files, health and
// error answers alike) and the one decision of whether a request reached
// Sluice over HTTPS, which makes cookies Secure and adds HSTS.
package httpsec

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// Transport says how clients reach Sluice. The zero value trusts only the
// connection itself: a request is secure when it arrived over TLS.
type Transport struct {
	// PublicHTTPS is set when the public URL users open is https, so
	// every request counts as secure whatever the hop to Sluice was.
	PublicHTTPS bool
}

// Secure reports whether the client's request travelled over HTTPS: the
// public URL is https, the connection is TLS, or a proxy that ended TLS
// says so with X-Forwarded-Proto. A forged header can only make the
// answer stricter (a Secure cookie, HSTS), never weaker.
func (t Transport) Secure(r *http.Request) bool {
	if t.PublicHTTPS || r.TLS != nil {
		return true
	}
	proto := r.Header.Get("X-Forwarded-Proto")
	if proto == "" {
		return false
	}
	first, _, _ := strings.Cut(proto, ",") // the client-facing hop comes first
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

// Header values shared by every answer.
const (
	// ContentSecurityPolicy allows only the dashboard's own scripts,
	// styles and images, and no framing; JSON answers need nothing more.
	ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	// StrictTransportSecurity is sent on secure requests only: one year,
	// this host only (Sluice does not speak for sibling subdomains).
	StrictTransportSecurity = "max-age=31536000"
)

// Headers sets the security headers on every answer before the handler
// runs, so errors, 404 and 405 answers carry them too. Cache-Control is
// no-store by default (answers hold keys and private pages); a handler
// that serves cacheable files overrides it.
func Headers(t Transport) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h["Content-Security-Policy"] = csp
			h["X-Frame-Options"] = deny
			h["X-Content-Type-Options"] = nosniff
			h["Referrer-Policy"] = sameOrigin
			h["Cache-Control"] = noStore
			if t.Secure(c.Request()) {
				h["Strict-Transport-Security"] = hsts
			}
			return next(c)
		}
	}
}

// Shared header slices: setting them costs no allocation on the check
// path. Each has capacity one, so a later Add appends into a new array and
// never into these; Set replaces the slice.
var (
	csp        = []string{ContentSecurityPolicy}
	deny       = []string{"DENY"}
	nosniff    = []string{"nosniff"}
	sameOrigin = []string{"same-origin"}
	noStore    = []string{"no-store"}
	hsts       = []string{StrictTransportSecurity}
)
