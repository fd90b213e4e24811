package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/sluicehq/sluice/internal/quota"
	"io"
	"log/slog"
	"math/big"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/bus"
)

// bareCluster is a Cluster with no NATS, enough for the direct protocol.
func bareCluster(t testing.TB, node string, direct *DirectConfig) *Cluster {
	t.Helper()
	c := &Cluster{cfg: Config{Node: node, Now: time.Now, Direct: direct}, log: slog.New(slog.DiscardHandler)}
	if err := c.initMetrics(); err != nil {
		t.Fatal(err)
	}
	c.fwd = newForwarder(c)
	return c
}

// echoDecide answers every item with its cost as Remaining and its key's
// length as Limit, so a caller can tell whose answer it got.
func echoDecide(items []Item, out []Result) {
	for i, it := range items {
		out[i] = Result{Allowed: it.Consume, Report: i, Outcomes: []quota.Outcome{{Allowed: true, Limit: int64(len(it.Key)), Remaining: it.Cost, Reset: time.Duration(it.Now)}}}
	}
}

// owner starts a direct listener deciding with decide.
func owner(t testing.TB, decide func([]Item, []Result), tlsCfg *tls.Config, timeout ...time.Duration) (*Cluster, peerInfo) {
	t.Helper()
	d := &DirectConfig{Listen: "127.0.0.1:0", TLS: tlsCfg, Host: "h"}
	if len(timeout) > 0 {
		d.handshakeTimeout, d.frameTimeout = timeout[0], timeout[0]
	}
	c := bareCluster(t, "owner", d)
	srv, info, err := c.listenDirect(c.cfg.Direct, decide)
	if err != nil {
		t.Fatal(err)
	}
	c.fwd.srv = srv
	t.Cleanup(srv.close)
	return c, info
}

func rejected(c *Cluster, reason string) float64 {
	return testutil.ToFloat64(c.metrics.rejected.WithLabelValues(reason))
}

// waitRejected polls the owner's rejection counter: the owner closes the
// connection and counts it on its own goroutine.
func waitRejected(t *testing.T, c *Cluster, reason string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rejected(c, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("rejected{%s} = %v, want %v", reason, rejected(c, reason), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWireRoundTrip(t *testing.T) {
	items := []Item{
		{Key: "t1/p1/ip:10.0.0.1", Tenant: "t1", Policy: "p1", Tier: "anonymous", Cost: 1, Consume: true, Now: 1_700_000_000_000_000_000},
		{Key: "t1/p2/key:k", Tenant: "t1", Policy: "p2", KeyID: "k", Cost: -3, Now: -1},
		{Key: "t1/p2/key:k", Tenant: "t1", Policy: "p2", KeyID: "k", Cost: 7, Consume: true, Settle: true, Since: 8, Now: 9},
		{Key: "t1/p2/key:k", Tenant: "t1", Policy: "p2", KeyID: "k", Cost: -7, Consume: true, Settle: true, Since: -1, Now: 9, ID: 1<<64 - 1},
		{Key: "t1/p1/ip:10.0.0.2", Tenant: "t1", Policy: "p1", Cost: 2, Consume: true, Now: 3, ID: 12345},
		{},
		{Key: "t1/p3/key:k", Tenant: "t1", Policy: "p3", Cost: 1, Consume: true, Now: 3, ID: 6, Lease: -77, LeaseExp: 60e9},
		{Key: "t1/p3/key:k", Tenant: "t1", Policy: "p3", Now: 4, Lease: 1 << 62, LeaseExp: 60e9, Release: true},
	}
	body := appendRequest(nil, 42, items)
	if n := binary.BigEndian.Uint32(body); int(n) != len(body)-4 {
		t.Fatalf("length prefix %d for a body of %d", n, len(body)-4)
	}
	id, got, err := decodeRequest(body[4:])
	if err != nil || id != 42 || !reflect.DeepEqual(got, items) {
		t.Fatalf("request: id %d, %+v, %v", id, got, err)
	}
	res := []Result{
		{Status: StatusOK, Allowed: true, Report: 1, Outcomes: []quota.Outcome{{Allowed: true, Limit: 10, Remaining: 9, Reset: 5e9}, {Limit: 100, Remaining: 0, Reset: 1, RetryAfter: 2}}},
		{Status: StatusNotOwner},
		{Status: StatusNoLimits, Report: -1},
	}
	body = appendResponse(nil, 7, res)
	id, gotRes, err := decodeResponse(body[4:])
	if err != nil || id != 7 || !reflect.DeepEqual(gotRes, res) {
		t.Fatalf("response: id %d, %+v, %v", id, gotRes, err)
	}
	// To an owner that does not read ids (an older server), the frame
	// carries none, and its flags are the ones such an owner knows.
	noIDs := appendRequestFor(nil, 43, items, false)
	if _, got, err := decodeRequest(noIDs[4:]); err != nil || got[3].ID != 0 || got[4].ID != 0 || got[4].Cost != 2 {
		t.Fatalf("a request without ids: %+v, %v", got, err)
	}
	if bytes.Contains(noIDs, []byte{flagConsume | flagSettle | flagID}) {
		t.Fatal("a frame for an owner without ids sets the id flag")
	}
	// To an owner that does not announce leases, the frame carries none:
	// its decoder would refuse the flags.
	noLeases := appendRequestTo(nil, 44, items, true, false)
	if _, got, err := decodeRequest(noLeases[4:]); err != nil || got[6].Lease != 0 || got[7].Release || got[6].ID != 6 {
		t.Fatalf("a request without leases: %+v, %v", got, err)
	}
	// A release without its lease is refused.
	rel := appendRequest(nil, 1, []Item{{Key: "k", Lease: 5, Release: true}})[4:]
	rel[len(rel)-4] &^= flagLease // flags, then now, lease and expiry of one byte each
	if _, _, err := decodeRequest(rel); err == nil {
		t.Fatal("a release without a lease decoded")
	}
	// An id of 0 is not sent with the flag: a frame that says so is refused.
	bad := appendRequest(nil, 1, []Item{{Key: "k", Consume: true, ID: 5}})[4:]
	bad[len(bad)-1] = 0
	if _, _, err := decodeRequest(bad); err == nil {
		t.Fatal("an item id of 0 decoded")
	}
	// Every truncation of a valid frame is refused, never half-read.
	full := appendRequest(nil, 1, items)[4:]
	for n := range len(full) {
		if _, _, err := decodeRequest(full[:n]); err == nil {
			t.Fatalf("a request cut at %d of %d bytes decoded", n, len(full))
		}
	}
}

func FuzzDecodeFrames(f *testing.F) {
	f.Add(appendRequest(nil, 1, []Item{{Key: "a/b/ip:1", Tenant: "a", Policy: "b", Cost: 1, Consume: true, Now: 5}})[4:])
	f.Add(appendResponse(nil, 1, []Result{{Allowed: true, Outcomes: []quota.Outcome{{Limit: 1}}}})[4:])
	f.Add([]byte{frameRequest, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{frameResponse, 1, 1, 0, 0, 0, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, body []byte) {
		if id, items, err := decodeRequest(body); err == nil {
			again, err := func() ([]Item, error) { _, it, err := decodeRequest(appendRequest(nil, id, items)[4:]); return it, err }()
			if err != nil || !reflect.DeepEqual(again, items) {
				t.Fatalf("a decoded request does not survive re-encoding: %v", err)
			}
		}
		if id, res, err := decodeResponse(body); err == nil {
			_, again, err := decodeResponse(appendResponse(nil, id, res)[4:])
			if err != nil || !reflect.DeepEqual(again, res) {
				t.Fatalf("a decoded response does not survive re-encoding: %v", err)
			}
		}
	})
}

// The listener serves only dialers that know its key, and a dialer
// accepts only a listener that knows it.
func TestDirectHandshake(t *testing.T) {
	c, info := owner(t, echoDecide, nil)
	ctx := context.Background()

	pc, err := dialPeer(ctx, info)
	if err != nil {
		t.Fatalf("dial with the right key: %v", err)
	}
	res, sent, err := pc.roundTrip([]Item{{Key: "abc", Cost: 7}})
	if err != nil || !sent || len(res) != 1 || res[0].Outcomes[0].Remaining != 7 {
		t.Fatalf("round trip: %+v, %v, %v", res, sent, err)
	}
	pc.close()

	// A wrong key: the dialer finds the owner's proof wrong and leaves; the
	// owner never gets a proof and rejects the connection.
	wrong := info
	wrong.Key = hex.EncodeToString(make([]byte, keyLen))
	if _, err := dialPeer(ctx, wrong); err == nil || !strings.Contains(err.Error(), "does not know the owner's key") {
		t.Fatalf("dial with a wrong key: %v", err)
	}
	waitRejected(t, c, rejectHandshake, 1)

	// A dialer that skips the owner's proof and answers with a made-up
	// MAC, and one that sends no MAC at all.
	for i, proof := range [][]byte{make([]byte, macLen), nil} {
		conn, err := net.Dial("tcp", info.Addr)
		if err != nil {
			t.Fatal(err)
		}
		nd := make([]byte, nonceLen)
		_, _ = conn.Write(hello(nd))
		if _, err := io.ReadFull(conn, make([]byte, len(directMagic)+1+nonceLen+macLen)); err != nil {
			t.Fatal(err)
		}
		if proof != nil {
			_, _ = conn.Write(proof)
		} else {
			_ = conn.(*net.TCPConn).CloseWrite()
		}
		if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
			t.Fatalf("case %d: the owner accepted a dialer without its key (%d bytes, %v)", i, n, err)
		}
		conn.Close()
		waitRejected(t, c, rejectHandshake, float64(2+i))
	}

	// A listener that is not the owner (another process took its port):
	// the dialer refuses it before sending anything.
	other, otherInfo := owner(t, echoDecide, nil)
	impostor := otherInfo
	impostor.Key = info.Key
	if _, err := dialPeer(ctx, impostor); err == nil {
		t.Fatal("a dialer accepted a listener that does not know the owner's key")
	}
	waitRejected(t, other, rejectHandshake, 1)
}

// Garbage, oversized frames, malformed frames and slow handshakes close the
// connection with a count; the listener keeps serving.
func TestDirectRejectsGarbage(t *testing.T) {
	c, info := owner(t, echoDecide, nil, 200*time.Millisecond)
	key, _ := hex.DecodeString(info.Key)

	send := func(t *testing.T, handshake bool, data []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", info.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if handshake {
			if err := dialerHandshake(conn, key); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = conn.Write(data)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		// Closed with unread input, the connection may end in a reset
		// rather than EOF; either way nothing comes back.
		if n, err := io.Copy(io.Discard, conn); n != 0 || isTimeout(err) {
			t.Fatalf("after %q: %d bytes back, %v; want the connection closed", data[:min(len(data), 16)], n, err)
		}
	}

	send(t, false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"+strings.Repeat("x", 100)))
	waitRejected(t, c, rejectHandshake, 1)
	send(t, false, nil) // says nothing: the handshake times out
	waitRejected(t, c, rejectTimeout, 1)

	var big [4]byte
	binary.BigEndian.PutUint32(big[:], maxFrame+1)
	send(t, true, big[:])
	waitRejected(t, c, rejectFrameSize, 1)

	garbage := make([]byte, 300)
	_, _ = rand.Read(garbage)
	garbage[0] = 0xff // never a request type
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(garbage)))
	send(t, true, append(frame, garbage...))
	waitRejected(t, c, rejectMalformed, 1)

	send(t, true, []byte{0, 0, 0, 0}) // an empty frame
	waitRejected(t, c, rejectMalformed, 2)

	// A header promising more than arrives: cut off after frameTimeout.
	send(t, true, binary.BigEndian.AppendUint32(nil, 100))
	waitRejected(t, c, rejectTimeout, 2)

	// Still serving.
	pc, err := dialPeer(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	if _, _, err := pc.roundTrip([]Item{{Key: "k", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
}

// Concurrent batches on one connection are pipelined, and every caller
// gets the answers to its own items, small batches answered in line and
// large ones out of order.
func TestDirectPipelined(t *testing.T) {
	decide := func(items []Item, out []Result) {
		if len(items) > inlineServe {
			time.Sleep(time.Millisecond) // a large batch finishes after later small ones
		}
		echoDecide(items, out)
	}
	_, info := owner(t, decide, nil)
	pc, err := dialPeer(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Go(func() {
			for r := range 50 {
				n := 1 + (g*50+r)%40 // 1..40 items, around inlineServe
				items := make([]Item, n)
				for i := range items {
					items[i] = Item{Key: strings.Repeat("k", 1+g), Cost: int64(g*1_000_000 + r*1000 + i), Now: int64(r)}
				}
				res, _, err := pc.roundTrip(items)
				if err != nil {
					errs <- err
					return
				}
				for i, x := range res {
					o := x.Outcomes[0]
					if o.Remaining != items[i].Cost || o.Limit != int64(1+g) || o.Reset != time.Duration(r) || x.Report != i {
						errs <- fmt.Errorf("goroutine %d request %d item %d: got %+v", g, r, i, x)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A listener with a certificate is dialed over TLS and accepted only with
// the certificate its entry names.
func TestDirectTLSPinned(t *testing.T) {
	_, info := owner(t, echoDecide, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, MinVersion: tls.VersionTLS13})
	if info.Cert == "" {
		t.Fatal("no fingerprint published")
	}
	pc, err := dialPeer(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pc.roundTrip([]Item{{Key: "k"}}); err != nil {
		t.Fatal(err)
	}
	pc.close()
	other := info
	other.Cert = strings.Repeat("00", 32)
	if _, err := dialPeer(context.Background(), other); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a listener with another certificate was accepted: %v", err)
	}
}

func selfSigned(t testing.TB) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// Two members on a real NATS: forwards go over the direct connection once
// it is up, and over NATS while the owner's listener cannot be reached,
// with the same answers.
func TestForwardDirectAndFallback(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Name: "direct-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown) // after the members' Close
	join := func(node string) *Cluster {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(Config{Node: node, LeaseTTL: time.Second, RenewInterval: 100 * time.Millisecond, Margin: 200 * time.Millisecond,
			Direct: &DirectConfig{Listen: "127.0.0.1:0", Host: "h"}}, nc, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Serve(echoDecide); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	a, b := join("a"), join("b")
	waitOwned(t, 10*time.Second, func() bool { _, ok := a.peer("b"); return ok })

	forward := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		res, err := a.Forward(ctx, "b", Item{Key: "xyz", Cost: 3, Consume: true})
		if err != nil || !res.Allowed || res.Outcomes[0].Remaining != 3 || res.Outcomes[0].Limit != 3 {
			t.Fatalf("forward: %+v, %v", res, err)
		}
	}
	batches := func(transport string) float64 {
		return testutil.ToFloat64(a.metrics.batches.WithLabelValues(transport))
	}
	// The first forward finds no connection and goes over NATS while the
	// connection is made; later ones go direct.
	forward()
	if batches("nats") != 1 {
		t.Fatalf("first forward: %v over NATS, want 1", batches("nats"))
	}
	waitOwned(t, 5*time.Second, func() bool { forward(); return batches("direct") > 0 })
	for range 20 {
		forward()
	}
	if got := testutil.ToFloat64(b.metrics.served); got < 22 {
		t.Fatalf("the owner served %v checks", got)
	}

	// The owner's listener goes away (NATS still up): the connection is
	// closed while nobody reads it. The next forward sees that before it
	// writes, redials fail, and NATS carries every forward.
	b.fwd.srv.close()
	before := batches("nats")
	for range 20 {
		forward()
	}
	if got := batches("nats") - before; got != 20 {
		t.Fatalf("%v of 20 forwards over NATS after the listener closed", got)
	}
	waitOwned(t, 5*time.Second, func() bool { forward(); return testutil.ToFloat64(a.metrics.dialFailures) > 0 })
}

// A listener closing (the server stopping) still answers the request it
// is deciding: a decided check's answer is never dropped on the floor,
// which would make the sender ask again and consume twice.
func TestDirectCloseAnswersInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	decide := func(items []Item, out []Result) {
		close(entered)
		<-release
		echoDecide(items, out)
	}
	c, info := owner(t, decide, nil)
	pc, err := dialPeer(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	type answer struct {
		res []Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, _, err := pc.roundTrip([]Item{{Key: "k", Cost: 5}})
		got <- answer{res, err}
	}()
	<-entered
	closed := make(chan struct{})
	go func() { c.fwd.srv.close(); close(closed) }()
	time.Sleep(20 * time.Millisecond) // close is waiting for the decision
	select {
	case <-closed:
		t.Fatal("close returned while a request was being decided")
	default:
	}
	close(release)
	a := <-got
	if a.err != nil || len(a.res) != 1 || a.res[0].Outcomes[0].Remaining != 5 {
		t.Fatalf("in-flight request: %+v, %v", a.res, a.err)
	}
	<-closed
	if _, _, err := pc.roundTrip([]Item{{Key: "k"}}); err == nil {
		t.Fatal("a closed listener answered")
	}
}

// An owner that stops answering fails every forward waiting on the
// connection within fwdTimeout, the one reading it and the ones waiting
// to read, and the connection is not used again.
func TestDirectStuckOwnerTimesOut(t *testing.T) {
	release := make(chan struct{})
	decide := func(items []Item, out []Result) {
		<-release
		echoDecide(items, out)
	}
	_, info := owner(t, decide, nil)
	defer close(release)
	pc, err := dialPeer(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.close()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			_, sent, err := pc.roundTrip([]Item{{Key: "k", Cost: 1}})
			if err == nil || !sent {
				errs <- fmt.Errorf("roundTrip to a stuck owner: sent %v, err %v", sent, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if took := time.Since(start); took > fwdTimeout+time.Second {
		t.Fatalf("forwards to a stuck owner failed after %s, want about %s", took, fwdTimeout)
	}
	if pc.usable(time.Now()) {
		t.Fatal("the connection to a stuck owner is still used")
	}
}

// One source address holds at most maxHandshakesPerAddr handshakes: more
// from it are refused, while another address still gets in.
func TestDirectHandshakesPerAddress(t *testing.T) {
	c, info := owner(t, echoDecide, nil)
	key, _ := hex.DecodeString(info.Key)
	from := func(ip string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
		return d.Dial("tcp", info.Addr)
	}
	// Connections that start the handshake and never finish it.
	var held []net.Conn
	for range maxHandshakesPerAddr {
		conn, err := from("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		_, _ = conn.Write(hello(make([]byte, nonceLen)))
		if _, err := io.ReadFull(conn, make([]byte, len(directMagic)+1+nonceLen+macLen)); err != nil {
			t.Fatalf("held connection: %v", err)
		}
	}
	conn, err := from("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); n != 0 || isTimeout(err) {
		t.Fatalf("a connection over the address's share was served (%d bytes, %v)", n, err)
	}
	conn.Close()
	waitRejected(t, c, rejectAddrBusy, 1)

	other, err := from("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := dialerHandshake(other, key); err != nil {
		t.Fatalf("another address was kept out: %v", err)
	}

	// Once the held ones go, the first address gets in again.
	for _, h := range held {
		h.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := from("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		err = dialerHandshake(conn, key)
		conn.Close()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the address's slots never came back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := rejected(c, rejectTooMany); got != 0 {
		t.Errorf("rejected{too_many_handshakes} = %v, want 0", got)
	}
}

// A Result's JSON (the forward messages of peers without binary frames) is
// what it was when the wire had an outcome type of its own: durations in
// nanoseconds under short names, and it reads back the same.
func TestResultJSONWireForm(t *testing.T) {
	r := Result{Status: StatusOK, Counted: true, Allowed: true, Report: 1, Outcomes: []quota.Outcome{
		{Allowed: true, Limit: 10, Remaining: 9, Reset: 5 * time.Second},
		{Limit: 100, Reset: time.Millisecond, RetryAfter: 2 * time.Second},
	}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"cu":true,"a":true,"rp":1,"o":[{"a":true,"l":10,"r":9,"s":5000000000},{"l":100,"r":0,"s":1000000,"ra":2000000000}]}`
	if string(b) != want {
		t.Fatalf("JSON %s\nwant %s", b, want)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("read back %+v, want %+v", back, r)
	}
	if b, _ := json.Marshal(Result{Status: StatusNotOwner}); string(b) != `{"st":1}` {
		t.Fatalf("a result without outcomes: %s", b)
	}
}
