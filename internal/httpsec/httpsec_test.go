package httpsec

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

func TestSecure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		public    bool
		tls       bool
		forwarded string
		want      bool
	}{
		{name: "plain http", want: false},
		{name: "https public URL", public: true, want: true},
		{name: "TLS connection", tls: true, want: true},
		{name: "proxy says https", forwarded: "https", want: true},
		{name: "proxy says HTTPS", forwarded: "HTTPS", want: true},
		{name: "proxy says http", forwarded: "http", want: false},
		{name: "client hop first", forwarded: "https, http", want: true},
		{name: "client hop was http", forwarded: "http, https", want: false},
		{name: "garbage", forwarded: "httpsx", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if tc.forwarded != "" {
				r.Header.Set("X-Forwarded-Proto", tc.forwarded)
			}
			if got := (Transport{PublicHTTPS: tc.public}).Secure(r); got != tc.want {
				t.Errorf("Secure = %v, want %v", got, tc.want)
			}
		})
	}
}

// The headers are on error answers too, HSTS only on secure requests, and
// a handler's own Cache-Control or Add never writes into the shared values.
func TestHeaders(t *testing.T) {
	e := echo.New()
	e.Use(Headers(Transport{}))
	e.GET("/asset", func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=60")
		c.Response().Header().Add("X-Content-Type-Options", "extra")
		return c.String(http.StatusOK, "x")
	})
	serve := func(path string, secure bool) http.Header {
		r := httptest.NewRequest("GET", path, nil)
		if secure {
			r.Header.Set("X-Forwarded-Proto", "https")
		}
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Header()
	}
	h := serve("/missing", false)
	for k, v := range map[string]string{
		"Content-Security-Policy": ContentSecurityPolicy,
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
		"Cache-Control":           "no-store",
	} {
		if got := h.Get(k); got != v {
			t.Errorf("404 answer: %s = %q, want %q", k, got, v)
		}
	}
	if h.Get("Strict-Transport-Security") != "" {
		t.Error("HSTS on a plain http request")
	}
	if got := serve("/missing", true).Get("Strict-Transport-Security"); got != StrictTransportSecurity {
		t.Errorf("HSTS on a secure request = %q", got)
	}
	h = serve("/asset", false)
	if h.Get("Cache-Control") != "public, max-age=60" || len(h["X-Content-Type-Options"]) != 2 {
		t.Errorf("handler's headers: %v", h)
	}
	if h := serve("/missing", false); h.Get("Cache-Control") != "no-store" || len(h["X-Content-Type-Options"]) != 1 {
		t.Errorf("shared values changed by a handler: %v", h)
	}
}
