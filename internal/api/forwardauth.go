package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/httpsec"
	"github.com/sluicehq/sluice/internal/quota"
)

// ForwardAuthPath is where reverse proxies ask whether a request may pass
// (Caddy forward_auth, nginx auth_request, Traefik ForwardAuth).
const ForwardAuthPath = "/v1/forward-auth"

// ServiceKeyHeader carries the tenant's service key from the proxy: the
// Authorization header belongs to the client and holds its consumer key.
const ServiceKeyHeader = "X-Sluice-Service-Key"

// JWTBearerQuery is the query the proxy puts in the forward-auth URL it is
// configured with (/v1/forward-auth?jwt=bearer) to make a Bearer token in
// the client's Authorization header that is not a consumer key (ck_…) the
// check's jwt. Without it such a token is ignored, as it always was, and
// the client is counted by its address. It is in the URL, not a header,
// because proxies pass the client's own headers on to the subrequest
// (nginx's auth_request all of them): a client could set a header itself
// and choose how it is identified; it cannot change the URL the proxy asks.
const JWTBearerQuery = "jwt=bearer"

// LeaseQuery, in the forward-auth URL the proxy is configured with
// (/v1/forward-auth?lease_ttl=30s), sets how long a slot of a concurrency
// limit is held: a proxy cannot release it when the request ends, so the
// slot frees itself after this TTL (default 60 s). It is in the URL for
// the reason JWTBearerQuery is: a client cannot choose it.
const LeaseQuery = "lease_ttl"

// LeaseHeader and LeaseExpiresHeader carry the lease of an allowed check
// that took a slot of a concurrency limit, for a proxy that passes them to
// its upstream (which may release the slot early with POST /v1/release).
const (
	LeaseHeader        = "X-Sluice-Lease"
	LeaseExpiresHeader = "X-Sluice-Lease-Expires"
)

// A proxy that cannot hand the subrequest's body to its client (nginx's
// auth_request drops it) sets ProblemHeaderRequest on its subrequest; a
// denial then also carries its problem body, verbatim, in ProblemHeader,
// which the proxy can return as its own body. The body is JSON without
// line breaks or other control characters (appendString escapes them, and
// policy names are ASCII letters, digits, '.', '_' and '-'), so it is a
// valid header value.
const (
	ProblemHeaderRequest = "X-Sluice-Problem-Header"
	ProblemHeader        = "X-Sluice-Problem"
)

// Problem types of forward-auth denials, as the Go SDK's middleware writes them.
const (
	problemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemInvalidKey    = "https://sluice.dev/problems/invalid-key"
	problemInvalidToken  = "https://sluice.dev/problems/invalid-token"
	problemBlocked       = "https://sluice.dev/problems/blocked"
)

// ParseTrustedProxies reads a comma-separated list of addresses and CIDR
// prefixes, naming the entry that does not parse.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

var (
	problemContentType = []string{"application/problem+json"}
	noSniff            = []string{"nosniff"}
	invalidTokenChall  = []string{`Bearer error="invalid_token"`}
)

// forwardAuth answers a proxy's subrequest: 200 with the rate-limit
// headers when the original request may pass, else the denial the proxy
// hands to the client. It reads the original request from the headers the
// proxy sets; it decides exactly as POST /v1/check does.
func (h *handler) forwardAuth(c echo.Context) error {
	now := h.Now()
	r := c.Request()
	hd := r.Header
	key := headerValue(hd, ServiceKeyHeader)
	if key == "" {
		return errs.Errorf(errs.Unauthenticated, "Send the tenant's service key in the %s header: the proxy must set it on every forward-auth request.", ServiceKeyHeader)
	}
	if !h.Engine.Ready() {
		return errs.Errorf(errs.Unavailable, "Sluice is starting and not ready to answer yet.")
	}
	tenant, ok := h.Engine.TenantForServiceKey(key)
	if !ok {
		return errs.Errorf(errs.Unauthenticated, "The service key in %s is unknown or revoked.", ServiceKeyHeader)
	}
	if h.Engine.TenantSuspended(tenant) {
		return errSuspended
	}
	path, method, err := originalRequest(hd, r.Method)
	if err != nil {
		return err
	}
	req := engine.CheckRequest{
		APIKey: consumerKey(hd),
		IP:     h.forwardedIP(r),
		Method: method,
		Path:   path,
		Cost:   1,
	}
	bearer, ttl, wait, err := forwardQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	req.LeaseTTL, req.Wait = ttl, wait
	if req.APIKey == "" && bearer {
		req.JWT = bearerJWT(hd)
	}
	a, err := h.Engine.Check(r.Context(), tenant, &req, now)
	if err != nil {
		return err
	}
	out := c.Response().Header()
	setRateLimitHeaders(out, &a)
	if a.Lease != "" {
		// The proxy cannot release it: the slot is held until its TTL,
		// unless the proxy passes this header on and the upstream releases
		// it with POST /v1/release.
		out[LeaseHeader] = []string{a.Lease}
		out[LeaseExpiresHeader] = []string{a.LeaseExpires.UTC().Format(time.RFC3339)}
	}
	if a.Allowed {
		c.Response().WriteHeader(http.StatusOK)
		return nil
	}
	return writeDenial(c, &a)
}

// forwardQuery reads the forward-auth URL's query, which the proxy's
// configuration sets (a client cannot change it): JWTBearerQuery,
// lease_ttl=<duration> for the slots of concurrency limits (LeaseQuery) and
// wait=<duration> for a check that may wait for its bucket (WaitQuery).
// Other parameters are ignored, as they always were.
func forwardQuery(raw string) (bearer bool, ttl, wait time.Duration, err error) {
	for part := range strings.SplitSeq(raw, "&") {
		switch {
		case part == JWTBearerQuery:
			bearer = true
		case strings.HasPrefix(part, WaitQuery):
			if wait, err = parseWait(part[len(WaitQuery):], ""); err != nil {
				return false, 0, 0, err
			}
		case strings.HasPrefix(part, LeaseQuery+"="):
			ttl, err = time.ParseDuration(part[len(LeaseQuery)+1:])
			if err != nil || ttl < engine.MinLeaseTTL || ttl > engine.MaxLeaseTTL {
				return false, 0, 0, errs.Errorf(errs.Invalid, "lease_ttl: the forward-auth URL's lease_ttl must be a duration from 1s to 24h, such as \"60s\"")
			}
		}
	}
	return bearer, ttl, wait, nil
}

// WaitQuery starts the forward-auth URL's wait parameter
// (/v1/forward-auth?wait=500ms): a check that a rate limit denies waits up
// to that long for its bucket, as a check's "wait" does, and the proxy's
// subrequest is answered when it is admitted or at the deadline. The
// proxy's own timeout for the subrequest must exceed it.
const WaitQuery = "wait="

// originalRequest reads the original request's target and method from
// the headers of one family: X-Forwarded-Uri and X-Forwarded-Method (Caddy,
// Traefik), or X-Original-URI and X-Original-Method (nginx). A proxy sets
// its own family's headers, replacing any the client sent, but may pass the
// other family from the client untouched (nginx's auth_request passes every
// client header). Preferring either family would then let the client pick
// the path or method it is checked against, so a subrequest carrying
// headers of both families is refused, as is one naming a target or a
// method twice: Sluice cannot tell which the proxy set. Without a method
// header of the family, the subrequest's own method is the original's.
func originalRequest(hd http.Header, subrequestMethod string) (path, method string, err error) {
	uri, meth := hd["X-Forwarded-Uri"], hd["X-Forwarded-Method"]
	ouri, ometh := hd["X-Original-Uri"], hd["X-Original-Method"]
	switch {
	case len(uri)+len(meth) > 0 && len(ouri)+len(ometh) > 0:
		return "", "", errs.Errorf(errs.Invalid, "X-Forwarded-Uri: the request carries both X-Forwarded-Uri/-Method and X-Original-URI/-Method, so the original request is ambiguous; the proxy must set one pair and remove the other, which a client may have sent (see docs/PROXIES.md).")
	case len(uri)+len(meth) == 0:
		uri, meth = ouri, ometh
	}
	if len(uri) > 1 || len(meth) > 1 {
		return "", "", errs.Errorf(errs.Invalid, "X-Forwarded-Uri: the original request's target or method is given more than once; the proxy must replace the client's header, not add to it.")
	}
	if len(uri) == 1 {
		path = strings.TrimSpace(uri[0])
	}
	if path == "" {
		return "", "", errs.Errorf(errs.Invalid, "X-Forwarded-Uri: required, the original request target (Caddy and Traefik send it; with nginx set X-Original-URI to $request_uri).")
	}
	method = subrequestMethod
	if len(meth) == 1 && strings.TrimSpace(meth[0]) != "" {
		method = strings.TrimSpace(meth[0])
	}
	return path, method, nil
}

// headerValue is Header.Get for a canonical name without its allocation-free
// lookup being lost to canonicalisation.
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// consumerKey is the client's API key: X-API-Key, else a bearer token that
// looks like a Sluice consumer key (ck_...). Other bearer tokens belong to
// the upstream's own authentication and are not Sluice's to judge.
func consumerKey(h http.Header) string {
	if k := headerValue(h, "X-Api-Key"); k != "" {
		return k
	}
	auth := headerValue(h, "Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(token)
		if strings.HasPrefix(token, "ck_") {
			return token
		}
	}
	return ""
}

// bearerJWT is the client's Bearer token when it is not a consumer key.
func bearerJWT(h http.Header) string {
	scheme, token, ok := strings.Cut(headerValue(h, "Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	if token = strings.TrimSpace(token); strings.HasPrefix(token, "ck_") {
		return ""
	}
	return token
}

// forwardedIP is the original client's address (see httpsec.ClientIP).
func (h *handler) forwardedIP(r *http.Request) string {
	return httpsec.ClientIP(r, h.TrustedProxies)
}

// writeDenial answers a denied decision as the Go SDK's middleware does:
// 401 for an invalid consumer key or token, 403 for a block, else 429, each with an
// application/problem+json body (RFC 9457).
func writeDenial(c echo.Context, a *engine.Answer) error {
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	b := (*buf)[:0]
	h := c.Response().Header()
	var status int
	switch a.Reason {
	case engine.ReasonInvalidKey:
		status = http.StatusUnauthorized
		h["Www-Authenticate"] = invalidTokenChall
		b = appendProblemHead(b, problemInvalidKey, "Invalid API key", status)
		b = append(b, `,"detail":"The API key is unknown, revoked or expired."}`...)
	case engine.ReasonInvalidToken:
		status = http.StatusUnauthorized
		h["Www-Authenticate"] = invalidTokenChall
		b = appendProblemHead(b, problemInvalidToken, "Invalid token", status)
		b = append(b, `,"detail":"The bearer token is malformed, expired or not signed by a trusted issuer."}`...)
	case engine.ReasonBlocked:
		status = http.StatusForbidden
		b = appendProblemHead(b, problemBlocked, "Blocked", status)
		b = append(b, `,"detail":"Requests from this client are blocked."}`...)
	default:
		status = http.StatusTooManyRequests
		b = appendProblemHead(b, problemQuotaExceeded, "Quota exceeded", status)
		b = append(b, `,"detail":"Too many requests`...)
		if a.Policy != "" {
			b = append(b, ` for \"`...)
			b = appendEscaped(b, a.Policy)
			b = append(b, `\"`...)
		}
		if a.RetryAfter > 0 && a.RetryAfter != quota.Never {
			b = append(b, "; retry after "...)
			b = strconv.AppendInt(b, ceilSeconds(a.RetryAfter), 10)
			b = append(b, " s"...)
		}
		b = append(b, `.","violated-policies":[`...)
		n := 0
		for _, l := range a.Limits {
			if l.Remaining <= 0 {
				if n > 0 {
					b = append(b, ',')
				}
				b = appendString(b, l.Name)
				n++
			}
		}
		if n == 0 && a.Policy != "" {
			b = appendString(b, a.Policy)
		}
		b = append(b, "]}"...)
	}
	h["Content-Type"] = problemContentType
	h["X-Content-Type-Options"] = noSniff
	if headerValue(c.Request().Header, ProblemHeaderRequest) != "" {
		h[ProblemHeader] = []string{string(b)}
	}
	*buf = b
	c.Response().WriteHeader(status)
	_, err := c.Response().Write(b)
	return err
}

func appendProblemHead(b []byte, typ, title string, status int) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"title":`...)
	b = appendString(b, title)
	b = append(b, `,"status":`...)
	return strconv.AppendInt(b, int64(status), 10)
}

// appendEscaped writes s as the inside of a JSON string.
func appendEscaped(b []byte, s string) []byte {
	start := len(b)
	b = appendString(b, s)
	b = append(b[:start], b[start+1:len(b)-1]...)
	return b
}
