package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// No container engine runs here, so the compose file is checked against the
// binaries instead: every service exists, NATS is the official image with
// JetStream on, every command is one the binaries accept (--check-config),
// and each service has a healthcheck and a volume. The same topology runs
// as processes in cluster_test.go.
func TestComposeFileMatchesBinaries(t *testing.T) {
	t.Parallel()
	server, worker := build(t)
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string         `yaml:"image"`
			Build       any            `yaml:"build"`
			Command     []string       `yaml:"command"`
			Healthcheck map[string]any `yaml:"healthcheck"`
			Volumes     []string       `yaml:"volumes"`
			Environment map[string]any `yaml:"environment"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nats", "worker", "server-1", "server-2"} {
		svc, ok := compose.Services[name]
		if !ok {
			t.Errorf("service %s missing", name)
			continue
		}
		if svc.Healthcheck == nil {
			t.Errorf("%s: no healthcheck", name)
		}
		if len(svc.Volumes) == 0 {
			t.Errorf("%s: no volume", name)
		}
		for _, v := range svc.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := compose.Volumes[vol]; !ok {
				t.Errorf("%s: volume %s is not declared", name, vol)
			}
		}
	}
	nats := compose.Services["nats"]
	if !strings.HasPrefix(nats.Image, "nats:") || !contains(nats.Command, "-js") {
		t.Errorf("nats: want the official image with -js, got %q %v", nats.Image, nats.Command)
	}
	nodes := map[string]bool{}
	for name, svc := range compose.Services {
		if svc.Build == nil {
			continue
		}
		if len(svc.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		var bin string
		switch svc.Command[0] {
		case "sluice-server":
			bin = server
			for i, a := range svc.Command {
				if a == "--node" && i+1 < len(svc.Command) {
					if nodes[svc.Command[i+1]] {
						t.Errorf("%s: node name %s used twice", name, svc.Command[i+1])
					}
					nodes[svc.Command[i+1]] = true
				}
			}
		case "sluice-worker":
			bin = worker
		default:
			t.Errorf("%s: unknown binary %s", name, svc.Command[0])
			continue
		}
		cmd := exec.Command(bin, append(svc.Command[1:], "--check-config")...)
		cmd.Env = append(os.Environ(), "SLUICE_OPERATOR_TOKEN="+operatorToken, "SLUICE_SESSION_KEY="+strings.Repeat("ab", 32))
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "configuration ok") {
			t.Errorf("%s: %v rejected: %v\n%s", name, svc.Command, err, out)
		}
	}
	// The Dockerfile builds the binaries under the names the commands use.
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-o /out/sluice-server ./cmd/server", "-o /out/sluice-worker ./cmd/worker", "CGO_ENABLED=1"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// And a bad flag is really rejected, so the check above can fail.
	if err := exec.Command(server, "--no-such-flag", "--check-config").Run(); err == nil {
		t.Error("the server accepted an unknown flag")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
