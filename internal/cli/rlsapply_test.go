package cli

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/rlsconf"
)

const edgeYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
`

// A reference file is its domain's whole configuration: applied, planned
// again with no change, changed, shrunk (the dropped node is deleted),
// exported as a file the reference loads, and left alone by limits files
// and their --prune.
func TestApplyReferenceFile(t *testing.T) {
	env := tenant(t, "envoy")
	if r := sluice(t, env, "", "apply", "-f", write(t, "edge.yaml", edgeYAML)); r.code != 0 || !has(r.stdout, "Applied: 3 created, 0 changed, 0 deleted.") {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ps := policies(t, env)
	if d, ok := ps["edge.path.user"]["descriptor"].(map[string]any); !ok || d["requests_per_unit"] != 100.0 || d["unit"] != "HOUR" {
		t.Fatalf("edge.path.user: %v", ps["edge.path.user"])
	}
	if r := sluice(t, env, "", "apply", "-f", write(t, "edge.yaml", edgeYAML), "--dry-run", "--exit-code"); r.code != 0 || !has(r.stdout, "No changes: domain \"edge\"") {
		t.Fatalf("apply again: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	changed := strings.Replace(edgeYAML, "requests_per_unit: 5}", "requests_per_unit: 7}", 1)
	if r := sluice(t, env, "", "apply", "-f", write(t, "edge.yaml", changed), "--dry-run", "--exit-code"); r.code != ExitChanges || !has(r.stdout, "tiers.default.limit: 5 -> 7") {
		t.Fatalf("dry run of a change: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A limits file of the same tenant neither lists nor prunes the
	// domain's rules.
	if r := sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", limitsYAML), "--prune"); r.code != 0 || strings.Contains(r.stdout, "edge.") {
		t.Fatalf("limits file with --prune: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := sluice(t, env, "", "export", "--keys=false"); r.code != 0 || strings.Contains(r.stdout, "edge.") {
		t.Fatalf("limits export shows descriptor rules: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	shrunk := "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 7}\n"
	if r := sluice(t, env, "", "apply", "-f", write(t, "edge.yaml", shrunk)); r.code != 0 || !has(r.stdout, "Applied: 0 created, 1 changed, 2 deleted.") {
		t.Fatalf("apply shrunk: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := sluice(t, env, "", "export", "--domain", "edge")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	f, err := rlsconf.Parse("export.yaml", []byte(r.stdout))
	if err != nil || f.Domain != "edge" || len(f.Descriptors) != 1 || f.Descriptors[0].RateLimit.RequestsPerUnit != 7 {
		t.Fatalf("export does not read back: %v\n%s", err, r.stdout)
	}
	if r := sluice(t, env, "", "export", "--domain", "nope"); r.code == 0 {
		t.Fatalf("export of an unknown domain: %d\n%s", r.code, r.stdout)
	}
	// HTTP policies stay.
	if _, ok := policies(t, env)["heavy-example"]; !ok {
		t.Fatal("the limits file's policy is gone")
	}
}

// A file with Sluice's own fields exports only with --extras.
func TestExportExtras(t *testing.T) {
	env := tenant(t, "envoy-extras")
	text := "domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 600}\n    sluice: {algorithm: sliding_window}\n"
	if r := sluice(t, env, "", "apply", "-f", write(t, "api.yaml", text)); r.code != 0 {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := sluice(t, env, "", "export", "--domain", "api"); r.code == 0 || !strings.Contains(r.stderr, "--extras") {
		t.Fatalf("export without --extras: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r := sluice(t, env, "", "export", "--domain", "api", "--extras")
	if r.code != 0 || !strings.Contains(r.stdout, "sliding_window") {
		t.Fatalf("export --extras: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A file the reference refuses changes nothing and names every problem.
func TestApplyReferenceProblems(t *testing.T) {
	env := tenant(t, "envoy-bad")
	bad := "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - kee: b\n"
	r := sluice(t, env, "", "apply", "-f", write(t, "bad.yaml", bad))
	if r.code == 0 {
		t.Fatalf("bad file applied:\n%s", r.stdout)
	}
	for _, want := range []string{"bad.yaml:4", "bad.yaml:5", "bad.yaml:7"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("problems lack %s:\n%s", want, r.stderr)
		}
	}
	for name := range policies(t, env) {
		t.Errorf("a refused file made policy %s", name)
	}
}

// A reference file is told from a limits file by its top-level keys, also
// when it has no domain (refused for that, by name) or repeats a key; a
// limits file stays one.
func TestIsReferenceConfig(t *testing.T) {
	for _, c := range []struct {
		text string
		want bool
	}{
		{"domain: edge\ndescriptors: []\n", true},
		{"domain: \"\"\n", true},
		{"descriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n", true},
		{"domain: a\ndomain: b\n", true},
		{"version: 1\npolicies: []\n", false},
		{"- a\n", false},
		{"", false},
	} {
		if got := isReferenceConfig([]byte(c.text)); got != c.want {
			t.Errorf("%q: reference %v, want %v", c.text, got, c.want)
		}
	}
	_, err := rlsconf.Parse("nodomain.yaml", []byte("descriptors:\n  - key: a\n"))
	if err == nil || !strings.Contains(err.Error(), "empty domain") {
		t.Fatalf("a file without a domain: %v, want the empty domain named", err)
	}
}
