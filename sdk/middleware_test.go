package sdk

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// app is the tenant's handler behind the middleware.
var app = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "hello")
})

type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

// serve sends r through the middleware and returns the recorded response
// and, for problem answers, the decoded body.
func serve(t *testing.T, h http.Handler, r *http.Request) (*httptest.ResponseRecorder, problem) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var p problem
	if w.Header().Get("Content-Type") == "application/problem+json" {
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("problem body: %v", err)
		}
	}
	return w, p
}

func TestMiddlewareAllowedAndDenied(t *testing.T) {
	ts := newFakeSluice().start(t)
	h := newTestClient(t, ts.URL).Middleware(app)

	for i, want := range []struct {
		status    int
		limit     string
		remaining string
	}{{200, `"heavy-example";r=1;t=60`, "1"}, {200, `"heavy-example";r=0;t=60`, "0"}, {429, `"heavy-example";r=0;t=60`, "0"}} {
		r := httptest.NewRequest("GET", "/api/heavy?mode=heavy", nil)
		w, p := serve(t, h, r)
		if w.Code != want.status {
			t.Fatalf("request %d: status %d, want %d", i, w.Code, want.status)
		}
		hdr := w.Header()
		for k, v := range map[string]string{
			"RateLimit-Policy":      `"heavy-example";q=2;w=60`,
			"RateLimit":             want.limit,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": want.remaining,
			"X-RateLimit-Reset":     "60",
		} {
			if got := hdr.Get(k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
			}
		}
		if want.status == 200 {
			if w.Body.String() != "hello" || hdr.Get("Retry-After") != "" {
				t.Errorf("request %d: body %q, Retry-After %q", i, w.Body.String(), hdr.Get("Retry-After"))
			}
			continue
		}
		if hdr.Get("Retry-After") != "60" {
			t.Errorf("Retry-After = %q", hdr.Get("Retry-After"))
		}
		wantP := problem{
			Type: ProblemQuotaExceeded, Title: "Quota exceeded", Status: 429,
			Detail:   `Too many requests for "heavy-example"; retry after 60 s.`,
			Violated: []string{"heavy-example"},
		}
		if !reflect.DeepEqual(p, wantP) {
			t.Errorf("problem\n got %+v\nwant %+v", p, wantP)
		}
	}
}

func TestMiddlewareMultiLimitNamesTheViolatedLimit(t *testing.T) {
	ts := newFakeSluice().start(t)
	h := newTestClient(t, ts.URL).Middleware(app)
	serve(t, h, httptest.NewRequest("GET", "/api/multi", nil))
	w, p := serve(t, h, httptest.NewRequest("GET", "/api/multi", nil))
	if w.Code != 429 || !reflect.DeepEqual(p.Violated, []string{"multi.burst"}) {
		t.Errorf("status %d, violated %q", w.Code, p.Violated)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"multi.burst";q=1;w=10, "multi.daily";q=100;w=86400` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

func TestMiddlewareInvalidKeyAndBlocked(t *testing.T) {
	ts := newFakeSluice().start(t)
	h := newTestClient(t, ts.URL).Middleware(app)

	r := httptest.NewRequest("GET", "/x", nil)
	r.Header.Set("X-API-Key", badKey)
	w, p := serve(t, h, r)
	if w.Code != 401 || p.Type != ProblemInvalidKey || p.Status != 401 || w.Header().Get("WWW-Authenticate") == "" {
		t.Errorf("invalid key: %d %+v", w.Code, p)
	}

	r = httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr = "198.51.100.66:4000"
	w, p = serve(t, h, r)
	if w.Code != 403 || p.Type != ProblemBlocked || p.Status != 403 {
		t.Errorf("blocked: %d %+v", w.Code, p)
	}

	r = httptest.NewRequest("GET", "/x", nil)
	r.Header.Set("Authorization", "Bearer "+goodKey)
	if w, _ := serve(t, h, r); w.Code != 200 {
		t.Errorf("good bearer key: %d", w.Code)
	}
}

func TestMiddlewareShadowDenialPasses(t *testing.T) {
	ts := newFakeSluice().start(t)
	h := newTestClient(t, ts.URL).Middleware(app)
	for range 3 {
		if w, _ := serve(t, h, httptest.NewRequest("GET", "/api/shadow", nil)); w.Code != 200 {
			t.Fatalf("shadow policy answered %d", w.Code)
		}
	}
}

func TestMiddlewareFailureModes(t *testing.T) {
	ts := newFakeSluice().start(t)
	open := newTestClient(t, ts.URL).Middleware(app)
	closed := newTestClient(t, ts.URL, FailClosed()).Middleware(app)
	ts.Close()

	w, _ := serve(t, open, httptest.NewRequest("GET", "/api/heavy", nil))
	if w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("fail-open: %d %v", w.Code, w.Header())
	}
	w, p := serve(t, closed, httptest.NewRequest("GET", "/api/heavy", nil))
	if w.Code != 503 || p.Type != ProblemUnavailable || p.Status != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("fail-closed: %d %+v %v", w.Code, p, w.Header())
	}
}

func TestMiddlewareForwardsRawTarget(t *testing.T) {
	f := newFakeSluice()
	ts := f.start(t)
	app := httptest.NewServer(newTestClient(t, ts.URL).Middleware(app))
	defer app.Close()
	const target = "/api/%68eavy/./x//y%2F..?mode=%68eavy&mode=light"
	req, _ := http.NewRequest("DELETE", app.URL, nil)
	req.URL.Opaque = target // sent verbatim
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := f.checks()
	if len(got) != 1 || got[0].Path != target || got[0].Method != "DELETE" || got[0].IP != "127.0.0.1" {
		t.Errorf("sluice saw %+v, want path %q", got, target)
	}
}

func TestAPIKeyFromRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []Option
		header map[string]string
		want   string
	}{
		{"x-api-key", nil, map[string]string{"X-API-Key": " ck_a "}, "ck_a"},
		{"bearer consumer key", nil, map[string]string{"Authorization": "bearer ck_b"}, "ck_b"},
		{"other bearer ignored", nil, map[string]string{"Authorization": "Bearer eyJhbGciOi"}, ""},
		{"basic ignored", nil, map[string]string{"Authorization": "Basic ck_x"}, ""},
		{"header wins", nil, map[string]string{"X-API-Key": "k1", "Authorization": "Bearer ck_2"}, "k1"},
		{"custom header", []Option{WithKeyHeader("x-customer-key")}, map[string]string{"X-Customer-Key": "ck_c", "X-API-Key": "no"}, "ck_c"},
		{"authorization as key header", []Option{WithKeyHeader("Authorization")}, map[string]string{"Authorization": "Bearer ck_d"}, "ck_d"},
		{"none", nil, nil, ""},
	} {
		c := New("http://sluice.invalid", "sk", tc.opts...)
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := c.CheckRequestFor(r).APIKey; got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestClientIP(t *testing.T) {
	trusted := []Option{WithTrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10")}
	forwarded := append([]Option{WithProxyHeader("Forwarded")}, trusted...)
	for _, tc := range []struct {
		name   string
		opts   []Option
		remote string
		xff    []string
		fwd    []string
		want   string
	}{
		{"peer only", nil, "203.0.113.7:1234", nil, nil, "203.0.113.7"},
		{"v6 peer", nil, "[2001:db8::1%eth0]:1234", nil, nil, "2001:db8::1"},
		{"xff without trusted proxies is ignored", nil, "203.0.113.7:1", []string{"1.1.1.1"}, nil, "203.0.113.7"},
		{"xff from an untrusted peer is ignored", trusted, "203.0.113.7:1", []string{"1.1.1.1"}, nil, "203.0.113.7"},
		{"xff from a trusted proxy", trusted, "10.1.2.3:1", []string{"198.51.100.4"}, nil, "198.51.100.4"},
		{"spoofed left entries skipped", trusted, "10.1.2.3:1", []string{"1.1.1.1, 6.6.6.6, 198.51.100.4"}, nil, "198.51.100.4"},
		{"trusted hops skipped", trusted, "10.1.2.3:1", []string{"1.1.1.1, 198.51.100.4, 10.9.9.9", "192.0.2.10"}, nil, "198.51.100.4"},
		{"all trusted: left-most", trusted, "10.1.2.3:1", []string{"10.0.0.1, 10.0.0.2"}, nil, "10.0.0.1"},
		{"garbage stops at last vouched hop", trusted, "10.1.2.3:1", []string{"1.1.1.1, garbage, 10.0.0.5"}, nil, "10.0.0.5"},
		{"garbage right next to peer", trusted, "10.1.2.3:1", []string{"1.1.1.1, unknown"}, nil, "10.1.2.3"},
		{"ports and brackets", trusted, "10.1.2.3:1", []string{"[2001:db8::7]:99, 198.51.100.4:80"}, nil, "198.51.100.4"},
		{"v6 hop", trusted, "[2001:db8:ffff::1]:1", []string{"2001:db8:1::9"}, nil, "2001:db8:1::9"},
		{"empty header", trusted, "10.1.2.3:1", nil, nil, "10.1.2.3"},
		{"forwarded ignored when xff is configured", trusted, "10.1.2.3:1", nil, []string{"for=1.1.1.1"}, "10.1.2.3"},
		{"xff ignored when forwarded is configured", forwarded, "10.1.2.3:1", []string{"1.1.1.1"}, nil, "10.1.2.3"},
		{"forwarded", forwarded, "10.1.2.3:1", nil, []string{`for=1.1.1.1, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.9;by=10.0.0.1`}, "2001:db8:cafe::17"},
		{"forwarded quoted comma", forwarded, "10.1.2.3:1", nil, []string{`for=198.51.100.4;x="a,b", for=10.0.0.9`}, "198.51.100.4"},
		{"forwarded obfuscated", forwarded, "10.1.2.3:1", nil, []string{`for=1.1.1.1, for=_hidden, For=10.0.0.9`}, "10.0.0.9"},
		{"forwarded element without for", forwarded, "10.1.2.3:1", nil, []string{`for=1.1.1.1, proto=http`}, "10.1.2.3"},
	} {
		c := New("http://sluice.invalid", "sk", tc.opts...)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		for _, v := range tc.fwd {
			r.Header.Add("Forwarded", v)
		}
		if got := c.CheckRequestFor(r).IP; got != tc.want {
			t.Errorf("%s: IP %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestWriteHeadersForBatchResult(t *testing.T) {
	h := http.Header{}
	WriteHeaders(h, Decision{Policy: "p", Limit: 10, Remaining: 0, Reset: 5500e6, RetryAfter: 1200e6})
	want := http.Header{
		"Ratelimit-Policy":      {`"p";q=10`},
		"Ratelimit":             {`"p";r=0;t=6`},
		"X-Ratelimit-Limit":     {"10"},
		"X-Ratelimit-Remaining": {"0"},
		"X-Ratelimit-Reset":     {"6"},
		"Retry-After":           {"2"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("headers\n got %v\nwant %v", h, want)
	}
	h = http.Header{}
	WriteHeaders(h, Decision{Allowed: true, Reason: ReasonUnavailable, Local: true})
	if len(h) != 0 {
		t.Errorf("failure decision wrote %v", h)
	}
}

func TestProblemEscapesPolicyName(t *testing.T) {
	w := httptest.NewRecorder()
	WriteProblem(w, Decision{Reason: ReasonRateLimited, Policy: `we"ird\name`})
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	if !strings.Contains(p.Detail, `"we"ird\name"`) || !reflect.DeepEqual(p.Violated, []string{`we"ird\name`}) {
		t.Errorf("problem %+v", p)
	}
}

func TestBearerJWT(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opts          []Option
		header        map[string]string
		key, tokenJWT string
	}{
		{"off by default", nil, map[string]string{"Authorization": "Bearer eyJhbGciOi.x.y"}, "", ""},
		{"on", []Option{WithBearerJWT()}, map[string]string{"Authorization": "Bearer eyJhbGciOi.x.y"}, "", "eyJhbGciOi.x.y"},
		{"a consumer key is not a token", []Option{WithBearerJWT()}, map[string]string{"Authorization": "Bearer ck_b"}, "ck_b", ""},
		{"a key header comes first", []Option{WithBearerJWT()}, map[string]string{"X-API-Key": "ck_a", "Authorization": "Bearer eyJ.x.y"}, "ck_a", ""},
		{"basic ignored", []Option{WithBearerJWT()}, map[string]string{"Authorization": "Basic abc"}, "", ""},
	} {
		c := New("http://sluice.invalid", "sk", tc.opts...)
		r := httptest.NewRequest("GET", "/", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := c.CheckRequestFor(r); got.APIKey != tc.key || got.JWT != tc.tokenJWT {
			t.Errorf("%s: key %q jwt %q, want %q %q", tc.name, got.APIKey, got.JWT, tc.key, tc.tokenJWT)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(appendCheck(nil, &CheckRequest{JWT: "a.b.c", Path: "/x"}), &body); err != nil || body["jwt"] != "a.b.c" {
		t.Fatalf("encoded check: %v %v", body, err)
	}
	w := httptest.NewRecorder()
	WriteProblem(w, Decision{Reason: ReasonInvalidToken})
	if w.Code != 401 || !strings.Contains(w.Body.String(), ProblemInvalidToken) || w.Header().Get("WWW-Authenticate") == "" {
		t.Fatalf("invalid_token problem: %d %s", w.Code, w.Body)
	}
}
