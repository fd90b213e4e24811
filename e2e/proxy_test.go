package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireProxy finds a reverse proxy binary (Debian's caddy or nginx),
// skipping the test when it is missing unless CI=true, where it is required.
func requireProxy(t *testing.T, name string, paths ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no %s found, and CI=true requires the reverse proxy tests: apt-get install %s", name, name)
	}
	t.Skipf("reverse proxy test skipped: no %s found (apt-get install %s); with CI=true it is required", name, name)
	return ""
}

// upstream is the API behind the proxy: it counts the requests it sees and
// keeps the rate-limit headers the proxy passed on.
type upstream struct {
	*httptest.Server
	mu     sync.Mutex
	seen   int
	policy string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen++
		u.policy = r.Header.Get("RateLimit-Policy")
		u.mu.Unlock()
		w.Write([]byte("upstream"))
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) stats() (int, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen, u.policy
}

// waitListening waits until something accepts on addr.
func waitListening(t *testing.T, p *proc, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited during start:\n%s", p.name, tail(p.logs.String(), 40))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not listening on %s after 30s:\n%s", p.name, addr, tail(p.logs.String(), 40))
}

// unavailableProblem is what a client gets through the documented configs
// when Sluice cannot be reached or fails: 503, application/problem+json.
const unavailableProblem = `{"type":"https://sluice.dev/problems/unavailable","title":"Service unavailable","status":503}`

const caddyConfig = `{
	admin off
	auto_https off
}

http://%[1]s {
	route {
		# Only Sluice's answer may set these for the upstream.
		request_header -Ratelimit
		request_header -Ratelimit-Policy
		# forward_auth written out, so that an allowed request's rate-limit
		# headers reach the client as well as the upstream.
		reverse_proxy %[2]s {
			method GET
			rewrite /v1/forward-auth
			header_up X-Forwarded-Method {method}
			header_up X-Forwarded-Uri {uri}
			# Sluice refuses a request carrying both header families:
			# a client's own X-Original-* must not reach it.
			header_up -X-Original-URI
			header_up -X-Original-Method
			header_up X-Sluice-Service-Key "%[3]s"
			transport http {
				dial_timeout 2s
				response_header_timeout 5s
			}
			# Sluice failing (503 while it starts): the same answer as
			# when it cannot be reached, below.
			@sluice_failed status 5xx
			handle_response @sluice_failed {
				header Content-Type application/problem+json
				respond ` + "`" + unavailableProblem + "`" + ` 503
			}
			@allowed status 2xx
			handle_response @allowed {
				copy_response_headers {
					include Ratelimit Ratelimit-Policy X-Ratelimit-Limit X-Ratelimit-Remaining X-Ratelimit-Reset
				}
				route {
					request_header Ratelimit {http.reverse_proxy.header.Ratelimit}
					request_header Ratelimit-Policy {http.reverse_proxy.header.Ratelimit-Policy}
					# A header Sluice did not send (no policy) stays an unreplaced placeholder: drop it.
					@unset_rl header_regexp Ratelimit ^\{
					request_header @unset_rl -Ratelimit
					@unset_rlp header_regexp Ratelimit-Policy ^\{
					request_header @unset_rlp -Ratelimit-Policy
				}
			}
		}
		reverse_proxy %[4]s
	}
	# Sluice cannot be reached or does not answer in time: fail closed
	# with a problem body. Errors of the API itself keep Caddy's own answer.
	handle_errors {
		@sluice_down expression ` + "`" + `{http.reverse_proxy.upstream.hostport} == "%[2]s"` + "`" + `
		handle @sluice_down {
			header Content-Type application/problem+json
			respond ` + "`" + unavailableProblem + "`" + ` 503
		}
	}
}
`

const nginxConfig = `%[5]s
worker_processes 1;
error_log stderr info;
pid %[6]s/nginx.pid;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path %[6]s/body;
	proxy_temp_path %[6]s/proxy;
	fastcgi_temp_path %[6]s/fastcgi;
	uwsgi_temp_path %[6]s/uwsgi;
	scgi_temp_path %[6]s/scgi;

	server {
		listen %[1]s;

		location / {
			auth_request /_sluice;
			auth_request_set $sluice_status $upstream_status;
			auth_request_set $sluice_ratelimit $upstream_http_ratelimit;
			auth_request_set $sluice_policy $upstream_http_ratelimit_policy;
			auth_request_set $sluice_limit $upstream_http_x_ratelimit_limit;
			auth_request_set $sluice_remaining $upstream_http_x_ratelimit_remaining;
			auth_request_set $sluice_reset $upstream_http_x_ratelimit_reset;
			auth_request_set $sluice_retry_after $upstream_http_retry_after;
			auth_request_set $sluice_problem $upstream_http_x_sluice_problem;

			add_header RateLimit $sluice_ratelimit always;
			add_header RateLimit-Policy $sluice_policy always;
			add_header X-RateLimit-Limit $sluice_limit always;
			add_header X-RateLimit-Remaining $sluice_remaining always;
			add_header X-RateLimit-Reset $sluice_reset always;
			proxy_set_header RateLimit $sluice_ratelimit;
			proxy_set_header RateLimit-Policy $sluice_policy;

			error_page 401 = @sluice_401;
			error_page 403 = @sluice_403;
			error_page 500 = @sluice_denied;
			proxy_pass http://%[4]s;
		}

		location = /_sluice {
			internal;
			proxy_pass http://%[2]s/v1/forward-auth;
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header X-Original-URI $request_uri;
			proxy_set_header X-Original-Method $request_method;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
			proxy_set_header X-Sluice-Service-Key "%[3]s";
			proxy_set_header X-Sluice-Problem-Header on;
			%[7]s
		}

		location @sluice_denied {
			add_header RateLimit $sluice_ratelimit always;
			add_header RateLimit-Policy $sluice_policy always;
			add_header X-RateLimit-Limit $sluice_limit always;
			add_header X-RateLimit-Remaining $sluice_remaining always;
			add_header X-RateLimit-Reset $sluice_reset always;
			add_header Retry-After $sluice_retry_after always;
			default_type application/problem+json;
			if ($sluice_status = 429) {
				return 429 $sluice_problem;
			}
			return 503 '` + unavailableProblem + `';
		}
		location @sluice_401 {
			add_header WWW-Authenticate 'Bearer error="invalid_token"' always;
			default_type application/problem+json;
			return 401 $sluice_problem;
		}
		location @sluice_403 {
			default_type application/problem+json;
			return 403 $sluice_problem;
		}
	}
}
`

// nginxClearAndTimeouts completes the documented nginx config's subrequest:
// nginx passes every client header on, so the family Sluice must not read
// is removed (an empty value drops the header), and a Sluice that does not
// answer in time counts as down. nginxPreviousConfig leaves it out, as
// docs/PROXIES.md's config did before.
const (
	nginxClearAndTimeouts = `proxy_set_header X-Forwarded-Uri "";
			proxy_set_header X-Forwarded-Method "";
			proxy_connect_timeout 2s;
			proxy_read_timeout 5s;`
	nginxPreviousConfig = ""
)

// startProxy runs a real Caddy or nginx on a free loopback address with
// config (caddyConfig, or nginxConfig completed by extra), asking the
// Sluice at sluice with serviceKey and passing allowed requests to up. It
// returns the proxy's base URL once it listens.
func startProxy(t *testing.T, name, sluice, serviceKey, up, extra string) string {
	t.Helper()
	listen := freeAddr(t)
	var p *proc
	switch name {
	case "caddy":
		bin := requireProxy(t, "caddy", "/usr/bin/caddy")
		dir := t.TempDir()
		conf := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(caddyConfig, listen, sluice, serviceKey, up)), 0o600); err != nil {
			t.Fatal(err)
		}
		p = start(t, "caddy", bin, []string{"run", "--config", conf, "--adapter", "caddyfile"}, "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	case "nginx":
		bin := requireProxy(t, "nginx", "/usr/sbin/nginx")
		dir := t.TempDir()
		user := ""
		if os.Geteuid() == 0 {
			user = "user root;"
		}
		conf := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConfig, listen, sluice, serviceKey, up, user, dir, extra)), 0o600); err != nil {
			t.Fatal(err)
		}
		p = start(t, "nginx", bin, []string{"-p", dir, "-c", conf, "-e", "stderr", "-g", "daemon off;"})
		// SIGTERM lets the master stop its workers; a killed master
		// would leave them holding the log pipe. Runs before p.kill.
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
			}
		})
	default:
		t.Fatalf("no proxy %q", name)
	}
	waitListening(t, p, listen)
	return "http://" + listen
}

// TestReverseProxyForwardAuth runs real Caddy and nginx in front of an
// upstream, each asking a real Sluice server on every request.
func TestReverseProxyForwardAuth(t *testing.T) {
	s := startServer(t, serverOpts{extra: []string{"--trusted-proxies", "127.0.0.1,::1"}})
	sluice := s.addr

	for _, name := range []string{"caddy", "nginx"} {
		t.Run(name, func(t *testing.T) {
			tn := createTenant(t, s, "proxy-"+name)
			const n = 3
			createPolicy(t, s, tn, map[string]any{
				"name": "items", "method": "GET", "path": "/api/items",
				"tiers": map[string]any{
					"anonymous": map[string]any{"algorithm": "token_bucket", "limit": n, "period": "60s"},
					"pro":       map[string]any{"algorithm": "token_bucket", "limit": 7, "period": "60s"},
				},
			})
			ck := mustStatus(t, call(t, "POST", s.base+"/v1/keys", tn.Key, map[string]any{"name": "app", "tier": "pro"}), 201).str("key")
			up := newUpstream(t)
			base := startProxy(t, name, sluice, tn.Key, strings.TrimPrefix(up.URL, "http://"), nginxClearAndTimeouts)

			for i := 1; i <= n; i++ {
				r := call(t, "GET", base+"/api/items?page=1", "", nil)
				if r.Status != 200 || string(r.Raw) != "upstream" {
					t.Fatalf("request %d: %d %s", i, r.Status, r.Raw)
				}
				if r.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(n-i) || r.Header.Get("RateLimit-Policy") != `"items";q=3;w=60` {
					t.Errorf("request %d: downstream X-RateLimit-Remaining = %q, want %d", i, r.Header.Get("X-RateLimit-Remaining"), n-i)
				}
			}
			if seen, policy := up.stats(); seen != n || policy != `"items";q=3;w=60` {
				t.Fatalf("upstream saw %d requests with RateLimit-Policy %q, want %d with the anonymous policy", seen, policy, n)
			}
			r := call(t, "GET", base+"/api/items?page=1", "", nil)
			if r.Status != 429 || r.Header.Get("Retry-After") == "" || !strings.HasPrefix(r.Header.Get("RateLimit"), `"items";r=0;`) ||
				r.Header.Get("RateLimit-Policy") != `"items";q=3;w=60` || r.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Fatalf("request %d: %d %v %s, want 429 with Retry-After and the rate-limit headers", n+1, r.Status, r.Header, r.Raw)
			}
			// Sluice's own problem body reaches the client, whatever the proxy.
			if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") || r.str("type") != "https://iana.org/assignments/http-problem-types#quota-exceeded" ||
				!strings.HasPrefix(r.str("detail"), `Too many requests for "items"; retry after `) || !strings.Contains(string(r.Raw), `"violated-policies":["items"]`) {
				t.Errorf("429 body: %s %s", r.Header.Get("Content-Type"), r.Raw)
			}
			if r.Header.Get("X-Sluice-Problem") != "" {
				t.Errorf("the problem header reached the client: %v", r.Header)
			}
			if seen, _ := up.stats(); seen != n {
				t.Fatalf("upstream saw %d requests, want %d: a denied request reached it", seen, n)
			}

			// A path no policy covers passes with no rate-limit headers, to
			// the client or the upstream, even when the client sends its own.
			r = call(t, "GET", base+"/elsewhere", "", nil, "RateLimit-Policy", `"spoofed";q=1;w=1`)
			if _, ok := r.Header["Ratelimit"]; r.Status != 200 || ok {
				t.Errorf("unlimited path: %d %v", r.Status, r.Header)
			}
			if _, policy := up.stats(); policy != "" {
				t.Errorf("unlimited path: upstream RateLimit-Policy %q, want none", policy)
			}

			// A consumer key selects its tier, by X-API-Key or Bearer.
			r = call(t, "GET", base+"/api/items", "", nil, "X-API-Key", ck)
			if r.Status != 200 {
				t.Fatalf("pro key: %d %s", r.Status, r.Raw)
			}
			if _, policy := up.stats(); policy != `"items";q=7;w=60` {
				t.Errorf("pro key: upstream RateLimit-Policy %q, want the pro tier's", policy)
			}
			r = call(t, "GET", base+"/api/items", ck, nil)
			if r.Status != 200 {
				t.Fatalf("pro key as Bearer: %d %s", r.Status, r.Raw)
			}
			seen, _ := up.stats()

			r = call(t, "GET", base+"/api/items", "", nil, "X-API-Key", "ck_not_a_real_key")
			if r.Status != 401 || r.Header.Get("WWW-Authenticate") == "" || r.str("type") != "https://sluice.dev/problems/invalid-key" ||
				r.str("detail") != "The API key is unknown, revoked or expired." {
				t.Errorf("invalid key: %d %v %s", r.Status, r.Header, r.Raw)
			}
			if now, _ := up.stats(); now != seen {
				t.Errorf("upstream saw the invalid key's request")
			}

			// A blocked client gets Sluice's 403 problem body.
			mustStatus(t, call(t, "POST", s.base+"/v1/admin/blocks", operatorToken, map[string]any{
				"tenant_id": tn.ID, "identity": map[string]any{"kind": "ip", "id": "127.0.0.1"}, "reason": "e2e",
			}), 201)
			r = call(t, "GET", base+"/api/items", "", nil)
			if r.Status != 403 || r.str("type") != "https://sluice.dev/problems/blocked" || r.str("detail") != "Requests from this client are blocked." {
				t.Errorf("blocked: %d %v %s", r.Status, r.Header, r.Raw)
			}
			if now, _ := up.stats(); now != seen {
				t.Errorf("upstream saw the blocked client's request")
			}
		})
	}
}

// TestForwardAuthTraefikShape sends what Traefik's ForwardAuth sends (a GET
// with X-Forwarded-Method, -Uri, -For and the client's headers) straight to
// the endpoint: Traefik is not packaged in Debian.
func TestForwardAuthTraefikShape(t *testing.T) {
	s := startServer(t, serverOpts{extra: []string{"--trusted-proxies", "127.0.0.1"}})
	tn := createTenant(t, s, "traefik")
	createPolicy(t, s, tn, map[string]any{
		"name": "upload", "method": "POST", "path": "/api/upload",
		"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": 1, "period": "60s"}},
	})
	fa := func(ip string) response {
		return call(t, "GET", s.base+"/v1/forward-auth", "", nil,
			"X-Sluice-Service-Key", tn.Key, "X-Forwarded-Method", "POST", "X-Forwarded-Proto", "http",
			"X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/api/upload?x=1", "X-Forwarded-For", ip)
	}
	if r := fa("198.51.100.1"); r.Status != 200 || r.Header.Get("RateLimit-Policy") != `"upload";q=1;w=60` {
		t.Fatalf("first: %d %v %s", r.Status, r.Header, r.Raw)
	}
	if r := fa("198.51.100.1"); r.Status != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("second from the same client: %d %v", r.Status, r.Header)
	}
	// X-Forwarded-For from the trusted peer names the client: another
	// client has its own bucket.
	if r := fa("198.51.100.2"); r.Status != 200 {
		t.Fatalf("another client: %d %s", r.Status, r.Raw)
	}
	r := call(t, "GET", s.base+"/v1/forward-auth", "", nil, "X-Sluice-Service-Key", tn.Key, "X-Forwarded-Method", "POST")
	if r.Status != 400 || !strings.Contains(r.str("error", "message"), "X-Forwarded-Uri") {
		t.Errorf("no URI: %d %s", r.Status, r.Raw)
	}
}

// spoofingClient connects from 127.0.0.2, an address no proxy is trusted
// with, and adds to every request each family of forwarding headers a
// proxy or a framework may read, with made-up values: another path,
// another method, another host, https and another client address (a
// different one each request).
type spoofingClient struct {
	c *http.Client
	n int
}

func newSpoofingClient() *spoofingClient {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	return &spoofingClient{c: &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}}
}

func (s *spoofingClient) get(t *testing.T, url string) response {
	t.Helper()
	s.n++
	fake := fmt.Sprintf("198.51.100.%d", s.n)
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"X-Forwarded-Uri":    "/public/free",
		"X-Forwarded-Method": "OPTIONS",
		"X-Forwarded-Host":   "free.example",
		"X-Forwarded-Proto":  "https",
		"X-Forwarded-For":    fake,
		"X-Original-URI":     "/public/free",
		"X-Original-Method":  "OPTIONS",
		"X-Original-URL":     "https://free.example/public/free",
		"Forwarded":          "for=" + fake + ";proto=https;host=free.example",
		"X-Real-IP":          fake,
	} {
		req.Header.Set(k, v)
	}
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

// TestReverseProxySpoofedHeaders sends every forwarding header family,
// spoofed, through real Caddy and nginx with the documented configs: each
// request is checked against its real path and its real client. Through
// the config docs/PROXIES.md gave nginx before (which did not remove the
// X-Forwarded-* family), the same client is refused instead of picking
// its own path.
func TestReverseProxySpoofedHeaders(t *testing.T) {
	// Only the proxies' own address is trusted: the client, on
	// 127.0.0.2, is not.
	s := startServer(t, serverOpts{extra: []string{"--trusted-proxies", "127.0.0.1"}})
	for _, tc := range []struct{ name, proxy, nginxExtra string }{
		{"caddy", "caddy", ""},
		{"nginx", "nginx", nginxClearAndTimeouts},
		{"nginx, previous config", "nginx", nginxPreviousConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := createTenant(t, s, "spoof-"+strings.NewReplacer(",", "", " ", "-").Replace(tc.name))
			const n = 3
			createPolicy(t, s, tn, map[string]any{
				"name": "items", "method": "GET", "path": "/api/items",
				"tiers": map[string]any{"anonymous": map[string]any{"algorithm": "token_bucket", "limit": n, "period": "60s"}},
			})
			up := newUpstream(t)
			base := startProxy(t, tc.proxy, s.addr, tn.Key, strings.TrimPrefix(up.URL, "http://"), tc.nginxExtra)
			c := newSpoofingClient()

			if tc.nginxExtra == nginxPreviousConfig && tc.proxy == "nginx" {
				// Sluice refuses the ambiguous subrequest; nginx turns
				// that into its 503. Nothing reaches the upstream, and a
				// client without the headers still passes.
				for i := range n + 1 {
					if r := c.get(t, base+"/api/items"); r.Status != 503 || string(r.Raw) != unavailableProblem {
						t.Fatalf("spoofed request %d: %d %s, want the 503 problem", i+1, r.Status, r.Raw)
					}
				}
				if seen, _ := up.stats(); seen != 0 {
					t.Fatalf("the upstream saw %d spoofed requests", seen)
				}
				if r := call(t, "GET", base+"/api/items", "", nil); r.Status != 200 {
					t.Fatalf("a plain request: %d %s", r.Status, r.Raw)
				}
				return
			}

			for i := 1; i <= n; i++ {
				r := c.get(t, base+"/api/items?page=1")
				if r.Status != 200 || r.Header.Get("X-RateLimit-Remaining") != fmt.Sprint(n-i) {
					t.Fatalf("request %d: %d remaining %q %s, want 200 counted against /api/items", i, r.Status, r.Header.Get("X-RateLimit-Remaining"), r.Raw)
				}
			}
			if r := c.get(t, base+"/api/items?page=1"); r.Status != 429 || r.str("type") != "https://iana.org/assignments/http-problem-types#quota-exceeded" {
				t.Fatalf("request %d: %d %s, want 429: the spoofed path, method or address escaped the limit", n+1, r.Status, r.Raw)
			}
			if seen, _ := up.stats(); seen != n {
				t.Fatalf("the upstream saw %d requests, want %d", seen, n)
			}
			// The bucket taken is the real client's; none of the made-up
			// addresses has one.
			for ip, want := range map[string]bool{"127.0.0.2": false, "198.51.100.1": true, "198.51.100.4": true, "127.0.0.1": true} {
				r := mustStatus(t, call(t, "POST", s.base+"/v1/check", tn.Key, map[string]any{"ip": ip, "method": "GET", "path": "/api/items", "peek": true}), 200)
				if r.Body["allowed"] != want {
					t.Errorf("bucket of %s: allowed %v remaining %v, want allowed %v", ip, r.Body["allowed"], r.Body["remaining"], want)
				}
			}
		})
	}
}

// TestReverseProxySluiceDown stops Sluice behind real Caddy and nginx with
// the documented configs: both fail closed with the same 503 problem
// body, whether Sluice is gone (connection refused) or hangs (the
// configs' 5 s timeout), and nothing reaches the upstream meanwhile.
func TestReverseProxySluiceDown(t *testing.T) {
	for _, name := range []string{"caddy", "nginx"} {
		t.Run(name, func(t *testing.T) {
			requireProxy(t, name, "/usr/bin/"+name, "/usr/sbin/"+name)
			s := startServer(t, serverOpts{extra: []string{"--trusted-proxies", "127.0.0.1"}})
			tn := createTenant(t, s, "down-"+name)
			up := newUpstream(t)
			base := startProxy(t, name, s.addr, tn.Key, strings.TrimPrefix(up.URL, "http://"), nginxClearAndTimeouts)
			if r := call(t, "GET", base+"/api/items", "", nil); r.Status != 200 {
				t.Fatalf("with Sluice up: %d %s", r.Status, r.Raw)
			}
			unavailable := func(what string, within time.Duration) {
				t.Helper()
				began := time.Now()
				r := call(t, "GET", base+"/api/items", "", nil)
				if took := time.Since(began); took > within {
					t.Errorf("%s: answered after %s, want within %s", what, took, within)
				}
				if r.Status != 503 || string(r.Raw) != unavailableProblem || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
					t.Fatalf("%s: %d %q %s, want 503 with the problem body", what, r.Status, r.Header.Get("Content-Type"), r.Raw)
				}
			}
			// Hanging: the process is stopped, its socket still accepts.
			if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitStopped(t, s.cmd.Process.Pid)
			unavailable("Sluice hanging", 8*time.Second)
			if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			// Gone: nothing listens.
			s.kill()
			unavailable("Sluice stopped", 3*time.Second)
			if seen, _ := up.stats(); seen != 1 {
				t.Errorf("the upstream saw %d requests, want only the first", seen)
			}
		})
	}
}

// TestProxyConfigsMatchDocs checks that the Caddy and nginx configs the
// tests run are docs/PROXIES.md's, line for line, with the addresses and
// the service key filled in; only the test's scaffolding (global options,
// nginx's events, temp paths and listen) is its own.
func TestProxyConfigsMatchDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROXIES.md")
	if err != nil {
		t.Fatal(err)
	}
	const sluice, key, up, listen = "127.0.0.1:8080", "sk_…", "127.0.0.1:9000", "127.0.0.1:7000"
	for _, tc := range []struct {
		fence, config string
		scaffold      []string
	}{
		{"```caddyfile\n", fmt.Sprintf(caddyConfig, listen, sluice, key, up), []string{"{", "}", "admin off", "auto_https off", "http://" + listen + " {"}},
		{"```nginx\n", fmt.Sprintf(nginxConfig, listen, sluice, key, up, "", "/tmp", nginxClearAndTimeouts), []string{
			"}", "worker_processes 1;", "error_log stderr info;", "pid /tmp/nginx.pid;", "events { worker_connections 64; }", "http {", "access_log off;",
			"client_body_temp_path /tmp/body;", "proxy_temp_path /tmp/proxy;", "fastcgi_temp_path /tmp/fastcgi;", "uwsgi_temp_path /tmp/uwsgi;",
			"scgi_temp_path /tmp/scgi;", "server {", "listen " + listen + ";",
		}},
	} {
		_, block, ok := strings.Cut(string(doc), tc.fence)
		block, _, ok2 := strings.Cut(block, "```")
		if !ok || !ok2 {
			t.Fatalf("no %q block in docs/PROXIES.md", strings.TrimSpace(tc.fence))
		}
		block = strings.ReplaceAll(block, "api.example.com {", "http://"+listen+" {")
		docLines, testLines := directives(block), directives(tc.config)
		for l := range docLines {
			if !testLines[l] {
				t.Errorf("%s: docs/PROXIES.md has %q, the tested config does not", tc.fence[3:len(tc.fence)-1], l)
			}
		}
		for l := range testLines {
			if !docLines[l] && !slices.Contains(tc.scaffold, l) {
				t.Errorf("%s: the tested config has %q, docs/PROXIES.md does not", tc.fence[3:len(tc.fence)-1], l)
			}
		}
	}
}

// directives is the set of a config's trimmed lines, without comments and
// empty lines.
func directives(config string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(config, "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// waitStopped waits until the kernel reports the process stopped (state T
// in /proc/pid/stat): SIGSTOP is delivered asynchronously, and on a busy
// machine a request sent right after kill(2) returns can still be served.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("process %d to stop", pid), func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(stat, ')')
		return i >= 0 && i+2 < len(stat) && stat[i+2] == 'T'
	})
}
