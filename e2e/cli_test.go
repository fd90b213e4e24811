package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildSluice compiles cmd/sluice into the test's temp dir.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin
}

// TestSluiceCommand runs the real sluice binary against a real server, as
// a CI job would: exit codes and output are what a pipeline sees.
func TestSluiceCommand(t *testing.T) {
	bin := buildSluice(t)
	s := startServer(t, serverOpts{})
	dir := t.TempDir()

	run := func(env []string, stdin string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		// Only what the command is given: no credentials from the test's
		// own environment.
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "SLUICE_URL=" + s.base}, env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("sluice %q: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}

	code, out, errOut := run([]string{"SLUICE_OPERATOR_TOKEN=" + operatorToken, "SLUICE_OWNER_PASSWORD=a long passphrase"}, "",
		"tenants", "create", "--name", "ci", "--owner-email", "owner@ci.test")
	if code != 0 || !strings.HasPrefix(out, "sk_") {
		t.Fatalf("tenants create: %d\n%s%s", code, out, errOut)
	}
	svc := []string{"SLUICE_SERVICE_KEY=" + strings.TrimSpace(out)}

	limits := `version: 1
policies:
  - name: heavy-example
    method: GET
    path: /api/example
    query: {mode: heavy}
    tiers:
      anonymous: {algorithm: token_bucket, limit: 10, period: 60s}
      pro: {algorithm: sliding_window, limit: 1000, period: 1m}
`
	file := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(file, []byte(limits), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(svc, "", "apply", "-f", file, "--exit-code")
	if code != 3 || !strings.Contains(out, "+ policy heavy-example: create") || !strings.Contains(out, "Applied: 1 created, 0 changed, 0 deleted.") {
		t.Fatalf("first apply: exit %d, want 3 (changes made)\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(svc, "", "apply", "-f", file, "--exit-code")
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("second apply: exit %d, want 0\n%s%s", code, out, errOut)
	}

	// Drift: the dry run names the field, exits 3 and changes nothing.
	edited := strings.Replace(limits, "limit: 1000", "limit: 2000", 1)
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(svc, "", "apply", "-f", file, "--dry-run", "--exit-code")
	if code != 3 || !strings.Contains(out, "tiers.pro.limit:") || !strings.Contains(out, "1000 -> 2000") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = run(svc, "", "export")
	if code != 0 || !strings.Contains(out, "pro: {algorithm: sliding_window, limit: 1000, period: 1m}") {
		t.Fatalf("export after the dry run: exit %d\n%s", code, out)
	}
	// Export applied back is no change.
	code, out, errOut = run(svc, out, "apply", "-f", "-", "--exit-code")
	if code != 0 || !strings.Contains(out, "No changes") {
		t.Fatalf("apply of the export: exit %d\n%s%s", code, out, errOut)
	}

	// The server decides with what was applied.
	code, out, errOut = run(svc, "", "check", "--ip", "203.0.113.7", "--path", "/api/example%2ejson?mode=heavy")
	if code != 0 || !strings.Contains(out, "heavy-example") || !strings.Contains(out, `RateLimit-Policy: "heavy-example";q=10;w=60`) {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}

	// A file with problems: exit 1, every problem with its line.
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\npolicies:\n  - name: x\n    path: /x\n    tiers:\n      pro: {algorithm: token_bucket, limit: -1, period: 1s, colour: red}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(svc, "", "apply", "-f", bad)
	if code != 1 || !strings.Contains(errOut, "bad.yaml:6: policies[0].tiers.pro.colour: unknown field") || !strings.Contains(errOut, "bad.yaml:6: policies[0].tiers.pro.limit: must be at least 1") {
		t.Fatalf("bad file: exit %d\n%s", code, errOut)
	}

	// A wrong key, no key, a server that is not there.
	code, _, errOut = run([]string{"SLUICE_SERVICE_KEY=sk_notakeynotakeynotakeynotakeynotakey"}, "", "apply", "-f", file)
	if code != 1 || !strings.Contains(errOut, "the server refused the service key (SLUICE_SERVICE_KEY) (401 unauthenticated") {
		t.Fatalf("wrong key: exit %d\n%s", code, errOut)
	}
	code, _, errOut = run(nil, "", "export")
	if code != 2 || !strings.Contains(errOut, "set SLUICE_SERVICE_KEY") {
		t.Fatalf("no key: exit %d\n%s", code, errOut)
	}
	code, _, errOut = run(append(svc, "SLUICE_URL="+"http://"+freeAddr(t)), "", "export")
	if code != 1 || !strings.Contains(errOut, "cannot reach Sluice at") {
		t.Fatalf("unreachable: exit %d\n%s", code, errOut)
	}
}
