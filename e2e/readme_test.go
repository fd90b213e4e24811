package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
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

// CI must run exactly the README's test command: the quick start's second
// line is, character for character, .ci/run's last line.
func TestCIRunsReadmeTestCommand(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, quick, ok := strings.Cut(string(readme), "## Quick start\n\n```sh\n")
	if !ok {
		t.Fatal("README has no quick start block")
	}
	lines := strings.Split(quick, "\n")
	if len(lines) < 2 || lines[0] != "go run ./cmd/server" {
		t.Fatalf("quick start does not open with go run ./cmd/server: %q", lines[0])
	}
	testCmd := lines[1]
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	ciLines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := ciLines[len(ciLines)-1]; last != testCmd {
		t.Fatalf(".ci/run ends with %q, README's test command is %q", last, testCmd)
	}
}

// The quick start shows what a first start prints, as a real first start
// prints it: the banner, then the setup link; it names --demo, shows the
// committed screenshot and the test runner's summary line.
func TestReadmeFirstScreen(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, quick, _ := strings.Cut(string(readme), "## Quick start\n")
	quick, _, _ = strings.Cut(quick, "\n## ")
	for _, want := range []string{
		"\n  API        http://127.0.0.1:8080/v1\n  Dashboard  http://127.0.0.1:8080/ui\n  Data       ",
		"\n  No operator login yet. Choose one at this one-time link:\n  http://127.0.0.1:8080/ui/setup?token=st_",
		"go run ./cmd/server --demo",
		"](docs/img/dashboard.png)",
	} {
		if !strings.Contains(quick, want) {
			t.Errorf("the quick start lacks %q", want)
		}
	}
	if !regexp.MustCompile(`\nDONE \d+ tests(, \d+ skipped)? in \d+\.\d+s\n`).MatchString(quick) {
		t.Errorf("the quick start lacks the runner's summary line (DONE <n> tests in <seconds>s)")
	}
	png, err := os.ReadFile("../docs/img/dashboard.png")
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("docs/img/dashboard.png is no PNG: %v", err)
	}

	// A real first start prints the banner and the link as shown.
	s := startServer(t, serverOpts{})
	link := regexp.MustCompile(`\n  Data       [^\n]+\n\n  No operator login yet\. Choose one at this one-time link:\n  http://127\.0\.0\.1:\d+/ui/setup\?token=st_\w+\n`)
	waitFor(t, 20*time.Second, "the banner with the setup link", func() bool { return link.MatchString(s.logs.String()) })
}
