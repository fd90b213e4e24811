package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/limitsfile"
)

const opToken = "op_cli_test_token_0123456789abcdef"

// One real server (embedded NATS, SQLite in a temp dir) serves every test
// of the package; each test works in its own tenant.
var shared struct {
	once sync.Once
	m    *app.Main
	dir  string
	err  error
}

func server(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-cli-test-")
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		cfg := app.DefaultConfig()
		cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", dir, "clitest", opToken
		cfg.Webhooks.AllowPrivate = true // sluice webhooks points one at loopback
		m := app.NewMain(cfg, slog.New(slog.DiscardHandler))
		m.Out = io.Discard
		if shared.err = m.Run(context.Background()); shared.err != nil {
			return
		}
		shared.m = m
		deadline := time.Now().Add(60 * time.Second)
		for !m.Engine().Ready() {
			if time.Now().After(deadline) {
				shared.err = io.ErrNoProgress
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if shared.err != nil {
		t.Fatalf("boot: %v", shared.err)
	}
	return "http://" + shared.m.Addr()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.m != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = shared.m.Close(ctx)
		cancel()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// result is one run of the command.
type result struct {
	code           int
	stdout, stderr string
}

// sluice runs the command with env as its whole environment.
func sluice(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := Run(ctx, args, IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	return result{code, out.String(), errb.String()}
}

// tenant creates a tenant with the tenants verb and answers the
// environment its tenant verbs run with.
func tenant(t *testing.T, name string) map[string]string {
	t.Helper()
	base := server(t)
	r := sluice(t, map[string]string{"SLUICE_URL": base, "SLUICE_OPERATOR_TOKEN": opToken, "SLUICE_OWNER_PASSWORD": "a long passphrase"}, "",
		"tenants", "create", "--name", name, "--owner-email", "owner@"+name+".test")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "sk_") {
		t.Fatalf("tenants create: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return map[string]string{"SLUICE_URL": base, "SLUICE_SERVICE_KEY": strings.TrimSpace(r.stdout)}
}

// api sends one request to the server, outside the command, to see what
// it holds.
func api(t *testing.T, env map[string]string, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, env["SLUICE_URL"]+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token == "" {
		token = env["SLUICE_SERVICE_KEY"]
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// policies answers the tenant's policies by name, as the API shows them.
func policies(t *testing.T, env map[string]string) map[string]map[string]any {
	t.Helper()
	status, body := api(t, env, "GET", "/v1/policies", "", nil)
	if status != 200 {
		t.Fatalf("GET /v1/policies: %d %v", status, body)
	}
	out := map[string]map[string]any{}
	for _, p := range body["policies"].([]any) {
		p := p.(map[string]any)
		out[p["name"].(string)] = p
	}
	return out
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const limitsYAML = `version: 1
policies:
  - name: heavy-example
    method: GET
    path: /api/example
    query: {mode: heavy}
    tiers:
      anonymous: {algorithm: token_bucket, limit: 10, period: 60s}
      pro:
        - {name: burst, algorithm: token_bucket, limit: 100, period: 1s, burst: 20}
        - {name: daily, algorithm: fixed_window, limit: 100000, period: 1d}
  - name: search
    path: /api/search/*
    consistency: local
    unlisted_tiers: deny
    tiers:
      default: {algorithm: sliding_window, limit: 100, period: 1m}
`

var spaces = regexp.MustCompile(` +`)

// has reports whether out holds want, runs of spaces counting as one (the
// plan aligns its fields).
func has(out, want string) bool {
	return strings.Contains(spaces.ReplaceAllString(out, " "), spaces.ReplaceAllString(want, " "))
}

// fieldLines are the indented field lines of a plan's output.
func fieldLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "    ") {
			lines = append(lines, spaces.ReplaceAllString(strings.TrimSpace(l), " "))
		}
	}
	return lines
}

func TestApplyLifecycle(t *testing.T) {
	env := tenant(t, "lifecycle")
	file := write(t, "limits.yaml", limitsYAML)

	// An empty tenant gets both policies, with every setting.
	r := sluice(t, env, "", "apply", "-f", file)
	if r.code != 0 {
		t.Fatalf("first apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"+ policy heavy-example: create", "+ policy search: create", "tiers.pro[daily].period: 1d", "Applied: 2 created, 0 changed, 0 deleted."} {
		if !has(r.stdout, want) {
			t.Errorf("first apply does not say %q:\n%s", want, r.stdout)
		}
	}
	ps := policies(t, env)
	if len(ps) != 2 {
		t.Fatalf("the tenant has %d policies, want 2: %v", len(ps), ps)
	}
	s := ps["search"]
	if s["consistency"] != "local" || s["unlisted_tiers"] != "deny" || s["method"] != "*" || s["path"] != "/api/search/*" {
		t.Errorf("search as stored: %v", s)
	}
	h := ps["heavy-example"]
	if q := h["query"].(map[string]any); q["mode"] != "heavy" {
		t.Errorf("heavy-example query: %v", h["query"])
	}
	if pro := h["tiers"].(map[string]any)["pro"].([]any); len(pro) != 2 || pro[0].(map[string]any)["burst"] != 20.0 {
		t.Errorf("heavy-example pro tier: %v", pro)
	}
	ids := map[string]any{"heavy-example": h["id"], "search": s["id"]}

	// The same file again changes nothing and says so.
	r = sluice(t, env, "", "apply", "-f", file, "--exit-code")
	if r.code != 0 || !has(r.stdout, "No changes") {
		t.Fatalf("second apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if after := policies(t, env); after["search"]["updated_at"] != s["updated_at"] || after["heavy-example"]["updated_at"] != h["updated_at"] {
		t.Errorf("a no-change apply wrote policies: %v -> %v", ps, after)
	}

	// One limit edited: the dry run shows exactly that field and changes
	// nothing; --exit-code reports the drift.
	edited := strings.Replace(limitsYAML, "limit: 10, period: 60s", "limit: 20, period: 60s", 1)
	file2 := write(t, "limits.yaml", edited)
	r = sluice(t, env, "", "apply", "-f", file2, "--dry-run", "--exit-code")
	if r.code != ExitChanges {
		t.Fatalf("dry run with a change: exit %d, want %d\n%s%s", r.code, ExitChanges, r.stdout, r.stderr)
	}
	if got := fieldLines(r.stdout); len(got) != 1 || got[0] != "tiers.anonymous.limit: 10 -> 20" {
		t.Errorf("dry run fields = %q, want just the anonymous limit:\n%s", got, r.stdout)
	}
	if !has(r.stdout, "~ policy heavy-example: change") || !has(r.stdout, "Plan: 0 to create, 1 to change, 0 to delete.") {
		t.Errorf("dry run output:\n%s", r.stdout)
	}
	if lim := policies(t, env)["heavy-example"]["tiers"].(map[string]any)["anonymous"].(map[string]any)["limit"]; lim != 10.0 {
		t.Fatalf("the dry run changed the limit to %v", lim)
	}
	r = sluice(t, env, "", "apply", "-f", file2)
	if r.code != 0 || !has(r.stdout, "Applied: 0 created, 1 changed, 0 deleted.") {
		t.Fatalf("apply the edit: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	after := policies(t, env)
	if lim := after["heavy-example"]["tiers"].(map[string]any)["anonymous"].(map[string]any)["limit"]; lim != 20.0 {
		t.Fatalf("after apply the limit is %v, want 20", lim)
	}
	if after["heavy-example"]["id"] != ids["heavy-example"] {
		t.Errorf("the policy was replaced, not updated in place")
	}
	// The server enforces it: the 21st check of a minute is denied.
	for i := 1; i <= 21; i++ {
		r = sluice(t, env, "", "check", "--ip", "203.0.113.7", "--path", "/api/example?mode=heavy", "--exit-code")
		if want := map[bool]int{true: 0, false: ExitChanges}[i <= 20]; r.code != want {
			t.Fatalf("check %d: exit %d, want %d\n%s%s", i, r.code, want, r.stdout, r.stderr)
		}
	}
	for _, want := range []string{"decision     denied", "reason       rate_limited", "policy       heavy-example", "identity     ip 203.0.113.7", `RateLimit-Policy: "heavy-example";q=20;w=60`, "Retry-After: "} {
		if !has(r.stdout, want) {
			t.Errorf("the denied check does not print %q:\n%s", want, r.stdout)
		}
	}

	// A policy the file does not name is listed and kept, and pruned with
	// --prune.
	if status, body := api(t, env, "POST", "/v1/policies", "", map[string]any{"name": "legacy", "path": "/old",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "fixed_window", "limit": 5, "period": "1h"}}}); status != 201 {
		t.Fatalf("create legacy: %d %v", status, body)
	}
	r = sluice(t, env, "", "apply", "-f", file2)
	if r.code != 0 || !has(r.stdout, "? policy legacy: not in file, left alone (--prune deletes it)") || !has(r.stdout, "No changes") {
		t.Fatalf("apply without prune:\n%s%s", r.stdout, r.stderr)
	}
	if _, ok := policies(t, env)["legacy"]; !ok {
		t.Fatal("apply without --prune deleted legacy")
	}
	r = sluice(t, env, "", "apply", "-f", file2, "--prune", "--dry-run")
	if r.code != 0 || !has(r.stdout, "- policy legacy: delete") {
		t.Fatalf("prune dry run:\n%s%s", r.stdout, r.stderr)
	}
	if _, ok := policies(t, env)["legacy"]; !ok {
		t.Fatal("a dry run pruned legacy")
	}
	r = sluice(t, env, "", "apply", "-f", file2, "--prune")
	if r.code != 0 || !has(r.stdout, "Applied: 0 created, 0 changed, 1 deleted.") {
		t.Fatalf("apply --prune: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ps := policies(t, env); len(ps) != 2 || ps["legacy"] != nil {
		t.Fatalf("after prune: %v", ps)
	}

	// Export writes the normalized input, and applying it changes nothing.
	r = sluice(t, env, "", "export", "--keys=false")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s", r.code, r.stderr)
	}
	in, err := limitsfile.Parse("limits.yaml", []byte(edited), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want, err := limitsfile.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != string(want) {
		t.Errorf("export differs from the normalized input:\n--- export\n%s--- normalized input\n%s", r.stdout, want)
	}
	r = sluice(t, env, r.stdout, "apply", "-f", "-", "--exit-code")
	if r.code != 0 || !regexp.MustCompile(`No changes: tenant ten_\w+ at `+regexp.QuoteMeta(env["SLUICE_URL"])+` already matches stdin\.`).MatchString(r.stdout) {
		t.Fatalf("apply of the export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestApplyFileProblems(t *testing.T) {
	env := tenant(t, "problems")
	bad := `version: 1
policies:
  - name: api
    path: /api/*
    colour: blue
    tiers:
      pro: {algorithm: token_bucket, limit: 0, period: 60s}
      free: {algorithm: token_bucket, limit: ten, period: 1m}
  - name: api
    path: /other
    tiers:
      default: {algorithm: leaky_bucket, limit: 5, period: 5 minutes}
`
	file := write(t, "limits.yaml", bad)
	r := sluice(t, env, "", "apply", "-f", file)
	if r.code != ExitError {
		t.Fatalf("exit %d, want %d\n%s%s", r.code, ExitError, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"limits.yaml:5: policies[0].colour: unknown field",
		"limits.yaml:7: policies[0].tiers.pro.limit: must be at least 1",
		"limits.yaml:8: policies[0].tiers.free.limit: must be an integer",
		`limits.yaml:9: policies[1].name: "api" is used twice (also policies[0])`,
		"limits.yaml:12: policies[1].tiers.default.algorithm: must be one of token_bucket, sliding_window, sliding_log, fixed_window",
		`limits.yaml:12: policies[1].tiers.default.period: must be a duration such as "60s" or "1m"`,
		"6 problems in the file; nothing was applied",
	} {
		if !has(r.stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
		}
	}
	if ps := policies(t, env); len(ps) != 0 {
		t.Fatalf("a file with problems applied %d policies", len(ps))
	}

	// A key's tier that no policy defines, an override of an unknown
	// policy, and a key the tenant does not have.
	r = sluice(t, env, "", "apply", "-f", write(t, "keys.yaml", `version: 1
policies:
  - {name: api, path: /api, tiers: {pro: {algorithm: token_bucket, limit: 5, period: 1s}}}
keys:
  - id: ckey_doesnotexist
    tier: gold
    overrides:
      nope: {algorithm: token_bucket, limit: 1, period: 1s}
`))
	for _, want := range []string{
		`keys.yaml:6: keys[0].tier: "gold" is a tier no policy in this file defines`,
		"keys.yaml:8: keys[0].overrides.nope: no policy in this file has this name",
	} {
		if r.code != ExitError || !has(r.stderr, want) {
			t.Errorf("exit %d, stderr does not say %q:\n%s", r.code, want, r.stderr)
		}
	}
	r = sluice(t, env, "", "apply", "-f", write(t, "keys.yaml", `version: 1
policies:
  - {name: api, path: /api, tiers: {pro: {algorithm: token_bucket, limit: 5, period: 1s}}}
keys:
  - id: ckey_doesnotexist
`))
	if r.code != ExitError || !has(r.stderr, `keys.yaml:5: keys[0].id: the tenant has no active consumer key "ckey_doesnotexist"`) {
		t.Errorf("unknown key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ps := policies(t, env); len(ps) != 0 {
		t.Fatalf("a file naming an unknown key applied %d policies", len(ps))
	}

	// Not YAML, no version, a wrong version.
	for text, want := range map[string]string{
		"version: 1\npolicies: [\n": "limits.yaml:",
		"policies: []\n":            "limits.yaml:1: version: required",
		"version: 2\n":              "limits.yaml:1: version: must be 1",
		"":                          "limits.yaml:1: version: required",
	} {
		r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", text))
		if r.code != ExitError || !has(r.stderr, want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", text, r.code, r.stderr, want)
		}
	}
}

func TestCredentialAndServerErrors(t *testing.T) {
	env := tenant(t, "errors")
	file := write(t, "limits.yaml", limitsYAML)

	r := sluice(t, map[string]string{"SLUICE_URL": env["SLUICE_URL"], "SLUICE_SERVICE_KEY": "sk_wrongwrongwrongwrongwrongwrongwrong"}, "", "apply", "-f", file)
	if r.code != ExitError || !has(r.stderr, "the server refused the service key (SLUICE_SERVICE_KEY) (401 unauthenticated: The service key is unknown or revoked.)") {
		t.Errorf("wrong key: exit %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, map[string]string{"SLUICE_URL": env["SLUICE_URL"], "SLUICE_OPERATOR_TOKEN": "op_wrong"}, "", "tenants")
	if r.code != ExitError || !has(r.stderr, "refused the operator token (SLUICE_OPERATOR_TOKEN) (401") {
		t.Errorf("wrong operator token: exit %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, map[string]string{"SLUICE_URL": env["SLUICE_URL"]}, "", "apply", "-f", file)
	if r.code != ExitUsage || !has(r.stderr, "set SLUICE_SERVICE_KEY") {
		t.Errorf("no key: exit %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, map[string]string{"SLUICE_URL": "http://127.0.0.1:1", "SLUICE_SERVICE_KEY": env["SLUICE_SERVICE_KEY"]}, "", "export")
	if r.code != ExitError || !has(r.stderr, "cannot reach Sluice at http://127.0.0.1:1") {
		t.Errorf("unreachable: exit %d\n%s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"frobnicate"}, {"apply"}, {"apply", "-f", file, "--nope"}, {"keys", "rotate"}, {"check"}} {
		if r = sluice(t, env, "", args...); r.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d\n%s", args, r.code, ExitUsage, r.stderr)
		}
	}

	// The server's refusal of a bad request is shown as it answered.
	r = sluice(t, env, "", "keys", "create", "--name", "app", "--tier", "Gold Plan")
	if r.code != ExitError || !has(r.stderr, "sluice keys: POST /v1/keys: 400 invalid_request: tier: must be 1 to 32 characters of a-z, 0-9, _ and -") {
		t.Errorf("server refusal: exit %d\n%s", r.code, r.stderr)
	}
	// A key name the server would refuse is the file's problem, found
	// before anything is sent.
	r = sluice(t, env, "", "keys", "create", "--name", "app", "--tier", "pro")
	if r.code != 0 {
		t.Fatalf("keys create: %d\n%s", r.code, r.stderr)
	}
	id := regexp.MustCompile(`ckey_[A-Za-z0-9]+`).FindString(r.stderr)
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", limitsYAML+"keys:\n  - {id: "+id+", name: "+strings.Repeat("n", 200)+"}\n"))
	if r.code != ExitError || !has(r.stderr, "limits.yaml:19: keys[0].name: must be at most 128 characters") {
		t.Errorf("long key name: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A write the server refuses in the middle of an apply (here another
// writer created a policy of the same name since the plan was made) stops
// the run with the server's answer; what was done before stays done and
// the next apply finishes the job.
func TestApplyStopsAtARefusal(t *testing.T) {
	env := tenant(t, "race")
	target, err := url.Parse(env["SLUICE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/policies" && posts.Add(1) == 2 {
			// The second create (search) races with another writer.
			status, body := api(t, env, "POST", "/v1/policies", "", map[string]any{"name": "search", "path": "/elsewhere",
				"tiers": map[string]any{"default": map[string]any{"algorithm": "fixed_window", "limit": 1, "period": "1s"}}})
			if status != 201 {
				t.Errorf("the racing create: %d %v", status, body)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	viaProxy := map[string]string{"SLUICE_URL": front.URL, "SLUICE_SERVICE_KEY": env["SLUICE_SERVICE_KEY"]}
	file := write(t, "limits.yaml", limitsYAML)
	r := sluice(t, viaProxy, "", "apply", "-f", file)
	if r.code != ExitError || !has(r.stdout, "Stopped after 1 of 2 changes.") ||
		!has(r.stderr, `sluice apply: policy search: POST /v1/policies: 409 conflict: a policy named "search" already exists`) ||
		!has(r.stderr, "1 of the 2 changes were made before it") {
		t.Fatalf("apply during a race: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ps := policies(t, env); ps["heavy-example"] == nil || ps["search"]["path"] != "/elsewhere" {
		t.Fatalf("after the refusal: %v", ps)
	}
	r = sluice(t, env, "", "apply", "-f", file)
	if r.code != 0 || !has(r.stdout, "~ policy search: change") || !has(r.stdout, "path: /elsewhere -> /api/search/*") {
		t.Fatalf("apply again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A block whose reason changes is made again before the old one is
// lifted, so the identity is blocked at every moment of the apply; a
// second block on an identity the file names is deleted.
func TestApplyReplacesABlockWithoutLiftingIt(t *testing.T) {
	env := tenant(t, "reblock")
	env["SLUICE_OPERATOR_TOKEN"] = opToken
	const ip = "198.51.100.77"
	blocksOfIP := func() []map[string]any {
		status, body := api(t, env, "GET", "/v1/admin/blocks", opToken, nil)
		if status != 200 {
			t.Fatalf("list blocks: %d %v", status, body)
		}
		var out []map[string]any
		for _, b := range body["blocks"].([]any) {
			b := b.(map[string]any)
			if b["identity"].(map[string]any)["id"] == ip {
				out = append(out, b)
			}
		}
		return out
	}
	file := func(reason string) string {
		return write(t, "limits.yaml", limitsYAML+"blocks:\n  - identity: {kind: ip, id: "+ip+"}\n    reason: "+reason+"\n")
	}
	if r := sluice(t, env, "", "apply", "-f", file("scraping")); r.code != 0 {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Every lift is watched: when it arrives, another block must hold the IP.
	target, err := url.Parse(env["SLUICE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	var deletes atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/admin/blocks/"); ok && r.Method == "DELETE" {
			deletes.Add(1)
			others := 0
			for _, b := range blocksOfIP() {
				if b["id"] != id {
					others++
				}
			}
			if others == 0 {
				t.Errorf("DELETE of block %s leaves %s unblocked", id, ip)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	viaProxy := maps.Clone(env)
	viaProxy["SLUICE_URL"] = front.URL

	r := sluice(t, viaProxy, "", "apply", "-f", file("credential stuffing"))
	if r.code != 0 || !has(r.stdout, "-/+ block ip "+ip+": replace") || !has(r.stdout, "Applied: 0 created, 1 changed, 0 deleted.") {
		t.Fatalf("replace: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if bs := blocksOfIP(); len(bs) != 1 || bs[0]["reason"] != "credential stuffing" {
		t.Fatalf("after the replace the IP's blocks are %v", bs)
	}

	// A second block on the IP (as a replace stopped between its two
	// writes leaves) is deleted; the one that matches the file stays.
	tenantID := blocksOfIP()[0]["tenant_id"]
	status, body := api(t, env, "POST", "/v1/admin/blocks", opToken, map[string]any{"tenant_id": tenantID,
		"identity": map[string]any{"kind": "ip", "id": ip}, "reason": "a second one"})
	if status != 201 {
		t.Fatalf("second block: %d %v", status, body)
	}
	r = sluice(t, viaProxy, "", "apply", "-f", file("credential stuffing"))
	if r.code != 0 || !has(r.stdout, "- block ip "+ip+" (another block, "+body["id"].(string)+"): delete") || !has(r.stdout, "Applied: 0 created, 0 changed, 1 deleted.") {
		t.Fatalf("second block: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if bs := blocksOfIP(); len(bs) != 1 || bs[0]["reason"] != "credential stuffing" {
		t.Fatalf("after the apply the IP's blocks are %v", bs)
	}
	if deletes.Load() != 2 {
		t.Errorf("%d block deletes went through the proxy, want 2", deletes.Load())
	}
}

func TestKeysOverridesAndBlocks(t *testing.T) {
	env := tenant(t, "keysblocks")
	r := sluice(t, env, "", "keys", "create", "--name", "mobile app", "--tier", "pro", "--expires-at", "2099-01-01T00:00:00Z")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ck_") {
		t.Fatalf("keys create: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	secret := strings.TrimSpace(r.stdout)
	id := regexp.MustCompile(`ckey_[A-Za-z0-9]+`).FindString(r.stderr)
	r = sluice(t, env, "", "keys", "create", "--name", "other", "--tier", "free")
	other := regexp.MustCompile(`ckey_[A-Za-z0-9]+`).FindString(r.stderr)
	r = sluice(t, env, "", "keys")
	if r.code != 0 || !has(r.stdout, id) || !has(r.stdout, "mobile app") || !has(r.stdout, "2099-01-01T00:00:00Z") {
		t.Fatalf("keys list: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	file := limitsYAML + `keys:
  - id: ` + id + `
    tier: pro
    overrides:
      search: {algorithm: sliding_window, limit: 1000, period: 1m}
blocks:
  - identity: {kind: ip, id: 198.51.100.9}
    reason: scraping
`
	env["SLUICE_OPERATOR_TOKEN"] = ""
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", file))
	if r.code != ExitUsage || !has(r.stderr, "the file's blocks section needs the operator: set SLUICE_OPERATOR_TOKEN") {
		t.Fatalf("blocks without the operator: %d\n%s", r.code, r.stderr)
	}
	env["SLUICE_OPERATOR_TOKEN"] = opToken
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", file))
	if r.code != 0 {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"~ key " + id + " (mobile app): change", "overrides.search.limit:     (none) -> 1000", "+ block ip 198.51.100.9: create", "Applied: 3 created, 1 changed, 0 deleted."} {
		if !has(r.stdout, want) {
			t.Errorf("apply does not say %q:\n%s", want, r.stdout)
		}
	}
	// The override and the block are enforced.
	r = sluice(t, env, "", "check", "--api-key", secret, "--path", "/api/search/q", "--peek")
	if !has(r.stdout, "limit        1000") {
		t.Errorf("check with the overridden key:\n%s%s", r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "check", "--ip", "198.51.100.9", "--path", "/api/search/q")
	if !has(r.stdout, "reason       blocked") {
		t.Errorf("check of the blocked IP:\n%s%s", r.stdout, r.stderr)
	}

	// Export with keys and blocks reads back as no change.
	r = sluice(t, env, "", "export", "--blocks")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s", r.code, r.stderr)
	}
	exported := r.stdout
	for _, want := range []string{"id: " + id, "name: mobile app", "search: {algorithm: sliding_window, limit: 1000, period: 1m}", "identity: {kind: ip, id: 198.51.100.9}", "id: " + other} {
		if !has(exported, want) {
			t.Errorf("export does not hold %q:\n%s", want, exported)
		}
	}
	r = sluice(t, env, exported, "apply", "-f", "-", "--exit-code")
	if r.code != 0 || !has(r.stdout, "No changes") {
		t.Fatalf("apply of the export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Changing a block's reason replaces it; pruning drops what the file
	// no longer names: the override, the block and a key's override.
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", strings.Replace(file, "reason: scraping", "reason: credential stuffing", 1)))
	if r.code != 0 || !has(r.stdout, "-/+ block ip 198.51.100.9: replace") || !has(r.stdout, "reason:     scraping -> credential stuffing") {
		t.Fatalf("block change: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", limitsYAML+"keys: []\nblocks: []\n"))
	if r.code != 0 || !has(r.stdout, "? key "+id+" (mobile app): not in file, left alone (--prune removes its overrides)") || !has(r.stdout, "? block ip 198.51.100.9: not in file") {
		t.Fatalf("not in file: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", limitsYAML+"keys: []\nblocks: []\n"), "--prune")
	if r.code != 0 || !has(r.stdout, "Applied: 0 created, 1 changed, 1 deleted.") {
		t.Fatalf("prune keys and blocks: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	_, k := api(t, env, "GET", "/v1/keys/"+id, "", nil)
	if k["overrides"] != nil || k["tier"] != "pro" {
		t.Errorf("after prune the key is %v", k)
	}
	_, bs := api(t, env, "GET", "/v1/admin/blocks", opToken, nil)
	for _, b := range bs["blocks"].([]any) {
		if b.(map[string]any)["identity"].(map[string]any)["id"] == "198.51.100.9" {
			t.Errorf("the block survived --prune: %v", b)
		}
	}

	// Revoke.
	r = sluice(t, env, "", "keys", "revoke", other)
	if r.code != 0 || !has(r.stdout, "Revoked consumer key "+other) {
		t.Fatalf("revoke: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "keys")
	if !regexp.MustCompile(other + `.*revoked`).MatchString(r.stdout) {
		t.Errorf("keys list after revoke:\n%s", r.stdout)
	}
	r = sluice(t, env, "", "tenants")
	if r.code != 0 || !has(r.stdout, "keysblocks") {
		t.Errorf("tenants: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// sluice abuse and sluice usage answer without a range: the last 24 hours
// and this month, each saying which range it read.
func TestAbuseAndUsageDefaults(t *testing.T) {
	env := tenant(t, "reports")
	file := write(t, "limits.yaml", `version: 1
policies:
  - name: tight
    path: /api/tight
    tiers:
      anonymous: {algorithm: fixed_window, limit: 1, period: 1h}
`)
	if r := sluice(t, env, "", "apply", "-f", file); r.code != 0 {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for range 3 {
		if r := sluice(t, env, "", "check", "--path", "/api/tight", "--ip", "198.51.100.77"); r.code != 0 {
			t.Fatalf("check: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	op := map[string]string{"SLUICE_URL": env["SLUICE_URL"], "SLUICE_OPERATOR_TOKEN": opToken}
	if r := sluice(t, env, "", "abuse"); r.code != ExitUsage || !strings.Contains(r.stderr, "SLUICE_OPERATOR_TOKEN") {
		t.Errorf("abuse without the operator: %d %s", r.code, r.stderr)
	}
	deadline := time.Now().Add(20 * time.Second)
	var abuse, usage result
	for {
		abuse = sluice(t, op, "", "abuse", "--since", "1h")
		usage = sluice(t, env, "", "usage")
		if (strings.Contains(abuse.stdout, "198.51.100.77") && strings.Contains(usage.stdout, "tight")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if abuse.code != 0 || !strings.HasPrefix(abuse.stdout, "Denials from ") || !has(abuse.stdout, "reports ip 198.51.100.77 2 1 67%") {
		t.Errorf("abuse --since 1h: %d\n%s%s", abuse.code, abuse.stdout, abuse.stderr)
	}
	month := time.Now().UTC().Format("2006-01")
	if usage.code != 0 || !strings.HasPrefix(usage.stdout, "Usage from "+month+"-01 to ") || !has(usage.stdout, "(callers without a key) tight 1") {
		t.Errorf("usage: %d\n%s%s", usage.code, usage.stdout, usage.stderr)
	}
	if r := sluice(t, op, "", "abuse", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"from":`) {
		t.Errorf("abuse --json: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := sluice(t, env, "", "usage", "--group", "policy", "--month", month); r.code != 0 || !has(r.stdout, "tight 1") {
		t.Errorf("usage --group policy --month: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := sluice(t, op, "", "abuse", "--since", "1h", "--to", "2027-01-01T00:00:00Z"); r.code != ExitUsage {
		t.Errorf("abuse --since with --to: %d %s", r.code, r.stderr)
	}
}
