package sdk

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// Problem types of the middleware's application/problem+json answers.
// Quota exceeded is the type the IETF httpapi rate-limit draft defines,
// with its "violated-policies" member; the others are Sluice's own.
const (
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemInvalidKey    = "https://sluice.dev/problems/invalid-key"
	ProblemInvalidToken  = "https://sluice.dev/problems/invalid-token"
	ProblemBlocked       = "https://sluice.dev/problems/blocked"
	ProblemUnavailable   = "https://sluice.dev/problems/unavailable"
)

// Middleware checks every request with Sluice before next sees it. It
// copies the rate-limit header fields onto every response and answers a
// denied request itself: 429 (quota exceeded), 401 (invalid key or token), 403
// (blocked) or 503 (Sluice unavailable under FailClosed), each with an
// application/problem+json body. Failures are counted and logged by the
// client; the request then proceeds or not as the failure mode says. A
// request admitted under a concurrency limit holds its slot until next
// returns (or panics): the middleware then releases it, which adds one
// round trip to Sluice before the response completes.
func (c *Client) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := c.Decide(r)
		WriteHeaders(w.Header(), d)
		if !d.Allowed {
			WriteProblem(w, d)
			return
		}
		if d.Lease != "" {
			// A slot of a concurrency limit is given back when next
			// returns, fails or panics (the panic goes on after it).
			defer c.releaseAfter(r.Context(), &d)
		}
		next.ServeHTTP(w, r)
	})
}

// Decide checks r as the middleware does: Check(r.Context(),
// c.CheckRequestFor(r)). It is the building block for other frameworks'
// middleware; follow it with WriteHeaders and, when denied, WriteProblem.
func (c *Client) Decide(r *http.Request) (Decision, error) {
	return c.Check(r.Context(), c.CheckRequestFor(r))
}

// CheckRequestFor describes r as a check: the caller's API key (from the
// key header, or "Authorization: Bearer ck_…"), the client IP (the peer
// address, or from the forwarding header when the peer is a trusted proxy),
// the method and the raw request target, never a decoded path.
func (c *Client) CheckRequestFor(r *http.Request) CheckRequest {
	req := CheckRequest{
		APIKey: c.apiKey(r),
		IP:     c.clientIP(r),
		Method: r.Method,
		Path:   requestTarget(r),
		Wait:   c.wait,
	}
	if req.APIKey == "" && c.bearerJWT {
		req.JWT = bearerToken(r)
	}
	return req
}

// bearerToken is the Authorization header's bearer token when it is not
// a consumer key (WithBearerJWT).
func bearerToken(r *http.Request) string {
	if vs := r.Header["Authorization"]; len(vs) > 0 {
		v := vs[0]
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			if tok := strings.TrimSpace(v[7:]); !strings.HasPrefix(tok, "ck_") {
				return tok
			}
		}
	}
	return ""
}

func (c *Client) apiKey(r *http.Request) string {
	if c.keyHeader != "Authorization" {
		if vs := r.Header[c.keyHeader]; len(vs) > 0 {
			if k := strings.TrimSpace(vs[0]); k != "" {
				return k
			}
		}
	}
	// Other bearer tokens (say, the app's own session tokens) are not
	// consumer keys and are left alone.
	if vs := r.Header["Authorization"]; len(vs) > 0 {
		v := vs[0]
		if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
			if tok := strings.TrimSpace(v[7:]); strings.HasPrefix(tok, "ck_") {
				return tok
			}
		}
	}
	return ""
}

// requestTarget is the target as the server received it: RequestURI holds
// it verbatim for server requests. An absolute-form target, or a request
// built by hand, falls back to the URL's escaped path and raw query.
func requestTarget(r *http.Request) string {
	if u := r.RequestURI; u != "" && u[0] == '/' {
		return u
	}
	if r.URL != nil {
		return r.URL.RequestURI()
	}
	return "/"
}

// clientIP returns the address Sluice should count an anonymous caller
// against, as text without port or zone.
func (c *Client) clientIP(r *http.Request) string {
	peer := r.RemoteAddr
	if host, _, err := net.SplitHostPort(peer); err == nil {
		peer = host
	}
	peer, _, _ = strings.Cut(peer, "%")
	if len(c.proxies) == 0 {
		return peer
	}
	if a, err := netip.ParseAddr(peer); err != nil || !c.trusted(a) {
		return peer
	}
	return c.forwardedClient(peer, r.Header[c.proxyHeader])
}

func (c *Client) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedClient finds the client in the hops trusted proxies recorded,
// given that peer is trusted. Read from the right, each trusted hop vouches
// for the one to its left; the first hop that is not trusted is the client.
// A hop that does not parse stops the walk at the hop to its right, the
// last one vouched for. If every hop is trusted, the left-most is the
// client. The walk runs left to right, tracking the last untrusted hop.
func (c *Client) forwardedClient(peer string, lines []string) string {
	var (
		first          string
		last           string // the right-most hop not trusted so far
		lastOK         bool   // whether last parsed
		seenLast       bool
		afterLast      string // the hop right of last, if any
		afterLastKnown bool
	)
	for _, line := range lines {
		for line != "" {
			var raw string
			if c.proxyHeader == "Forwarded" {
				raw, line = cutForwardedElement(line)
			} else {
				raw, line, _ = strings.Cut(line, ",")
			}
			hop, a, ok := parseHop(raw)
			if first == "" && ok {
				first = hop
			}
			if ok && c.trusted(a) {
				if seenLast && !afterLastKnown {
					afterLast, afterLastKnown = hop, true
				}
				continue
			}
			last, lastOK, seenLast = hop, ok, true
			afterLast, afterLastKnown = "", false
		}
	}
	switch {
	case !seenLast && first != "":
		return first
	case !seenLast:
		return peer
	case lastOK:
		return last
	case afterLastKnown:
		return afterLast
	}
	return peer
}

// parseHop reads one forwarded address: "1.2.3.4", "1.2.3.4:80", "::1",
// "[::1]:80", with spaces or quotes around it.
func parseHop(s string) (string, netip.Addr, bool) {
	s = strings.Trim(s, " \t\"")
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", netip.Addr{}, false
		}
		s = s[1:end]
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		s = s[:i] // IPv4 with a port
	}
	if strings.IndexByte(s, '%') >= 0 {
		return "", netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", netip.Addr{}, false
	}
	return s, a, true
}

// cutForwardedElement splits the first element off a Forwarded field (RFC
// 7239) and returns its for= value ("" if it has none).
func cutForwardedElement(s string) (forValue, rest string) {
	elem, rest, _ := cutUnquoted(s, ',')
	for elem != "" {
		var pair string
		pair, elem, _ = cutUnquoted(elem, ';')
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			return v, rest
		}
	}
	return "", rest
}

// cutUnquoted is strings.Cut on sep outside quoted strings.
func cutUnquoted(s string, sep byte) (before, after string, found bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted:
			i++
		case c == sep && !quoted:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// WriteHeaders copies d's rate-limit header fields into h. For a decision
// without Sluice's fields (a batch result) it derives them from d's
// numbers; a failure-mode decision adds nothing.
func WriteHeaders(h http.Header, d Decision) {
	if d.Header != nil {
		for _, k := range [...]string{hdrPolicy, hdrRateLimit, hdrXLimit, hdrXRemaining, hdrXReset, hdrRetryAfter} {
			if vs, ok := d.Header[k]; ok {
				h[k] = vs
			}
		}
		return
	}
	if d.Policy == "" {
		return
	}
	reset := ceilSeconds(d.Reset)
	if s, err := FormatRateLimitHeader([]RateLimitItem{{Name: d.Policy, Params: []RateLimitParam{{"q", d.Limit}}}}); err == nil {
		h[hdrPolicy] = []string{s}
	}
	if s, err := FormatRateLimitHeader([]RateLimitItem{{Name: d.Policy, Params: []RateLimitParam{{"r", d.Remaining}, {"t", reset}}}}); err == nil {
		h[hdrRateLimit] = []string{s}
	}
	h[hdrXLimit] = []string{strconv.FormatInt(d.Limit, 10)}
	h[hdrXRemaining] = []string{strconv.FormatInt(d.Remaining, 10)}
	h[hdrXReset] = []string{strconv.FormatInt(reset, 10)}
	if !d.Allowed && d.RetryAfter > 0 {
		h[hdrRetryAfter] = []string{strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)}
	}
}

// Shared header values: a handler that changes them with Header().Set or
// Add gets a slice of its own, so sharing them is safe.
var (
	problemContentType = []string{"application/problem+json"}
	noSniff            = []string{"nosniff"}
)

var problemBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// WriteProblem answers a denied decision: the status, Retry-After where it
// applies, and an application/problem+json body (RFC 9457). Call
// WriteHeaders first to add the rate-limit fields.
//
//	rate_limited (and unknown reasons)  429  ProblemQuotaExceeded, with "violated-policies"
//	invalid_key                         401  ProblemInvalidKey
//	invalid_token                       401  ProblemInvalidToken
//	blocked                             403  ProblemBlocked
//	sluice_unavailable (FailClosed)     503  ProblemUnavailable
func WriteProblem(w http.ResponseWriter, d Decision) {
	bp := problemBufs.Get().(*[]byte)
	b := (*bp)[:0]
	h := w.Header()
	var status int
	switch d.Reason {
	case ReasonInvalidKey:
		status = http.StatusUnauthorized
		h["Www-Authenticate"] = []string{`Bearer error="invalid_token"`}
		b = appendProblemHead(b, ProblemInvalidKey, "Invalid API key", status)
		b = append(b, `,"detail":"The API key is unknown, revoked or expired."}`...)
	case ReasonInvalidToken:
		status = http.StatusUnauthorized
		h["Www-Authenticate"] = []string{`Bearer error="invalid_token"`}
		b = appendProblemHead(b, ProblemInvalidToken, "Invalid token", status)
		b = append(b, `,"detail":"The bearer token is malformed, expired or not signed by a trusted issuer."}`...)
	case ReasonBlocked:
		status = http.StatusForbidden
		b = appendProblemHead(b, ProblemBlocked, "Blocked", status)
		b = append(b, `,"detail":"Requests from this client are blocked."}`...)
	case ReasonUnavailable:
		status = http.StatusServiceUnavailable
		if _, ok := h[hdrRetryAfter]; !ok {
			h[hdrRetryAfter] = []string{"1"}
		}
		b = appendProblemHead(b, ProblemUnavailable, "Service unavailable", status)
		b = append(b, `,"detail":"The rate limiter is unavailable; retry later."}`...)
	default:
		status = http.StatusTooManyRequests
		retry := ceilSeconds(d.RetryAfter)
		if _, ok := h[hdrRetryAfter]; !ok && retry > 0 {
			h[hdrRetryAfter] = []string{strconv.FormatInt(retry, 10)}
		}
		b = appendProblemHead(b, ProblemQuotaExceeded, "Quota exceeded", status)
		b = append(b, `,"detail":"Too many requests`...)
		if d.Policy != "" {
			b = append(b, ` for \"`...)
			b = appendJSONEscaped(b, d.Policy)
			b = append(b, `\"`...)
		}
		if retry > 0 {
			b = append(b, "; retry after "...)
			b = strconv.AppendInt(b, retry, 10)
			b = append(b, " s"...)
		}
		b = append(b, `.","violated-policies":[`...)
		for i, name := range violatedPolicies(d) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, name)
		}
		b = append(b, "]}"...)
	}
	h["Content-Type"] = problemContentType
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	w.Write(b)
	*bp = b
	problemBufs.Put(bp)
}

func appendProblemHead(b []byte, typ, title string, status int) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, title)
	b = append(b, `,"status":`...)
	return strconv.AppendInt(b, int64(status), 10)
}

// violatedPolicies names the limits that denied: the RateLimit items with
// nothing remaining, else the decision's policy.
func violatedPolicies(d Decision) []string {
	if d.violated != nil {
		return d.violated
	}
	var names []string
	if items, err := d.LimitItems(); err == nil {
		for _, it := range items {
			if r, ok := it.Int("r"); ok && r <= 0 {
				names = append(names, it.Name)
			}
		}
	}
	if len(names) == 0 && d.Policy != "" {
		names = append(names, d.Policy)
	}
	return names
}
