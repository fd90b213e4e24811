package e2e

// Sluice's Envoy door held to the reference server, call for call: the
// reference (envoyproxy/ratelimit with Redis, built from its module source
// at the version cmd/sluice-bench/rls-figures.sh pins) and a Sluice server
// load the same configuration files and get the same seeded call streams,
// and every field of every answer must match.
//
// The reference is built in a temporary directory outside this module
// (nothing of it lands in the repository), from the Go module proxy, and
// runs with Redis on loopback ports. The test needs redis-server: as root it
// installs the Debian package when it is missing (as .ci/run does), as
// another user it skips, and in CI (CI=true) anything that keeps it from
// running fails it.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rlsReferenceVersion is the reference's module version: the newest the
// module proxy serves (as in cmd/sluice-bench/rls-figures.sh). Its
// wildcards are trailing ones and its quota mode is older than the one
// Sluice follows, so the files below use neither middle wildcards nor
// quota_mode (internal/rlsconf's tests hold those to the reference's
// current code).
const rlsReferenceVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// The reference's own test and example configurations, written again for
// this test with second (and some minute) units so that windows turn
// while it runs: nested descriptors, overrides of a bare key by values,
// a value without a limit, names, unlimited, detailed_metric, replaces,
// a banned rule (requests_per_unit 0), shadow mode, and wildcards.
var rlsReferenceFiles = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: key2
    value: value2
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: key2
    value: value3
  - key: key3
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: key4
    rate_limit: {name: key4_rate_limit, unit: second, requests_per_unit: 2}
  - key: key5
    value: value5
    rate_limit: {unit: second, requests_per_unit: 3}
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key6
    rate_limit: {unlimited: true}
  - key: key7
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
`,
	"example.yaml": `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit:
      replaces: [{name: bkthomps}, {name: fake_name}]
      unit: second
      requests_per_unit: 4
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        value: bkthomps
        rate_limit: {replaces: [{name: bkthomps}], unit: second, requests_per_unit: 2}
      - key: destination_cluster
        value: mock
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: destination_cluster
        value: override
        rate_limit: {replaces: [{name: banned_limit}], unit: second, requests_per_unit: 2}
      - key: destination_cluster
        value: fake
        rate_limit: {name: fake_name, unit: second, requests_per_unit: 2}
  - key: foo
    rate_limit: {unit: second, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: bar
        value: bkthomps
        rate_limit: {name: bkthomps, unit: second, requests_per_unit: 1}
      - key: bar
        value: banned
        rate_limit: {name: banned_limit, unit: second, requests_per_unit: 0}
      - key: baz
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: baz
        value: not-so-shady
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: baz
        value: shady
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: bay
        rate_limit: {unlimited: true}
  - key: unspec
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: qux
    rate_limit: {unlimited: true}
  - key: model
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
`,
	"shadow.yaml": `domain: shadow
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: subkey1
        value: subvalue1
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: key2
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
`,
	"share.yaml": `domain: share
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit: {unit: second, requests_per_unit: 2}
  - key: file
    value: test1
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: wild
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
`,
	"wildcard.yaml": `domain: wild
descriptors:
  - key: path
    value: /api/v1/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: /api/v1/exact
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: file
    value: img-*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: user
    value: u*
    descriptors:
      - key: plan
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: plan
        value: gold*
        rate_limit: {unit: second, requests_per_unit: 4}
  - key: probe
    rate_limit: {unit: second, requests_per_unit: 1000}
`,
}

// rlsReferencePools are the descriptors the streams draw from for the
// fixed files: matches at every depth, values that fall to a bare key,
// wildcard values, and descriptors no rule matches.
var rlsReferencePools = map[string][][]string{
	"basic": {
		{"key1", "value1", "subkey1", "a"}, {"key1", "value1", "subkey1", "subvalue1"}, {"key1", "value1"}, {"key1", "other"},
		{"key2", "v"}, {"key2", "value2"}, {"key2", "value3"}, {"key3", "x"}, {"key4", "x"}, {"key5", "value5"},
		{"key5", "value5", "subkey5", "subvalue5"}, {"key5", "value5", "subkey5", "other"}, {"key6", "x"}, {"key7", "x"}, {"key7", "y"},
		{"nothing", "x"}, {"key2", "v", "deeper", "x"},
	},
	"rl": {
		{"category", "account"}, {"source_cluster", "proxy", "destination_cluster", "bkthomps"}, {"source_cluster", "proxy", "destination_cluster", "mock"},
		{"source_cluster", "proxy", "destination_cluster", "override"}, {"source_cluster", "proxy", "destination_cluster", "fake"},
		{"foo", "f"}, {"foo", "f", "bar", "b"}, {"foo", "f", "bar", "bkthomps"}, {"foo", "f", "bar", "banned"}, {"foo", "f", "baz", "z"},
		{"foo", "f", "baz", "not-so-shady"}, {"foo", "f", "baz", "shady"}, {"foo", "f", "bay", "y"}, {"unspec", "u"}, {"qux", "q"}, {"model", "m"},
	},
	"shadow": {
		{"key1", "value1", "subkey1", "a"}, {"key1", "value1", "subkey1", "subvalue1"}, {"key2", "v"}, {"key2", "value2"}, {"key2", "value3"},
	},
	"share": {
		{"files", "files/a"}, {"files", "files/b"}, {"files", "other"}, {"nested", "parent", "files", "nested/x"}, {"nested", "parent", "files", "nested/y"},
		{"files", "top/1", "files", "nested/1"}, {"files", "top/2", "files", "nested/2"}, {"route", "api/v1", "method", "GET"}, {"route", "api/v2", "method", "POST"},
		{"user", "user/1", "resource", "res/a", "action", "read"}, {"user", "user/2", "resource", "res/b", "action", "read"},
		{"file", "test1"}, {"file", "test2"}, {"file", "test3"}, {"wild", "foo1"}, {"wild", "foo"}, {"wild", "fo"}, {"nestedWild", "val1", "wild", "goo1"},
	},
	"wild": {
		{"path", "/api/v1/x"}, {"path", "/api/v1/"}, {"path", "/api/v2"}, {"path", "/api/v1/exact"}, {"path", "/other"}, {"path", "/api"},
		{"file", "img-1"}, {"file", "img-2"}, {"file", "doc-1"}, {"user", "u1", "plan", "free"}, {"user", "u2", "plan", "gold-1"},
		{"user", "u1"}, {"user", "x1", "plan", "free"},
	},
}

// genReferenceFile makes a random domain the reference loads: up to three
// levels, keys and values drawn from small sets so that calls meet them,
// wildcard siblings in a random order, limits of 0 to 5 a second (some a
// minute), unlimited, names and replaces, shadow mode, share_threshold and
// detailed_metric. It returns the file and a pool of descriptors for it.
func genReferenceFile(rng *rand.Rand, domain string) (string, [][]string) {
	keys := []string{"a", "b", "c"}
	values := []string{"", "x", "y", "p*", "px*"}
	names := []string{"n0", "n1", "n2", "n3"}
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	var level func(indent string, depth int)
	level = func(indent string, depth int) {
		type kv struct{ k, v string }
		var kvs []kv
		for _, k := range keys {
			for _, v := range values {
				if rng.IntN(3) == 0 {
					kvs = append(kvs, kv{k, v})
				}
			}
		}
		rng.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
		if len(kvs) > 5 {
			kvs = kvs[:5]
		}
		if len(kvs) == 0 {
			kvs = append(kvs, kv{keys[rng.IntN(len(keys))], ""})
		}
		for _, e := range kvs {
			fmt.Fprintf(&b, "%s- key: %s\n", indent, e.k)
			in := indent + "  "
			if e.v != "" {
				fmt.Fprintf(&b, "%svalue: %q\n", in, e.v)
			}
			if strings.Contains(e.v, "*") && rng.IntN(3) == 0 {
				fmt.Fprintf(&b, "%sshare_threshold: true\n", in)
			}
			if rng.IntN(6) == 0 {
				fmt.Fprintf(&b, "%sshadow_mode: true\n", in)
			}
			if rng.IntN(8) == 0 {
				fmt.Fprintf(&b, "%sdetailed_metric: true\n", in)
			}
			switch r := rng.IntN(10); {
			case r == 0:
				fmt.Fprintf(&b, "%srate_limit: {unlimited: true}\n", in)
			case r < 8:
				unit := "second"
				if rng.IntN(5) == 0 {
					unit = "minute"
				}
				rpu := rng.IntN(6)
				if rng.IntN(3) > 0 && rpu == 0 {
					rpu = 1 + rng.IntN(5)
				}
				name, extra := "", ""
				if rng.IntN(3) == 0 {
					name = names[rng.IntN(len(names))]
					extra += ", name: " + name
				}
				if rng.IntN(5) == 0 {
					if r := names[rng.IntN(len(names))]; r != name {
						extra += ", replaces: [{name: " + r + "}]"
					}
				}
				fmt.Fprintf(&b, "%srate_limit: {unit: %s, requests_per_unit: %d%s}\n", in, unit, rpu, extra)
			}
			if depth < 3 && rng.IntN(5) < 2 {
				fmt.Fprintf(&b, "%sdescriptors:\n", in)
				level(in+"  ", depth+1)
			}
		}
	}
	level("  ", 1)
	b.WriteString("  - key: probe\n    rate_limit: {unit: second, requests_per_unit: 1000}\n")
	callValues := []string{"x", "y", "p1", "px1", "pxy", "z", ""}
	var pool [][]string
	for range 24 {
		var d []string
		for range 1 + rng.IntN(3) {
			d = append(d, keys[rng.IntN(len(keys))], callValues[rng.IntN(len(callValues))])
		}
		pool = append(pool, d)
	}
	return b.String(), pool
}

// redisServer finds redis-server, installing it as root when it is
// missing; without it the test skips, except in CI.
func redisServer(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	ci := os.Getenv("CI") == "true"
	if os.Geteuid() != 0 {
		if ci {
			t.Fatal("redis-server is missing and the test is not root: install the Debian package redis-server")
		}
		t.Skip("redis-server is missing (install the Debian package redis-server to hold Sluice to the reference)")
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "redis-server"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 20))
		}
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is still missing after apt-get install redis-server")
	}
	return p
}

// referenceBin is the reference server, built once per test binary run.
var referenceBin struct {
	once      sync.Once
	dir, path string // dir is removed by TestMain
	err       error
}

// buildReference builds the reference at rlsReferenceVersion from its
// module source, in a temporary directory outside this module.
func buildReference(t *testing.T) string {
	t.Helper()
	referenceBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-e2e-ratelimit-")
		if err != nil {
			referenceBin.err = err
			return
		}
		referenceBin.dir = dir
		env := append(os.Environ(), "GOWORK=off")
		cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/ratelimit@"+rlsReferenceVersion)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.Output()
		if err != nil {
			referenceBin.err = fmt.Errorf("go mod download github.com/envoyproxy/ratelimit@%s: %v\n%s", rlsReferenceVersion, err, out)
			return
		}
		var info struct{ Dir string }
		if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
			referenceBin.err = fmt.Errorf("go mod download gave no source directory: %s", out)
			return
		}
		src := filepath.Join(dir, "src")
		if out, err := exec.Command("cp", "-R", info.Dir, src).CombinedOutput(); err != nil {
			referenceBin.err = fmt.Errorf("copying the reference's source: %v\n%s", err, out)
			return
		}
		if out, err := exec.Command("chmod", "-R", "u+w", src).CombinedOutput(); err != nil {
			referenceBin.err = fmt.Errorf("chmod: %v\n%s", err, out)
			return
		}
		bin := filepath.Join(dir, "ratelimit")
		cmd = exec.Command("go", "build", "-trimpath", "-o", bin, "./src/service_cmd")
		cmd.Dir, cmd.Env = src, append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			referenceBin.err = fmt.Errorf("building the reference: %v\n%s", err, tail(string(out), 30))
			return
		}
		referenceBin.path = bin
	})
	if referenceBin.err != nil {
		t.Fatal(referenceBin.err)
	}
	return referenceBin.path
}

// startReference starts Redis and the reference with files as its
// configuration, and answers its gRPC address.
func startReference(t *testing.T, files map[string]string) string {
	t.Helper()
	redisBin := redisServer(t)
	bin := buildReference(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	redisAddr := freeAddr(t)
	start(t, "redis", redisBin, []string{"--bind", "127.0.0.1", "--port", port(redisAddr), "--save", "", "--appendonly", "no", "--dir", dir})
	waitFor(t, 10*time.Second, "redis-server listening", func() bool {
		c, err := net.Dial("tcp", redisAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	grpcAddr, httpAddr, debugAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	// A clean environment: the reference reads its settings from it.
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT=" + port(httpAddr), "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + port(debugAddr),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + port(grpcAddr)}
	logs := &logBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the reference: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("---- reference logs ----\n%s", tail(logs.String(), 40))
		}
	})
	waitFor(t, 30*time.Second, "the reference loading every file", func() bool {
		resp, err := http.Get("http://" + debugAddr + "/rlconfig")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, text := range files {
			domain := strings.TrimPrefix(strings.SplitN(text, "\n", 2)[0], "domain: ")
			if !strings.Contains(string(body), domain+".probe") {
				return false
			}
		}
		return true
	})
	return grpcAddr
}

// genCall draws a call from a domain's pool: one to three descriptors,
// the request's hits_addend 0 (meaning 1), 1, a few or 4294967295, and
// now and then a descriptor's own hits_addend or an override of a limit:
// on a key no file has, or on a pool descriptor with a limit of its own in
// the unit of the file's rule for it (units[its entries joined], SECOND
// where none), which counts in the rule's counter at the reference.
func genCall(rng *rand.Rand, domain string, pool [][]string, units map[string]typev3.RateLimitUnit) *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: domain}
	hits := []uint32{0, 0, 1, 1, 1, 2, 3, 7}
	req.HitsAddend = hits[rng.IntN(len(hits))]
	if rng.IntN(40) == 0 {
		req.HitsAddend = math.MaxUint32
	}
	for range 1 + rng.IntN(3) {
		var d *rlcommon.RateLimitDescriptor
		if rng.IntN(12) == 0 {
			// Envoy's per-route limit, on a key no file has: a counter of
			// its own, with one limit for each value as a route would give.
			v := []string{"o1", "o2"}[rng.IntN(2)]
			d = rd("ovr", v)
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: map[string]uint32{"o1": 2, "o2": 3}[v], Unit: 1} // SECOND
		} else {
			kv := pool[rng.IntN(len(pool))]
			d = rd(kv...)
			if rng.IntN(10) == 0 {
				unit, ok := units[domain+"\x00"+strings.Join(kv, "\x00")]
				if !ok {
					unit = typev3.RateLimitUnit_SECOND
				}
				rpu := []uint32{0, 1, 2, 3, 5, 10}[rng.IntN(6)]
				d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
			}
		}
		if rng.IntN(4) == 0 {
			own := []uint64{0, 0, 1, 2, 5}
			h := own[rng.IntN(len(own))]
			if rng.IntN(30) == 0 {
				h = math.MaxUint32
			}
			d.HitsAddend = wrapperspb.UInt64(h)
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// sameAnswer reports how two answers to one call differ, "" when they do
// not: the overall code and every status's code, limit (requests, unit,
// name), remaining and duration until reset (whole seconds at the
// reference, exact at Sluice: Sluice's within the second before it).
func sameAnswer(ref, got *pb.RateLimitResponse) string {
	if ref.GetOverallCode() != got.GetOverallCode() {
		return fmt.Sprintf("overall_code %s, reference %s", got.GetOverallCode(), ref.GetOverallCode())
	}
	if len(ref.GetStatuses()) != len(got.GetStatuses()) {
		return fmt.Sprintf("%d statuses, reference %d", len(got.GetStatuses()), len(ref.GetStatuses()))
	}
	for i, r := range ref.GetStatuses() {
		g := got.GetStatuses()[i]
		switch {
		case r.GetCode() != g.GetCode():
			return fmt.Sprintf("statuses[%d].code %s, reference %s", i, g.GetCode(), r.GetCode())
		case r.GetLimitRemaining() != g.GetLimitRemaining():
			return fmt.Sprintf("statuses[%d].limit_remaining %d, reference %d", i, g.GetLimitRemaining(), r.GetLimitRemaining())
		case (r.GetCurrentLimit() == nil) != (g.GetCurrentLimit() == nil):
			return fmt.Sprintf("statuses[%d].current_limit %v, reference %v", i, g.GetCurrentLimit(), r.GetCurrentLimit())
		case r.GetCurrentLimit() != nil && (r.GetCurrentLimit().GetRequestsPerUnit() != g.GetCurrentLimit().GetRequestsPerUnit() ||
			r.GetCurrentLimit().GetUnit() != g.GetCurrentLimit().GetUnit() || r.GetCurrentLimit().GetName() != g.GetCurrentLimit().GetName()):
			return fmt.Sprintf("statuses[%d].current_limit %v, reference %v", i, g.GetCurrentLimit(), r.GetCurrentLimit())
		case (r.GetDurationUntilReset() == nil) != (g.GetDurationUntilReset() == nil):
			return fmt.Sprintf("statuses[%d].duration_until_reset %v, reference %v", i, g.GetDurationUntilReset(), r.GetDurationUntilReset())
		}
		if r.GetDurationUntilReset() != nil {
			rd, gd := r.GetDurationUntilReset().AsDuration(), g.GetDurationUntilReset().AsDuration()
			if gd > rd+100*time.Millisecond || gd <= rd-time.Second-100*time.Millisecond {
				return fmt.Sprintf("statuses[%d].duration_until_reset %v, reference %v", i, gd, rd)
			}
		}
	}
	return ""
}

// TestRLSAgainstReference: the reference's configurations and generated
// ones, seeded random call streams in bursts that each fall within one
// second and pause across window edges, every answer compared; and the
// token-quota pattern (look, serve, charge at stream end) limiting the
// same client on both.
func TestRLSAgainstReference(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_RLS_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("seed %d (SLUICE_RLS_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))

	files := map[string]string{}
	pools := map[string][][]string{}
	for name, text := range rlsReferenceFiles {
		files[name] = text
	}
	for d, p := range rlsReferencePools {
		pools[d] = p
	}
	for i := range 3 {
		domain := fmt.Sprintf("gen%d", i)
		text, pool := genReferenceFile(rng, domain)
		files[domain+".yaml"], pools[domain] = text, pool
	}

	refAddr := startReference(t, files)
	bin := buildSluice(t)
	grpcAddr := freeAddr(t)
	s := startServer(t, serverOpts{extra: []string{"--grpc-addr", grpcAddr}})
	tn := createTenant(t, s, "reference-diff")
	for name, text := range files {
		sluiceApply(t, bin, s.base, tn.Key, name, text)
	}
	sl := dialRLS(t, grpcAddr, tn.Key)
	conn, err := grpc.NewClient(refAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ref := pb.NewRateLimitServiceClient(conn)
	slc := pb.NewRateLimitServiceClient(sl.conn)
	domains := make([]string, 0, len(pools))
	for d := range pools {
		domains = append(domains, d)
	}
	// The sort keeps the seed's streams the same from run to run.
	for i := range domains {
		for j := i + 1; j < len(domains); j++ {
			if domains[j] < domains[i] {
				domains[i], domains[j] = domains[j], domains[i]
			}
		}
	}
	probe := func(domain string) *pb.RateLimitRequest {
		d := rd("probe", "p")
		d.HitsAddend = wrapperspb.UInt64(0)
		return &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
	}
	ctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 5*time.Second)
	}
	sctx := func(c context.Context) context.Context {
		return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+tn.Key)
	}
	waitFor(t, 10*time.Second, "every domain's rules on the Sluice server", func() bool {
		for _, d := range domains {
			c, cancel := ctx()
			r, err := slc.ShouldRateLimit(sctx(c), probe(d))
			cancel()
			if err != nil || r.GetStatuses()[0].GetCurrentLimit() == nil {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // the last nodes of a file, a moment behind its first

	// The unit of each pool descriptor's rule, for overrides that share
	// its counter: a look at Sluice (hits_addend 0 counts nothing).
	units := map[string]typev3.RateLimitUnit{}
	for _, d := range domains {
		for _, kv := range pools[d] {
			look := rd(kv...)
			look.HitsAddend = wrapperspb.UInt64(0)
			c, cancel := ctx()
			r, err := slc.ShouldRateLimit(sctx(c), &pb.RateLimitRequest{Domain: d, Descriptors: []*rlcommon.RateLimitDescriptor{look}})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if l := r.GetStatuses()[0].GetCurrentLimit(); l != nil {
				units[d+"\x00"+strings.Join(kv, "\x00")] = typev3.RateLimitUnit(l.GetUnit())
			}
		}
	}

	both := func(req *pb.RateLimitRequest) (refR, slR *pb.RateLimitResponse) {
		t.Helper()
		c, cancel := ctx()
		defer cancel()
		refR, err := ref.ShouldRateLimit(c, req)
		if err != nil {
			t.Fatalf("reference: %v (call %v)", err, req)
		}
		slR, err = slc.ShouldRateLimit(sctx(c), req)
		if err != nil {
			t.Fatalf("Sluice answered an error where the reference decided: %v (call %v)", err, req)
		}
		return refR, slR
	}
	// untilSecond waits for the next second to be frac into it.
	untilSecond := func(frac time.Duration) {
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + frac).Sub(now))
	}

	calls, mismatches, over, limited, straddled := 0, 0, 0, 0, 0
	deadline := time.Now().Add(25 * time.Second)
streams:
	for round := 0; time.Now().Before(deadline); round++ {
		untilSecond(100 * time.Millisecond)
		if rng.IntN(4) == 0 {
			untilSecond(100 * time.Millisecond) // a window turns with nothing sent
		}
		sec := time.Now().Unix()
		for range 5 + rng.IntN(30) {
			if time.Now().After(time.Unix(sec, 800*int64(time.Millisecond))) {
				break // keep a burst inside its second, clear of the edge
			}
			d := domains[rng.IntN(len(domains))]
			req := genCall(rng, d, pools[d], units)
			refR, slR := both(req)
			if end := time.Now(); end.Unix() != sec {
				// The machine stalled and the call crossed a window edge:
				// the servers may have counted it in different windows.
				// Second windows start afresh with the next burst; a
				// minute's counters could stay apart, so the streams end.
				straddled++
				if end.Truncate(time.Minute) != time.Unix(sec, 0).Truncate(time.Minute) {
					break streams
				}
				break
			}
			calls++
			if refR.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
				over++
			}
			for _, st := range refR.GetStatuses() {
				if st.GetCurrentLimit() != nil {
					limited++
				}
			}
			if diff := sameAnswer(refR, slR); diff != "" {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("round %d, call %v:\n  %s\n  reference %v\n  sluice    %v", round, req, diff, refR, slR)
				}
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d calls answered differently (seed %d)", mismatches, calls, seed)
	}
	if calls < 100 {
		t.Fatalf("only %d calls compared (%d crossed a window edge): the machine is too slow for the streams", calls, straddled)
	}
	t.Logf("%d calls (%d over the limit, %d statuses under a limit), every answer the same; %d left uncompared at a window edge", calls, over, limited, straddled)

	// The token-quota pattern of the reference's example: look with
	// hits_addend 0 before serving, charge the response's tokens when it
	// ends (apply_on_stream_done). 1 500-token responses against 1 000
	// tokens an hour: the first request is served, then the client is
	// limited, on both.
	for attempt := 0; ; attempt++ {
		hour := time.Now().Truncate(time.Hour)
		client := fmt.Sprintf("client-%d-%d", seed%1000, attempt)
		served := map[string]int{}
		for _, who := range []string{"reference", "sluice"} {
			call := func(d *rlcommon.RateLimitDescriptor) *pb.RateLimitResponse {
				t.Helper()
				c, cancel := ctx()
				defer cancel()
				req := &pb.RateLimitRequest{Domain: "rl", Descriptors: []*rlcommon.RateLimitDescriptor{d}}
				var r *pb.RateLimitResponse
				var err error
				if who == "reference" {
					r, err = ref.ShouldRateLimit(c, req)
				} else {
					r, err = slc.ShouldRateLimit(sctx(c), req)
				}
				if err != nil {
					t.Fatalf("%s: %v", who, err)
				}
				return r
			}
			for range 10 {
				look := rd("model", client)
				look.HitsAddend = wrapperspb.UInt64(0)
				if call(look).GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
					continue
				}
				served[who]++
				charge := rd("model", client)
				charge.HitsAddend = wrapperspb.UInt64(1500)
				call(charge)
			}
		}
		if !time.Now().Truncate(time.Hour).Equal(hour) && attempt == 0 {
			continue // the hour turned under the calls: once more
		}
		if served["reference"] != 1 || served["sluice"] != 1 {
			t.Fatalf("token quota: the reference served %d of 10, Sluice %d; want 1 each", served["reference"], served["sluice"])
		}
		break
	}
}
