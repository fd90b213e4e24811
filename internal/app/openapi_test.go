package app

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/sluicehq/sluice/internal/api"
	"github.com/sluicehq/sluice/internal/bus/bustest"
)

// openAPIMethods are the operations a path item can hold in OpenAPI 3.1.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// documentedRoutes lists "METHOD /path" for every operation of the
// served description, with Echo's ":name" for "{name}", plus the methods
// a path item names in x-sluice-other-methods (those OpenAPI cannot).
func documentedRoutes(t *testing.T, raw []byte) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, item := range doc.Paths {
		echoPath := strings.NewReplacer("{", ":", "}", "").Replace(p)
		for k, v := range item {
			switch {
			case slices.Contains(openAPIMethods, k):
				out = append(out, strings.ToUpper(k)+" "+echoPath)
			case k == "x-sluice-other-methods":
				var ms []string
				if err := json.Unmarshal(v, &ms); err != nil {
					t.Fatalf("%s: x-sluice-other-methods: %v", p, err)
				}
				for _, m := range ms {
					out = append(out, m+" "+echoPath)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// registeredRoutes lists "METHOD /path" for every /v1 route the server's
// router holds.
func registeredRoutes(e *echo.Echo) []string {
	var out []string
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Path, "/v1/") {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// The description names every /v1 route the server registers and no other.
func TestOpenAPIRoutes(t *testing.T) {
	raw, err := api.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	m := boot(t)
	e := m.http.Handler.(*echo.Echo)
	doc, reg := documentedRoutes(t, raw), registeredRoutes(e)
	if len(reg) < 30 {
		t.Fatalf("only %d /v1 routes registered: %v", len(reg), reg)
	}
	for _, r := range reg {
		if !slices.Contains(doc, r) {
			t.Errorf("route %s is not in the OpenAPI description", r)
		}
	}
	for _, r := range doc {
		if !slices.Contains(reg, r) {
			t.Errorf("the OpenAPI description names %s, which the server does not serve", r)
		}
	}
}

// apiSpec validates real exchanges against the served description and
// records which operations and statuses were seen.
type apiSpec struct {
	v    validator.Validator
	e    *echo.Echo
	base string
	seen map[string][]int // "METHOD /route" → statuses seen
}

func newAPISpec(t *testing.T, m *Main, raw []byte) *apiSpec {
	t.Helper()
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, ve := range verrs {
			t.Errorf("document: %s", ve.Error())
		}
		t.FailNow()
	}
	return &apiSpec{v: v, e: m.http.Handler.(*echo.Echo), base: "http://" + m.Addr(), seen: map[string][]int{}}
}

// exchange is one request to send and what must come back.
type exchange struct {
	method, path string
	auth         string // a bearer token, or empty
	header       map[string]string
	body         string // sent as application/json unless header says otherwise
	status       int
	// badRequest says the request breaks the description on purpose (a
	// missing credential, a field out of range): the validator must say so,
	// and the answer must still match the description.
	badRequest bool
}

// do sends x to the real server, checks its status, validates the request
// and the answer against the description, and returns the decoded body.
func (s *apiSpec) do(t *testing.T, x exchange) (map[string]any, http.Header) {
	t.Helper()
	newReq := func() *http.Request {
		var rd io.Reader
		if x.body != "" {
			rd = strings.NewReader(x.body)
		}
		req, err := http.NewRequest(x.method, s.base+x.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if x.body != "" || x.method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		if x.auth != "" {
			req.Header.Set("Authorization", "Bearer "+x.auth)
		}
		for k, v := range x.header {
			req.Header.Set(k, v)
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	what := x.method + " " + x.path
	if resp.StatusCode != x.status {
		t.Fatalf("%s: status %d, want %d; body %s", what, resp.StatusCode, x.status, raw)
	}

	req := newReq()
	reqOK, reqErrs := s.v.ValidateHttpRequestSync(req)
	switch {
	case x.badRequest && reqOK:
		t.Errorf("%s: the request should break the description, but it validates", what)
	case !x.badRequest && !reqOK:
		for _, ve := range reqErrs {
			t.Errorf("%s: request: %s", what, ve.Error())
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.Request = newReq()
	if ok, errs := s.v.ValidateHttpResponse(newReq(), resp); !ok {
		for _, ve := range errs {
			t.Errorf("%s: answer %d %s: %s", what, resp.StatusCode, raw, ve.Error())
		}
	}

	c := s.e.NewContext(nil, nil)
	s.e.Router().Find(x.method, strings.SplitN(x.path, "?", 2)[0], c)
	route := x.method + " " + c.Path()
	s.seen[route] = append(s.seen[route], resp.StatusCode)

	var out map[string]any
	if len(raw) > 0 && x.method != http.MethodHead && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: body %q: %v", what, raw, err)
		}
	}
	return out, resp.Header
}

// TestOpenAPIExchanges runs every documented operation against a real
// server (embedded NATS, the worker, SQLite) with successes and the main
// errors, and validates each real request and answer against the served
// description: a field, header or status the description gets wrong fails
// here.
func TestOpenAPIExchanges(t *testing.T) {
	// A webhook receiver on 127.0.0.1, which the operator allows here.
	receiver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: receiver.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	m := bootWith(t, func(c *Config) {
		trusted, err := api.ParseTrustedProxies("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		c.TrustedProxies = trusted
		c.Webhooks.AllowPrivate, c.Webhooks.CAFile = true, ca
	})
	// The description is read from the server, as a client generator would.
	resp, err := http.Get("http://" + m.Addr() + api.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "public") {
		t.Fatalf("GET %s: %d %v", api.OpenAPIPath, resp.StatusCode, resp.Header)
	}
	s := newAPISpec(t, m, raw)
	_, h := s.do(t, exchange{method: "GET", path: api.OpenAPIPath, status: 200})
	s.do(t, exchange{method: "GET", path: api.OpenAPIPath, header: map[string]string{"If-None-Match": h.Get("ETag")}, status: 304})

	// Operator: tenants.
	tenantBody := `{"name":"spec","owner_email":"owner@spec.test","owner_password":"a long passphrase"}`
	tn, _ := s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: tenantBody, status: 201})
	tenant, sk := tn["id"].(string), tn["service_key"].(string)
	other, _ := s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: `{"name":"other","owner_email":"owner@other.test","owner_password":"a long passphrase"}`, status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", body: tenantBody, status: 401, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: sk, body: tenantBody, status: 401})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: tenantBody, status: 409})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: `{"name":"x","owner_email":"o@x.test"}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: tenantBody, header: map[string]string{"Content-Type": "text/plain"}, status: 415, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/admin/tenants", auth: testToken, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: `{"name":"paris","owner_email":"owner@paris.test","owner_password":"a long passphrase","time_zone":"Europe/Paris"}`, status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: `{"name":"nowhere","owner_email":"owner@nowhere.test","owner_password":"a long passphrase","time_zone":"Mars/Olympus"}`, status: 400})

	// The tenant's time zone, by the operator and by the tenant.
	s.do(t, exchange{method: "PATCH", path: "/v1/admin/tenants/" + tenant, auth: testToken, body: `{"time_zone":"America/New_York"}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/admin/tenants/ten_missing", auth: testToken, body: `{"time_zone":"UTC"}`, status: 404})
	s.do(t, exchange{method: "PATCH", path: "/v1/admin/tenants/" + tenant, auth: testToken, body: `{"time_zone":"Nowhere/Special"}`, status: 400})
	s.do(t, exchange{method: "PATCH", path: "/v1/tenant", auth: sk, body: `{"time_zone":"UTC"}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/tenant", auth: sk, body: `{}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/tenant", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/tenant", status: 401, badRequest: true})

	// Policies.
	policy := `{"name":"items","method":"GET","path":"/api/items","query":{"mode":"heavy"},"consistency":"exact",
		"tiers":{"anonymous":{"algorithm":"token_bucket","limit":2,"period":"60s"},
		         "pro":[{"name":"burst","algorithm":"sliding_window","limit":5,"period":"1m"},{"name":"daily","algorithm":"fixed_window","limit":100,"period":"1d"}]}}`
	p, _ := s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: policy, status: 201})
	pid := p["id"].(string)
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: `{"name":"shadowed","path":"/api/shadow","shadow":true,"unlisted_tiers":"deny","tiers":{"default":{"algorithm":"sliding_log","limit":1,"period":"1h"}}}`, status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: policy, status: 409})
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: `{"name":"bad","path":"/x","tiers":{"default":{"algorithm":"leaky","limit":1,"period":"1s"}}}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: "sk_not_a_key", body: policy, status: 401})
	s.do(t, exchange{method: "GET", path: "/v1/policies", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/policies/" + pid, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/policies/pol_missing", auth: sk, status: 404})
	s.do(t, exchange{method: "GET", path: "/v1/policies/" + pid, auth: other["service_key"].(string), status: 404})
	upd, _ := s.do(t, exchange{method: "PUT", path: "/v1/policies/" + pid, auth: sk, body: strings.Replace(policy, `"query":{"mode":"heavy"},`, "", 1), status: 200})
	if upd["id"] != pid {
		t.Errorf("PUT changed the id: %v", upd)
	}
	s.do(t, exchange{method: "PUT", path: "/v1/policies/pol_missing", auth: sk, body: policy, status: 404})

	// Consumer keys.
	k, _ := s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"mobile","tier":"pro","expires_at":"2099-01-01T00:00:00Z","overrides":{"items":{"algorithm":"token_bucket","limit":50,"period":"60s","burst":10}}}`, status: 201})
	kid, ck := k["id"].(string), k["key"].(string)
	s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"no tier"}`, status: 400, badRequest: true})
	// Envoy's reference configuration through the API.
	envoy := `{"config":"domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"}`
	s.do(t, exchange{method: "POST", path: "/v1/envoy/configs", auth: sk, body: `{"dry_run":true,` + envoy[1:], status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/envoy/configs", auth: sk, body: envoy, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/envoy/configs", auth: sk, body: `{"config":"domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"}`, status: 400})
	s.do(t, exchange{method: "POST", path: "/v1/envoy/configs", auth: sk, body: `{}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/envoy/configs/edge", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/envoy/configs/nope", auth: sk, status: 404})
	// Calendar quotas: a month quota, a key anchored on the 17th.
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: `{"name":"monthly","path":"/api/monthly","tiers":{"default":{"algorithm":"fixed_window","limit":10000,"calendar":"month"}}}`, status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: `{"name":"fortnightly","path":"/api/f","tiers":{"default":{"algorithm":"fixed_window","limit":1,"calendar":"month","period":"14d"}}}`, status: 400})
	billed, _ := s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"billed","tier":"pro","billing_anchor":17}`, status: 201})
	s.do(t, exchange{method: "PATCH", path: "/v1/keys/" + billed["id"].(string), auth: sk, body: `{"billing_anchor":31}`, status: 200})
	usage, _ := s.do(t, exchange{method: "GET", path: "/v1/keys/" + billed["id"].(string) + "/usage", auth: sk, status: 200})
	if u, _ := usage["usage"].([]any); len(u) == 0 {
		t.Errorf("key usage lists no limit: %v", usage)
	}
	s.do(t, exchange{method: "GET", path: "/v1/keys/key_missing/usage", auth: sk, status: 404})
	// Daily usage to bill from, as JSON and as CSV.
	yesterday, tomorrow := time.Now().AddDate(0, 0, -1).Format(time.DateOnly), time.Now().AddDate(0, 0, 1).Format(time.DateOnly)
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=" + yesterday + "&to=" + tomorrow, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-01T00:00:00Z&to=2027-01-31&group=policy", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-01&to=2027-01-31&format=csv", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-31&to=2027-01-01", auth: sk, status: 400})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-01&to=2027-01-31&group=tier", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=" + yesterday + "&to=" + tomorrow + "&limit=1", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-01&to=2027-01-31&limit=0", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/usage?from=2027-01-01&to=2027-01-31&cursor=bogus", auth: sk, status: 400})
	s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"bad anchor","tier":"pro","billing_anchor":32}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/keys", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/keys/" + kid, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/keys/key_missing", auth: sk, status: 404})
	s.do(t, exchange{method: "PATCH", path: "/v1/keys/" + kid, auth: sk, body: `{"name":"mobile app","expires_at":null,"overrides":null}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/keys/" + kid, auth: sk, body: `{"colour":"red"}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "PATCH", path: "/v1/keys/key_missing", auth: sk, body: `{"name":"x"}`, status: 404})

	// Checks: allowed, denied, unmatched, invalid key, peek, shadow, too costly.
	check := func(body string) map[string]any {
		a, _ := s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: body, status: 200})
		return a
	}
	anon := `{"ip":"203.0.113.7","method":"GET","path":"/api/items?mode=heavy"}`
	if a := check(anon); a["allowed"] != true {
		t.Errorf("first check: %v", a)
	}
	check(`{"ip":"203.0.113.7","path":"/api/items","peek":true}`)
	check(anon)
	if a := check(anon); a["allowed"] != false || a["reason"] != "rate_limited" {
		t.Errorf("third check: %v", a)
	}
	check(`{"ip":"2001:db8::1","path":"/api/items","cost":3}`)
	check(`{"ip":"203.0.113.7","path":"/nothing/here"}`)
	check(`{"api_key":"` + ck + `","path":"/api/items"}`)
	check(`{"api_key":"ck_unknownunknownunknownunknownunknown","path":"/api/items"}`)
	check(`{"ip":"203.0.113.8","path":"/api/shadow"}`)
	check(`{"ip":"203.0.113.8","path":"/api/shadow"}`)
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"203.0.113.7"}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"203.0.113.7","path":"/a","cost":0}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/check", body: anon, status: 401, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"203.0.113.7","path":"/` + strings.Repeat("a", api.MaxBody) + `"}`, status: 413, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/check/batch", auth: sk, body: `{"checks":[` + anon + `,{"ip":"198.51.100.1","path":"/api/items"}]}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/check/batch", auth: sk, body: `{"checks":[]}`, status: 400, badRequest: true})

	// A reservation, settled, settled again, and bad settles.
	r := check(`{"ip":"198.51.100.77","path":"/api/items","reserve":1,"reserve_cap":2,"reserve_ttl":"1m"}`)
	rid, _ := r["reservation"].(string)
	if rid == "" {
		t.Fatalf("a reserve answered no reservation: %v", r)
	}
	s.do(t, exchange{method: "POST", path: "/v1/settle", auth: sk, body: `{"reservation":"` + rid + `","actual":2}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/settle", auth: sk, body: `{"reservation":"` + rid + `","actual":2}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/settle", auth: sk, body: `{"reservation":"` + rid + `","actual":1}`, status: 409})
	s.do(t, exchange{method: "POST", path: "/v1/settle", auth: sk, body: `{"reservation":"rsv_missing","actual":1}`, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/settle", auth: sk, body: `{"reservation":"` + rid + `"}`, status: 400, badRequest: true})

	// Forward-auth, as Traefik, Caddy and nginx ask.
	fwd := func(method string, status int, hdr map[string]string) (map[string]any, http.Header) {
		h := map[string]string{"X-Sluice-Service-Key": sk}
		for k, v := range hdr {
			h[k] = v
		}
		return s.do(t, exchange{method: method, path: api.ForwardAuthPath, header: h, status: status})
	}
	traefik := map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": "/api/items?page=1", "X-Forwarded-For": "198.51.100.9"}
	_, h = fwd("GET", 200, traefik)
	if h.Get("RateLimit-Policy") == "" {
		t.Errorf("allowed forward-auth without RateLimit-Policy: %v", h)
	}
	fwd("GET", 200, traefik)
	if b, h := fwd("GET", 429, traefik); b["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || h.Get("Retry-After") == "" {
		t.Errorf("429: %v %v", b, h)
	}
	fwd("GET", 401, map[string]string{"X-Forwarded-Uri": "/api/items", "X-Api-Key": "ck_unknownunknownunknownunknownunknown"})
	// nginx cannot pass the body on: it asks for it in a header.
	nginxDenied := map[string]string{"X-Original-URI": "/api/items", "X-Original-Method": "GET", "X-Forwarded-For": "198.51.100.9", "X-Sluice-Problem-Header": "on"}
	if b, h := fwd("GET", 429, nginxDenied); h.Get("X-Sluice-Problem") == "" || b["status"] != float64(429) {
		t.Errorf("429 with the problem in a header: %v %v", b, h)
	}
	fwd("GET", 200, map[string]string{"X-Forwarded-Uri": "/api/items", "Authorization": "Bearer " + ck})
	fwd("GET", 400, nil)
	s.do(t, exchange{method: "GET", path: api.ForwardAuthPath, header: map[string]string{"X-Forwarded-Uri": "/api/items"}, status: 401, badRequest: true})
	s.do(t, exchange{method: "GET", path: api.ForwardAuthPath, header: map[string]string{"X-Forwarded-Uri": "/api/items", "X-Sluice-Service-Key": "sk_wrong"}, status: 401})
	// nginx sends the client's method; every method OpenAPI can name is described.
	for _, method := range []string{"POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "HEAD"} {
		fwd(method, 200, map[string]string{"X-Original-URI": "/other", "X-Original-Method": method})
	}
	fwd("HEAD", 429, traefik)

	// Blocks (the operator's), seen by forward-auth as 403.
	blk, _ := s.do(t, exchange{method: "POST", path: "/v1/admin/blocks", auth: testToken, body: `{"tenant_id":"` + tenant + `","identity":{"kind":"ip","id":"192.0.2.50"},"reason":"abuse","expires_at":"2099-01-01T00:00:00Z"}`, status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/admin/blocks", auth: testToken, body: `{"tenant_id":"ten_missing","identity":{"kind":"ip","id":"192.0.2.51"}}`, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/admin/blocks", auth: testToken, body: `{"tenant_id":"` + tenant + `","identity":{"kind":"user","id":"x"}}`, status: 400, badRequest: true})
	fwd("GET", 403, map[string]string{"X-Forwarded-Uri": "/api/items", "X-Forwarded-For": "192.0.2.50"})
	check(`{"ip":"192.0.2.50","path":"/api/items"}`)
	s.do(t, exchange{method: "GET", path: "/v1/admin/blocks?tenant_id=" + tenant, auth: testToken, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/blocks/" + blk["id"].(string), auth: testToken, status: 204})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/blocks/blk_missing", auth: testToken, status: 404})

	// Buckets.
	s.do(t, exchange{method: "POST", path: "/v1/buckets/reset", auth: sk, body: `{"policy":"items","identity":{"kind":"ip","id":"203.0.113.7"}}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/buckets/reset", auth: sk, body: `{"policy":"missing","identity":{"kind":"ip","id":"203.0.113.7"}}`, status: 404})

	// Analytics: counters reach SQLite within about a second of the decision.
	now := time.Now().UTC()
	from, to := now.Add(-10*time.Minute).Format(time.RFC3339), now.Add(2*time.Minute).Format(time.RFC3339)
	rng := "from=" + from + "&to=" + to
	waitUntil(t, 30*time.Second, "denials in analytics", func() bool {
		_, body := call(t, m, "GET", "/v1/analytics/top?"+rng, sk, "")
		ids, _ := body["identities"].([]any)
		return len(ids) > 0
	})
	s.do(t, exchange{method: "GET", path: "/v1/analytics/timeseries?" + rng + "&step=5m&policy=items", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/analytics/timeseries?from=soon&to=" + to, auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/analytics/top?" + rng + "&limit=5", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/analytics/top?" + rng + "&limit=0", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/admin/abuse?" + rng, auth: testToken, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/admin/abuse?" + rng, auth: sk, status: 401})
	s.do(t, exchange{method: "GET", path: "/v1/admin/abuse?from=yesterday&to=" + to, auth: testToken, status: 400, badRequest: true})

	// Service keys, the tenant's and the operator's.
	s.do(t, exchange{method: "GET", path: "/v1/service-keys", auth: sk, status: 200})
	nk, _ := s.do(t, exchange{method: "POST", path: "/v1/service-keys", auth: sk, status: 201})
	s.do(t, exchange{method: "DELETE", path: "/v1/service-keys/" + nk["id"].(string), auth: sk, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/service-keys/skey_missing", auth: sk, status: 404})
	keys, _ := s.do(t, exchange{method: "GET", path: "/v1/admin/tenants/" + tenant + "/service-keys", auth: testToken, status: 200})
	first := keys["service_keys"].([]any)[0].(map[string]any)["id"].(string)
	s.do(t, exchange{method: "DELETE", path: "/v1/service-keys/" + first, auth: sk, status: 409})
	s.do(t, exchange{method: "GET", path: "/v1/admin/tenants/ten_missing/service-keys", auth: testToken, status: 404})
	ak, _ := s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/" + tenant + "/service-keys", auth: testToken, body: "{}", status: 201})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/ten_missing/service-keys", auth: testToken, status: 404})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/tenants/" + tenant + "/service-keys/" + ak["id"].(string), auth: testToken, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/tenants/" + tenant + "/service-keys/" + first, auth: testToken, status: 409})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/tenants/" + other["id"].(string) + "/service-keys/" + first, auth: testToken, status: 404})

	// The audit log: the writes above, by the service key's prefix and by
	// the operator; another tenant's entries answer 404.
	log, _ := s.do(t, exchange{method: "GET", path: "/v1/audit?limit=2", auth: sk, status: 200})
	entries, _ := log["entries"].([]any)
	if len(entries) != 2 || log["next_before"] == nil {
		t.Errorf("first audit page: %v", log)
	}
	newest := entries[0].(map[string]any)
	if a := newest["actor"].(map[string]any); a["kind"] != "operator" || newest["action"] != "revoked" {
		t.Errorf("newest entry (the operator's revocation): %v", newest)
	}
	before := fmt.Sprint(int64(log["next_before"].(float64)))
	byKey, _ := s.do(t, exchange{method: "GET", path: "/v1/audit?before=" + before + "&object_type=policy&actor=" + sk[:8] + "…", auth: sk, status: 200})
	if es, _ := byKey["entries"].([]any); len(es) != 5 || es[0].(map[string]any)["actor"].(map[string]any)["kind"] != "service_key" {
		t.Errorf("policy entries by %s…: %v", sk[:8], byKey)
	}
	s.do(t, exchange{method: "GET", path: "/v1/audit?object_type=spaceship", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/audit?limit=0", auth: sk, status: 400, badRequest: true})
	entryID := fmt.Sprint(int64(newest["id"].(float64)))
	s.do(t, exchange{method: "GET", path: "/v1/audit/" + entryID, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/audit/" + entryID, auth: other["service_key"].(string), status: 404})
	s.do(t, exchange{method: "GET", path: "/v1/audit/x", auth: sk, status: 404})
	all, _ := s.do(t, exchange{method: "GET", path: "/v1/admin/audit?tenant_id=" + tenant + "&object_type=block", auth: testToken, status: 200})
	if blocks, _ := all["entries"].([]any); len(blocks) != 2 || blocks[0].(map[string]any)["tenant_name"] != "spec" {
		t.Errorf("operator's block entries of %s: %v", tenant, all)
	}
	s.do(t, exchange{method: "GET", path: "/v1/admin/audit", auth: testToken, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/admin/audit", auth: sk, status: 401})

	// A tenant suspended, resumed and deleted by the operator.
	dm, _ := s.do(t, exchange{method: "POST", path: "/v1/admin/tenants", auth: testToken, body: `{"name":"doomed","owner_email":"owner@doomed.test","owner_password":"a long passphrase"}`, status: 201})
	doomed, dsk := dm["id"].(string), dm["service_key"].(string)
	s.do(t, exchange{method: "GET", path: "/v1/admin/tenants/" + doomed, auth: testToken, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/admin/tenants/ten_missing", auth: testToken, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/" + doomed + "/suspend", auth: testToken, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/ten_missing/suspend", auth: testToken, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: dsk, body: anon, status: 403})
	s.do(t, exchange{method: "GET", path: "/v1/policies", auth: dsk, status: 403})
	s.do(t, exchange{method: "GET", path: api.ForwardAuthPath, header: map[string]string{"X-Sluice-Service-Key": dsk, "X-Forwarded-Uri": "/api/items"}, status: 403})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/" + doomed + "/resume", auth: testToken, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/admin/tenants/ten_missing/resume", auth: testToken, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: dsk, body: anon, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/tenants/" + doomed, auth: testToken, status: 204})
	s.do(t, exchange{method: "DELETE", path: "/v1/admin/tenants/" + doomed, auth: testToken, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: dsk, body: anon, status: 401})

	// JWT issuers, and a check with a token of one.
	jwtKey, jwtSet := ecJWKS(t, "k1")
	iss, _ := s.do(t, exchange{method: "POST", path: "/v1/jwt/issuers", auth: sk, body: `{"issuer":"https://id.spec.test/","audiences":["api"],"jwks":` + jwtSet + `,"algorithms":["ES256"],"claims":{"tier":"plan"}}`, status: 201})
	issID := iss["id"].(string)
	s.do(t, exchange{method: "POST", path: "/v1/jwt/issuers", auth: sk, body: `{"issuer":"https://id.spec.test/","jwks_url":"https://id.spec.test/jwks"}`, status: 400})
	s.do(t, exchange{method: "POST", path: "/v1/jwt/issuers", auth: sk, body: `{"issuer":"https://x.test/","jwks_url":"https://id.spec.test/jwks","algorithms":["HS256"]}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/jwt/issuers", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/jwt/issuers/" + issID, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/jwt/issuers/" + issID, auth: other["service_key"].(string), status: 404})
	s.do(t, exchange{method: "PATCH", path: "/v1/jwt/issuers/" + issID, auth: sk, body: `{"audiences":["api","web"]}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/jwt/issuers/iss_missing", auth: sk, body: `{"audiences":[]}`, status: 404})
	tok := signES256(t, jwtKey, "k1", map[string]any{"iss": "https://id.spec.test/", "aud": "web", "sub": "user-7", "exp": time.Now().Add(time.Hour).Unix()})
	ans, _ := s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"jwt":"` + tok + `","path":"/api/items"}`, status: 200})
	if id, _ := ans["identity"].(map[string]any); ans["allowed"] != true || id["kind"] != "jwt" || id["id"] != "user-7" {
		t.Errorf("check with a token: %v", ans)
	}
	ans, _ = s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"jwt":"x.y.z","ip":"192.0.2.1","path":"/api/items"}`, status: 200})
	if ans["reason"] != "invalid_token" || ans["allowed"] != false {
		t.Errorf("check with a bad token: %v", ans)
	}
	s.do(t, exchange{method: "DELETE", path: "/v1/jwt/issuers/" + issID, auth: sk, status: 204})
	s.do(t, exchange{method: "DELETE", path: "/v1/jwt/issuers/" + issID, auth: sk, status: 404})

	// Customers, a key that joins one, and a check that names it.
	cus, _ := s.do(t, exchange{method: "POST", path: "/v1/customers", auth: sk, body: `{"external_id":"org_42","name":"Acme","tier":"pro","billing_anchor":17,"metadata":{"crm":"hs-1"}}`, status: 201})
	cusID := cus["id"].(string)
	s.do(t, exchange{method: "POST", path: "/v1/customers", auth: sk, body: `{"external_id":"org_42","tier":"pro"}`, status: 409})
	s.do(t, exchange{method: "POST", path: "/v1/customers", auth: sk, body: `{"external_id":"org_43"}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/customers?search=acme&limit=10", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/customers?limit=0", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/customers/" + cusID, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/customers/" + cusID, auth: other["service_key"].(string), status: 404})
	s.do(t, exchange{method: "PATCH", path: "/v1/customers/" + cusID, auth: sk, body: `{"name":"Acme Inc.","billing_anchor":null}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/customers/cus_missing", auth: sk, body: `{"name":"x"}`, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"lost","tier":"pro","customer_id":"cus_missing"}`, status: 404})
	member, _ := s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"acme-app","tier":"pro","customer_id":"` + cusID + `"}`, status: 201})
	if member["customer_id"] != cusID {
		t.Errorf("key with a customer: %v", member)
	}
	s.do(t, exchange{method: "GET", path: "/v1/customers/" + cusID + "/keys", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/customers/cus_missing/keys", auth: sk, status: 404})
	ans, _ = s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"api_key":"` + member["key"].(string) + `","path":"/api/items"}`, status: 200})
	if c, _ := ans["customer"].(map[string]any); c["id"] != cusID || c["external_id"] != "org_42" {
		t.Errorf("check with a customer's key: %v", ans)
	}
	s.do(t, exchange{method: "DELETE", path: "/v1/customers/" + cusID, auth: sk, status: 409})
	s.do(t, exchange{method: "PATCH", path: "/v1/keys/" + member["id"].(string), auth: sk, body: `{"customer_id":null}`, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/customers/" + cusID, auth: sk, status: 204})
	s.do(t, exchange{method: "DELETE", path: "/v1/customers/" + cusID, auth: sk, status: 404})

	// Webhooks: an endpoint, the deliveries of a key's creation, a resend.
	hook, _ := s.do(t, exchange{method: "POST", path: "/v1/webhooks", auth: sk, body: `{"url":"` + receiver.URL + `/hook","description":"billing","events":["key.created","quota.threshold"],"thresholds":[50,100]}`, status: 201})
	hid := hook["id"].(string)
	if !strings.HasPrefix(hook["secret"].(string), "whsec_") {
		t.Errorf("webhook secret: %v", hook)
	}
	s.do(t, exchange{method: "POST", path: "/v1/webhooks", auth: sk, body: `{"url":"http://example.com/hook"}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "POST", path: "/v1/webhooks", auth: sk, body: `{"url":"` + receiver.URL + `","events":["key.exploded"]}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/webhooks", auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/webhooks/" + hid, auth: sk, status: 200})
	s.do(t, exchange{method: "GET", path: "/v1/webhooks/" + hid, auth: other["service_key"].(string), status: 404})
	s.do(t, exchange{method: "PATCH", path: "/v1/webhooks/" + hid, auth: sk, body: `{"thresholds":[80,100]}`, status: 200})
	s.do(t, exchange{method: "PATCH", path: "/v1/webhooks/" + hid, auth: sk, body: `{"thresholds":[0]}`, status: 400, badRequest: true})
	s.do(t, exchange{method: "PATCH", path: "/v1/webhooks/wh_missing", auth: sk, body: `{"description":"x"}`, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/webhooks/" + hid + "/rotate", auth: sk, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/webhooks/wh_missing/rotate", auth: sk, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/keys", auth: sk, body: `{"name":"hooked","tier":"pro"}`, status: 201})
	var delivery string
	deadline := time.Now().Add(10 * time.Second)
	for delivery == "" {
		page, _ := s.do(t, exchange{method: "GET", path: "/v1/webhooks/" + hid + "/deliveries?limit=10", auth: sk, status: 200})
		for _, d := range page["deliveries"].([]any) {
			if d := d.(map[string]any); d["status"] == "delivered" {
				delivery = d["id"].(string)
			}
		}
		if delivery == "" && time.Now().After(deadline) {
			t.Fatalf("no delivery delivered: %v", page)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.do(t, exchange{method: "GET", path: "/v1/webhooks/" + hid + "/deliveries?limit=0", auth: sk, status: 400, badRequest: true})
	s.do(t, exchange{method: "GET", path: "/v1/webhooks/wh_missing/deliveries", auth: sk, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/webhooks/" + hid + "/deliveries/" + delivery + "/resend", auth: sk, status: 202})
	s.do(t, exchange{method: "POST", path: "/v1/webhooks/" + hid + "/deliveries/msg_missing/resend", auth: sk, status: 404})
	s.do(t, exchange{method: "DELETE", path: "/v1/webhooks/" + hid, auth: other["service_key"].(string), status: 404})
	s.do(t, exchange{method: "DELETE", path: "/v1/webhooks/" + hid, auth: sk, status: 204})

	// A concurrency slot, denied while held, released, released again, and bad releases.
	s.do(t, exchange{method: "POST", path: "/v1/policies", auth: sk, body: `{"name":"slots","path":"/api/slots","tiers":{"anonymous":[{"name":"rate","algorithm":"token_bucket","limit":100,"period":"1m"},{"name":"slots","algorithm":"concurrency","limit":1}]}}`, status: 201})
	waitUntil(t, 5*time.Second, "the slots policy", func() bool {
		a, _ := s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"198.51.100.79","path":"/api/slots","peek":true}`, status: 200})
		return a["policy"] == "slots"
	})
	l := check(`{"ip":"198.51.100.78","path":"/api/slots","lease_ttl":"30s"}`)
	lease, _ := l["lease"].(string)
	if lease == "" {
		t.Fatalf("a concurrency check answered no lease: %v", l)
	}
	if a := check(`{"ip":"198.51.100.78","path":"/api/slots"}`); a["reason"] != "concurrency_limited" {
		t.Errorf("a check past the slots: %v", a)
	}
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"198.51.100.78","path":"/api/slots","lease_ttl":"0s"}`, status: 400})
	s.do(t, exchange{method: "POST", path: "/v1/release", auth: sk, body: `{"lease":"` + lease + `"}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/release", auth: sk, body: `{"lease":"` + lease + `"}`, status: 200})
	s.do(t, exchange{method: "POST", path: "/v1/release", auth: sk, body: `{"lease":"lse_missing"}`, status: 404})
	s.do(t, exchange{method: "POST", path: "/v1/release", auth: sk, body: `{}`, status: 400, badRequest: true})

	// Deletions last.
	s.do(t, exchange{method: "DELETE", path: "/v1/keys/" + kid, auth: sk, status: 200})
	s.do(t, exchange{method: "DELETE", path: "/v1/keys/key_missing", auth: sk, status: 404})
	check(`{"api_key":"` + ck + `","path":"/api/items"}`)
	s.do(t, exchange{method: "DELETE", path: "/v1/policies/" + pid, auth: sk, status: 204})
	s.do(t, exchange{method: "DELETE", path: "/v1/policies/" + pid, auth: sk, status: 404})

	// Every documented operation was exercised with a success.
	for _, r := range documentedRoutes(t, raw) {
		if strings.HasPrefix(r, "CONNECT ") || strings.HasPrefix(r, "PROPFIND ") || strings.HasPrefix(r, "REPORT ") {
			continue
		}
		if !slices.ContainsFunc(s.seen[r], func(st int) bool { return st < 400 }) {
			t.Errorf("%s: no successful exchange validated (seen %v)", r, s.seen[r])
		}
	}
	if t.Failed() {
		var routes []string
		for r, st := range s.seen {
			routes = append(routes, fmt.Sprint(r, st))
		}
		sort.Strings(routes)
		t.Logf("exchanges: %s", strings.Join(routes, "\n"))
	}
}

// A server whose worker never answers is not ready: its 503 answers match
// the description too.
func TestOpenAPIUnavailable(t *testing.T) {
	ns := bustest.Start(t, "noworker")
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Data = t.TempDir()
	cfg.Node = "noworker"
	cfg.OperatorToken = testToken
	cfg.NatsURL = ns.URL()
	cfg.Worker = "external"
	m := NewMain(cfg, slog.New(slog.DiscardHandler))
	m.Out = io.Discard
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = m.Close(ctx) // it cannot flush to a worker that never came
	})
	if m.Engine().Ready() {
		t.Fatal("ready without a worker")
	}
	raw, err := api.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	s := newAPISpec(t, m, raw)
	const sk = "sk_0123456789abcdef0123456789abcdef"
	s.do(t, exchange{method: "POST", path: "/v1/check", auth: sk, body: `{"ip":"203.0.113.7","path":"/a"}`, status: 503})
	s.do(t, exchange{method: "GET", path: "/v1/policies", auth: sk, status: 503})
	s.do(t, exchange{method: "GET", path: api.ForwardAuthPath, header: map[string]string{"X-Sluice-Service-Key": sk, "X-Forwarded-Uri": "/a"}, status: 503})
}
