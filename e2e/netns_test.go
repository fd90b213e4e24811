package e2e

// A network lab: each NATS node, the worker and each server runs in a network
// namespace of its own, wired by veth pairs to bridges that live in a
// dedicated "switch" namespace, so the host's own network configuration is
// untouched (the test's process gets one veth per network it reaches, with a
// 10.77.x.y address). There are three networks:
//
//	api    the servers' HTTP listeners, and the test's process
//	bus    NATS clients: servers, the worker, the NATS nodes' client ports
//	       and the servers' direct forwarding listeners; the test too
//	route  the NATS nodes' cluster routes
//
// A partition detaches a host's veth from its bridge (ip link set nomaster):
// its packets then go nowhere, silently, with no RST and no ICMP, as on a
// real network that loses a link. Every host knows every other host's MAC
// address (permanent neighbour entries), so a cut link does not even fail
// an ARP lookup: connections simply stop hearing from the other side. Healing
// attaches the veth again; the connections that survived carry on.
//
// Namespaces need root and iproute2; a test using the lab skips without
// them, except with CI=true, where they are required. Everything the lab
// makes is deleted in t.Cleanup, and namespaces a killed test run left
// behind are deleted by the next one.

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	netAPI   = "api"
	netBus   = "bus"
	netRoute = "route"
)

// labNets are the lab's networks in the order of their subnets.
var labNets = []string{netAPI, netBus, netRoute}

// netLab is one test's namespaces, bridges and links.
type netLab struct {
	t      testing.TB
	id     int    // 0..62: the subnets are 10.77.(4*id+k).0/24
	prefix string // of every namespace's name
	sw     string // the switch namespace
	hosts  map[string]*labHost
	names  []string // hosts in the order added
}

// labHost is one namespace (or the test's own, ns "") and its links.
type labHost struct {
	name string
	ns   string
	num  int // the last byte of its addresses
	ifs  map[string]labIf
}

// labIf is a host's link to one network.
type labIf struct {
	dev  string // in the host's namespace
	port string // its peer, a bridge port in the switch namespace
	ip   string
	mac  string
}

// requireNetns skips the test unless it runs as root with a working
// `ip netns`; with CI=true it fails instead.
func requireNetns(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not running as root"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "no ip command (apt-get install iproute2)"
	} else if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		why = fmt.Sprintf("ip netns does not work: %v %s", err, out)
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("network namespace tests need root and iproute2, and CI=true requires them: %s", why)
	}
	t.Skipf("network namespace test skipped: %s (run as root with iproute2; with CI=true it is required)", why)
}

// labPidDir holds one file per lab in use, naming the test process that
// owns it, so a later run can tell a leftover lab from a live one.
const labPidDir = "/run/sluice-e2e-netns"

var labNameRe = regexp.MustCompile(`^slu(\d+)-sw\b`)

// newNetLab makes the switch namespace and its three bridges.
func newNetLab(t testing.TB) *netLab {
	t.Helper()
	requireNetns(t)
	removeStaleLabs(t)
	if err := os.MkdirAll(labPidDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lab := &netLab{t: t, hosts: map[string]*labHost{}}
	// Take the first free id: `ip netns add` of an existing name fails, so
	// two test processes never share one.
	first := rand.IntN(63)
	lab.id = -1
	for i := range 63 {
		id := (first + i) % 63
		if exec.Command("ip", "netns", "add", fmt.Sprintf("slu%d-sw", id)).Run() == nil {
			lab.id = id
			break
		}
	}
	if lab.id < 0 {
		t.Fatal("no free network lab id (63 namespaces named slu*-sw exist)")
	}
	lab.prefix = fmt.Sprintf("slu%d-", lab.id)
	lab.sw = lab.prefix + "sw"
	if err := os.WriteFile(filepath.Join(labPidDir, strconv.Itoa(lab.id)), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.remove)
	var cmds []string
	cmds = append(cmds, "link set lo up")
	for _, n := range labNets {
		cmds = append(cmds, "link add br-"+n+" type bridge", "link set br-"+n+" up")
	}
	lab.batch(lab.sw, cmds)
	return lab
}

// removeStaleLabs deletes the namespaces of labs whose test process is
// gone (a run killed by a timeout leaves them).
func removeStaleLabs(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		m := labNameRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pidFile := filepath.Join(labPidDir, m[1])
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil {
				continue // its test is still running
			}
		}
		prefix := "slu" + m[1] + "-"
		for _, l := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(l), " ")
			if strings.HasPrefix(name, prefix) {
				killNamespace(name)
			}
		}
		t.Logf("removed the network lab %s a killed test run left behind", prefix)
		os.Remove(pidFile)
	}
}

// killNamespace kills every process in a namespace and deletes it.
func killNamespace(ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
}

// remove deletes every namespace and root link of the lab. The processes
// were killed by their own cleanups (registered later, so run first); any
// left in a namespace are killed here.
func (lab *netLab) remove() {
	for _, name := range lab.names {
		h := lab.hosts[name]
		if h.ns == "" {
			for _, i := range h.ifs {
				_ = exec.Command("ip", "link", "del", i.dev).Run()
			}
			continue
		}
		killNamespace(h.ns)
	}
	killNamespace(lab.sw)
	os.Remove(filepath.Join(labPidDir, strconv.Itoa(lab.id)))
}

// batch runs iproute2 commands in a namespace ("" = the test's own), in
// one ip process.
func (lab *netLab) batch(ns string, cmds []string) {
	lab.t.Helper()
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		lab.t.Fatalf("ip %s: %v\n%s\ncommands:\n%s", strings.Join(args, " "), err, out, strings.Join(cmds, "\n"))
	}
}

// ip is a host's address on a network.
func (lab *netLab) ip(net string, num int) string {
	k := 0
	for i, n := range labNets {
		if n == net {
			k = i
		}
	}
	return fmt.Sprintf("10.77.%d.%d", 4*lab.id+k, num)
}

// addHost makes a namespace for name (or, with num 254, links the test's
// own namespace) with a link to each of nets.
func (lab *netLab) addHost(name string, num int, nets ...string) *labHost {
	lab.t.Helper()
	h := &labHost{name: name, num: num, ifs: map[string]labIf{}}
	if num != 254 {
		h.ns = lab.prefix + name
		if out, err := exec.Command("ip", "netns", "add", h.ns).CombinedOutput(); err != nil {
			lab.t.Fatalf("ip netns add %s: %v %s", h.ns, err, out)
		}
	}
	lab.hosts[name] = h
	lab.names = append(lab.names, name)
	var cmds, sw []string
	if h.ns != "" {
		cmds = append(cmds, "link set lo up")
	}
	for _, n := range nets {
		k := 0
		for i, ln := range labNets {
			if ln == n {
				k = i
			}
		}
		i := labIf{dev: n, port: name + "-" + n, ip: lab.ip(n, num), mac: fmt.Sprintf("02:77:%02x:%02x:00:%02x", lab.id, k, num)}
		if h.ns == "" {
			i.dev = fmt.Sprintf("slu%d%s", lab.id, n) // unique in the test's namespace
		}
		h.ifs[n] = i
		cmds = append(cmds,
			fmt.Sprintf("link add %s address %s type veth peer name %s netns %s", i.dev, i.mac, i.port, lab.sw),
			fmt.Sprintf("addr add %s/24 dev %s", i.ip, i.dev),
			fmt.Sprintf("link set %s up", i.dev))
		sw = append(sw, fmt.Sprintf("link set %s master br-%s up", i.port, n))
	}
	lab.batch(h.ns, cmds)
	lab.batch(lab.sw, sw)
	return h
}

// wire gives every host a permanent neighbour entry for every other host on
// each network they share: a cut link then drops packets without a failed
// ARP lookup turning into an error. Call it once every host is added.
func (lab *netLab) wire() {
	lab.t.Helper()
	for _, name := range lab.names {
		h := lab.hosts[name]
		var cmds []string
		for n, i := range h.ifs {
			for _, other := range lab.names {
				if other == name {
					continue
				}
				if o, ok := lab.hosts[other].ifs[n]; ok {
					cmds = append(cmds, fmt.Sprintf("neigh replace %s lladdr %s dev %s nud permanent", o.ip, o.mac, i.dev))
				}
			}
		}
		if len(cmds) > 0 {
			lab.batch(h.ns, cmds)
		}
	}
}

// addr is host's address on a network.
func (lab *netLab) addr(host, net string) string {
	i, ok := lab.hosts[host].ifs[net]
	if !ok {
		lab.t.Fatalf("%s has no link to %s", host, net)
	}
	return i.ip
}

// cut detaches host's link to a network from its bridge: silence.
func (lab *netLab) cut(host, net string) {
	lab.t.Helper()
	lab.batch(lab.sw, []string{"link set " + lab.hosts[host].ifs[net].port + " nomaster"})
}

// heal attaches it again.
func (lab *netLab) heal(host, net string) {
	lab.t.Helper()
	lab.batch(lab.sw, []string{fmt.Sprintf("link set %s master br-%s", lab.hosts[host].ifs[net].port, net)})
}

// run starts bin in host's namespace as a proc (killed by PID in cleanup).
func (lab *netLab) run(host, name, bin string, args []string, env ...string) *proc {
	lab.t.Helper()
	return start(lab.t, name, "ip", append([]string{"netns", "exec", lab.hosts[host].ns, bin}, args...), env...)
}

// TestNetLabPartitionIsSilent checks the lab itself: two hosts talk over
// TCP; after a cut a write neither fails nor is answered (no RST, no ICMP),
// and after the heal the same connection carries on.
func TestNetLabPartitionIsSilent(t *testing.T) {
	lab := newNetLab(t)
	lab.addHost("a", 1, netBus)
	lab.addHost("test", 254, netBus)
	lab.wire()
	// A line echo server in a's namespace, written in shell-free Go: the
	// test binary itself, run as the echo helper.
	addr := lab.addr("a", netBus) + ":7000"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := lab.run("a", "echo", self, []string{"-test.run", "^$"}, echoEnv+"="+addr)
	defer p.kill()
	var conn net.Conn
	var rd *bufio.Reader
	waitFor(t, 10*time.Second, "the echo server in namespace a", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		conn, rd = c, bufio.NewReader(c)
		return true
	})
	defer conn.Close()
	roundTrip := func(msg string, wantReply bool) {
		t.Helper()
		if _, err := conn.Write([]byte(msg + "\n")); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
		line, err := readLineWithin(rd, conn, 2*time.Second)
		if wantReply && (err != nil || line != msg) {
			t.Fatalf("echo of %q: %q %v", msg, line, err)
		}
		if !wantReply && err == nil {
			t.Fatalf("echo of %q came back across a cut link: %q", msg, line)
		}
		var ne net.Error
		if !wantReply && (!errors.As(err, &ne) || !ne.Timeout()) {
			t.Fatalf("across a cut link the connection failed instead of going silent: %v", err)
		}
	}
	roundTrip("before", true)
	lab.cut("a", netBus)
	roundTrip("during", false)
	lab.heal("a", netBus)
	// The line sent during the cut is retransmitted and echoed first.
	line, err := readLineWithin(rd, conn, 5*time.Second)
	if err != nil || line != "during" {
		t.Fatalf("after the heal: %q %v, want the line sent during the cut", line, err)
	}
	roundTrip("after", true)
}

// readLineWithin reads one line from a connection, waiting at most d.
func readLineWithin(rd *bufio.Reader, c net.Conn, d time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	line, err := rd.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}
