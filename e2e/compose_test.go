package e2e

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// No container engine runs here, so the compose file is checked against the
// binaries instead: every service exists, NATS is the official image with
// JetStream on, every command is one the binaries accept (--check-config),
// and each service has a healthcheck and a volume. NATS runs docs/NATS.md's
// configuration (deploy/nats.conf) and every Sluice service reaches it over
// TLS with its role's credentials. The same topology runs as processes in
// cluster_test.go, and with that configuration in nats_auth_test.go.
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
	natsNodes := []string{"nats-1", "nats-2", "nats-3"}
	for _, name := range append(slices.Clone(natsNodes), "worker", "worker-2", "server-1", "server-2") {
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
			if strings.HasPrefix(vol, "./deploy/") {
				// Bind mounts: the configuration is in the repository; the
				// certificates are the operator's own (deploy/tls/).
				if _, err := os.Stat("../" + vol); err != nil && !strings.HasPrefix(vol, "./deploy/tls/") {
					t.Errorf("%s: %s: %v", name, vol, err)
				}
				continue
			}
			if _, ok := compose.Volumes[vol]; !ok {
				t.Errorf("%s: volume %s is not declared", name, vol)
			}
		}
	}
	// Two workers, each with a SQLite volume of its own: one active, one
	// standby (docs/HA.md).
	if w1, w2 := compose.Services["worker"], compose.Services["worker-2"]; len(w1.Volumes) > 0 && len(w2.Volumes) > 0 && w1.Volumes[0] == w2.Volumes[0] {
		t.Errorf("worker and worker-2 share the volume %s: each needs its own SQLite file", w1.Volumes[0])
	}
	// Three NATS nodes, each with JetStream, docs/NATS.md's configuration
	// and the routes of deploy/nats-cluster.conf, under a name of its own.
	for _, name := range natsNodes {
		nats := compose.Services[name]
		if !strings.HasPrefix(nats.Image, "nats:") || !contains(nats.Command, "-js") || !contains(nats.Command, "/etc/nats/nats-cluster.conf") {
			t.Errorf("%s: want the official image with -js and -c /etc/nats/nats-cluster.conf, got %q %v", name, nats.Image, nats.Command)
		}
		if i := slices.Index(nats.Command, "--name"); i < 0 || i+1 >= len(nats.Command) || nats.Command[i+1] != name {
			t.Errorf("%s: not started under its own --name: %v", name, nats.Command)
		}
		for _, v := range []string{"./deploy/nats.conf:/etc/nats/nats.conf:ro", "./deploy/nats-cluster.conf:/etc/nats/nats-cluster.conf:ro"} {
			if !contains(nats.Volumes, v) {
				t.Errorf("%s: %s is not mounted: %v", name, v, nats.Volumes)
			}
		}
	}
	cluster, err := os.ReadFile("../deploy/nats-cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"include ./nats.conf", "verify: true"}, "nats-route://nats-1:6222", "nats-route://nats-2:6222", "nats-route://nats-3:6222") {
		if !strings.Contains(string(cluster), want) {
			t.Errorf("deploy/nats-cluster.conf lacks %q", want)
		}
	}
	conf, err := os.ReadFile("../deploy/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if string(conf) != docNATSBlock(t) {
		t.Error("deploy/nats.conf differs from docs/NATS.md's configuration")
	}
	pki := newTestPKI(t)
	fileFor := map[string]string{"--nats-ca": pki.ca, "--nats-cert": pki.clientCert, "--nats-key": pki.clientKey,
		"--cluster-listen-cert": pki.clientCert, "--cluster-listen-key": pki.clientKey}
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
			// Servers forward to each other directly, over TLS, at an
			// address the other container can dial: its service name.
			flag := func(f string) string {
				if i := slices.Index(svc.Command, f); i >= 0 && i+1 < len(svc.Command) {
					return svc.Command[i+1]
				}
				return ""
			}
			if flag("--cluster-listen-cert") == "" || flag("--cluster-listen-key") == "" || !strings.HasPrefix(flag("--cluster-advertise"), name+":") {
				t.Errorf("%s: no direct forwarding over TLS advertised as %s:<port>: %v", name, name, svc.Command)
			}
		case "sluice-worker":
			bin = worker
		default:
			t.Errorf("%s: unknown binary %s", name, svc.Command[0])
			continue
		}
		// Every Sluice service reaches NATS over TLS with a client
		// certificate and its role's user.
		args := slices.Clone(svc.Command[1:])
		for _, f := range []string{"--nats-ca", "--nats-cert", "--nats-key"} {
			i := slices.Index(args, f)
			if i < 0 || i+1 >= len(args) {
				t.Errorf("%s: no %s", name, f)
				continue
			}
			args[i+1] = fileFor[f] // the container's path, here a test certificate
		}
		for _, f := range []string{"--cluster-listen-cert", "--cluster-listen-key"} {
			if i := slices.Index(args, f); i >= 0 && i+1 < len(args) {
				args[i+1] = fileFor[f]
			}
		}
		if i := slices.Index(args, "--nats-url"); i < 0 {
			t.Errorf("%s: no --nats-url", name)
		} else {
			for _, n := range natsNodes {
				if !strings.Contains(args[i+1], "tls://"+n+":4222") {
					t.Errorf("%s: NATS node %s is not reached over tls:// (%s)", name, n, args[i+1])
				}
			}
			for _, u := range strings.Split(args[i+1], ",") {
				if !strings.HasPrefix(u, "tls://") {
					t.Errorf("%s: %s is not tls://", name, u)
				}
			}
		}
		user, _ := svc.Environment["SLUICE_NATS_USER"].(string)
		wantUser := map[string]string{"sluice-server": "sluice-server", "sluice-worker": "sluice-worker"}[svc.Command[0]]
		if user != wantUser || svc.Environment["SLUICE_NATS_PASSWORD"] == nil {
			t.Errorf("%s: want SLUICE_NATS_USER=%s and a SLUICE_NATS_PASSWORD, got %v", name, wantUser, svc.Environment)
		}
		if _, ok := svc.Environment["SLUICE_OPERATOR_TOKEN"]; ok != (svc.Command[0] == "sluice-worker") {
			t.Errorf("%s: SLUICE_OPERATOR_TOKEN belongs to the worker, which applies it", name)
		}
		cmd := exec.Command(bin, append(args, "--check-config")...)
		cmd.Env = append(os.Environ(), "SLUICE_OPERATOR_TOKEN="+operatorToken, "SLUICE_SESSION_KEY="+strings.Repeat("ab", 32),
			"SLUICE_NATS_USER="+wantUser, "SLUICE_NATS_PASSWORD=compose-check")
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
