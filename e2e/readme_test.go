package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The README's curl walk-through runs verbatim against a real server.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed; .ci/run installs it")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	_, rest, ok := strings.Cut(text, "<!-- walkthrough:begin -->")
	block, _, ok2 := strings.Cut(rest, "<!-- walkthrough:end -->")
	if !ok || !ok2 {
		t.Fatal("README has no walkthrough markers")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	block = strings.TrimSuffix(block, "```")

	s := startServer(t, serverOpts{})
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(os.Environ(), "SLUICE="+s.base, "OPERATOR_TOKEN="+operatorToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough failed: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		`"name":"heavy-example"`, // policy created
		`"allowed":true,"reason":"ok","policy":"heavy-example","tier":"pro"`, // key check
		`"allowed":false,"reason":"rate_limited"`,                            // the 11th IP check
		`Ratelimit-Policy: "heavy-example";q=10;w=60`,                        // headers
		`Retry-After: `,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("walkthrough output lacks %q:\n%s", want, got)
		}
	}
}
