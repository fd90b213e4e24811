package cluster

// Direct forwarding. A forward over NATS crosses the broker twice each way
// (four loopback hops between three processes); a connection of its own
// from the receiving server to the owner takes two. So each server also
// listens for forwarded checks (DirectConfig) and other servers keep one
// persistent connection to each owner they forward to, on which batches
// are pipelined as binary frames (wire.go) and answered by id. NATS stays
// the fallback: a forward goes over NATS whenever no direct connection to
// the owner is ready (no address published, a different machine's
// loopback, dial or handshake failed, connection lost before the frame was
// written), so ownership, hand-over and StatusNotOwner work exactly as over
// NATS; the owner runs the same decide function for both.
//
// Authentication. The listener trusts nobody who merely reaches it. Each
// process makes a random 32-byte key at start and publishes it with its
// address in its member entry of the "sluice_members" KV bucket, which only
// Sluice's NATS credentials can read (bus.ServerRole, bus.WorkerRole). A
// connection opens with a mutual challenge-response:
//
//	dialer → owner:  "SLFW" version nonce_d(32)
//	owner  → dialer: "SLFW" version nonce_o(32) HMAC(key, "owner"  | nonce_d | nonce_o)
//	dialer → owner:  HMAC(key, "dialer" | nonce_d | nonce_o)
//	owner  → dialer: 1 (accepted)
//
// key being the owner's. Both sides compare MACs in constant time, so each
// proves it knows the key without sending it: a process that read no
// member entry cannot forward checks (and consume quota), and a process
// that took over the owner's port after it died cannot answer them. A
// connection that fails the handshake, sends a frame over maxFrame or a
// frame that does not decode is closed with a WARN log and counted in
// sluice_cluster_peer_rejected_total.
//
// Transport security. Like the embedded NATS listener, the direct listener
// is loopback unless it has a certificate. Loopback addresses are dialed
// only by servers on the same host (the member entry names the host). A
// listener with a certificate publishes the certificate's SHA-256, and
// dialers accept exactly that certificate: the fingerprint comes from the
// same authenticated bucket as the key, so no CA is needed.
//
// Deadlines. The handshake must finish within handshakeTimeout; a frame's
// body within frameTimeout of its header; an owner drops a connection idle
// for idleTimeout, and a dialer stops using one idle for half of that, so
// it never writes to a connection the owner is closing.

import (
	"bufio"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
)

const (
	directMagic   = "SLFW"
	directVersion = 1
	nonceLen      = 32
	macLen        = sha256.Size
	keyLen        = 32

	handshakeTimeout = 5 * time.Second
	frameTimeout     = 10 * time.Second
	writeTimeout     = 5 * time.Second
	idleTimeout      = 10 * time.Minute
	dialTimeout      = time.Second
	// redialAfter is how long after a failed dial forwards to that owner
	// stay on NATS before the next attempt.
	redialAfter = time.Second
	// maxHandshakes bounds connections not yet authenticated, so whoever
	// reaches the port cannot hold many goroutines; maxHandshakesPerAddr
	// bounds those of one source address (an IPv6 one by its /64), so one
	// source cannot hold them all and keep the other servers out.
	maxHandshakes        = 64
	maxHandshakesPerAddr = 8
)

// DirectConfig makes a server accept forwarded checks on a connection of
// its own (see the top of this file).
type DirectConfig struct {
	// Listen is the host:port to listen on, e.g. 127.0.0.1:0.
	Listen string
	// Advertise is the host:port other servers dial; empty = the address
	// the listener got (which must then not be unspecified, 0.0.0.0).
	Advertise string
	// TLS holds the listener's certificate; nil serves plaintext, which
	// is refused on a non-loopback address.
	TLS *tls.Config
	// Host names this machine: a loopback address is dialed only by
	// servers whose Host is the same.
	Host string

	// handshakeTimeout and frameTimeout replace the defaults (tests).
	handshakeTimeout, frameTimeout time.Duration
}

// peerInfo is what a member entry tells others about its direct listener.
type peerInfo struct {
	Addr string // host:port
	Key  string // hex HMAC key
	Host string
	Cert string // hex SHA-256 of the listener's certificate; "" = plaintext
	IDs  bool   // the listener reads items' ids (flagID)
	// Leases: the listener reads items' leases (flagLease, flagRelease).
	Leases bool
}

// Rejection reasons, the label of sluice_cluster_peer_rejected_total.
const (
	rejectHandshake = "handshake"
	rejectTooMany   = "too_many_handshakes"
	rejectAddrBusy  = "too_many_handshakes_from_address"
	rejectFrameSize = "frame_too_large"
	rejectMalformed = "malformed_frame"
	rejectTimeout   = "timeout"
)

type handshakeError struct {
	reason string
	err    error
}

func (e *handshakeError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

func mac(key []byte, label string, nd, no []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(label))
	h.Write(nd)
	h.Write(no)
	return h.Sum(nil)
}

func hello(nonce []byte) []byte {
	b := make([]byte, 0, len(directMagic)+1+nonceLen+macLen)
	b = append(b, directMagic...)
	b = append(b, directVersion)
	return append(b, nonce...)
}

func readHello(r io.Reader, buf []byte) ([]byte, error) {
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if string(buf[:len(directMagic)]) != directMagic || buf[len(directMagic)] != directVersion {
		return nil, errors.New("not a Sluice forwarding peer, or another protocol version")
	}
	return buf[len(directMagic)+1:], nil
}

// ownerHandshake authenticates a dialer on conn (the listener's side).
func ownerHandshake(conn io.ReadWriter, key []byte) error {
	buf := make([]byte, len(directMagic)+1+nonceLen)
	nd, err := readHello(conn, buf)
	if err != nil {
		return err
	}
	no := make([]byte, nonceLen)
	_, _ = rand.Read(no)
	msg := append(hello(no), mac(key, "owner", nd, no)...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	got := make([]byte, macLen)
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(got, mac(key, "dialer", nd, no)) != 1 {
		return errors.New("the dialer does not know this server's key")
	}
	_, err = conn.Write([]byte{1})
	return err
}

// dialerHandshake authenticates the owner at the other end of conn and
// proves this side knows its key.
func dialerHandshake(conn io.ReadWriter, key []byte) error {
	nd := make([]byte, nonceLen)
	_, _ = rand.Read(nd)
	if _, err := conn.Write(hello(nd)); err != nil {
		return err
	}
	buf := make([]byte, len(directMagic)+1+nonceLen+macLen)
	rest, err := readHello(conn, buf)
	if err != nil {
		return err
	}
	no, got := rest[:nonceLen], rest[nonceLen:]
	if subtle.ConstantTimeCompare(got, mac(key, "owner", nd, no)) != 1 {
		return errors.New("the listener does not know the owner's key (another process at its address?)")
	}
	if _, err := conn.Write(mac(key, "dialer", nd, no)); err != nil {
		return err
	}
	var ok [1]byte
	if _, err := io.ReadFull(conn, ok[:]); err != nil {
		return fmt.Errorf("refused by the owner: %w", err)
	}
	if ok[0] != 1 {
		return errors.New("refused by the owner")
	}
	return nil
}

// readFrame reads one length-prefixed frame into buf (grown as needed)
// and returns its body. body, when set, is called once the header is in,
// so that the caller can give the rest a deadline of its own.
func readFrame(r io.Reader, buf []byte, body func()) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return buf, errMalformed
	}
	if n > maxFrame {
		return buf, errFrameSize
	}
	if body != nil {
		body()
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, err
	}
	return buf, nil
}

var errFrameSize = fmt.Errorf("frame larger than %d bytes", maxFrame)

// ---- The owner's side: the listener. ----

type directServer struct {
	c                       *Cluster
	ln                      net.Listener
	tls                     *tls.Config
	key                     []byte
	decide                  func(items []Item, out []Result)
	slots                   chan struct{}  // handshakes in progress
	bySource                map[string]int // handshakes in progress per source (handshakeSource), under mu
	hsTimeout, frameTimeout time.Duration
	mu                      sync.Mutex
	conns                   map[net.Conn]struct{}
	closing                 atomic.Bool
	wg                      sync.WaitGroup
	// lastWarn limits rejection logs to one a second: whoever reaches the
	// port must not flood the log (the metric counts every one).
	lastWarn   atomic.Int64
	suppressed atomic.Int64
}

// listenDirect opens the listener and returns what this server publishes.
func (c *Cluster) listenDirect(cfg *DirectConfig, decide func([]Item, []Result)) (*directServer, peerInfo, error) {
	if cfg.TLS == nil && !bus.LoopbackListen(cfg.Listen) {
		return nil, peerInfo{}, fmt.Errorf("cluster listener %s is not a loopback address and has no certificate", cfg.Listen)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, peerInfo{}, fmt.Errorf("cluster listener: %w", err)
	}
	adv := cfg.Advertise
	if adv == "" {
		adv = ln.Addr().String()
	}
	if host, _, err := net.SplitHostPort(adv); err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
		_ = ln.Close()
		return nil, peerInfo{}, fmt.Errorf("cluster listener %s: give the address other servers dial (advertise)", adv)
	}
	key := make([]byte, keyLen)
	_, _ = rand.Read(key)
	info := peerInfo{Addr: adv, Key: hex.EncodeToString(key), Host: cfg.Host, IDs: true, Leases: true}
	if cfg.TLS != nil {
		if len(cfg.TLS.Certificates) == 0 || len(cfg.TLS.Certificates[0].Certificate) == 0 {
			_ = ln.Close()
			return nil, peerInfo{}, errors.New("cluster listener: TLS without a certificate")
		}
		sum := sha256.Sum256(cfg.TLS.Certificates[0].Certificate[0])
		info.Cert = hex.EncodeToString(sum[:])
	}
	s := &directServer{c: c, ln: ln, tls: cfg.TLS, key: key, decide: decide,
		slots: make(chan struct{}, maxHandshakes), bySource: map[string]int{}, conns: map[net.Conn]struct{}{},
		hsTimeout: cmp.Or(cfg.handshakeTimeout, handshakeTimeout), frameTimeout: cmp.Or(cfg.frameTimeout, frameTimeout)}
	s.wg.Go(s.accept)
	c.log.Info("cluster listener started", "addr", ln.Addr().String(), "advertise", adv, "tls", cfg.TLS != nil)
	return s, info, nil
}

func (s *directServer) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			s.c.log.Warn("cluster listener accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		src := handshakeSource(conn.RemoteAddr())
		if !s.startHandshake(conn, src) {
			_ = conn.Close()
			continue
		}
		if !s.track(conn) {
			s.endHandshake(src)
			_ = conn.Close()
			return
		}
		s.wg.Go(func() { s.serveConn(conn, src) })
	}
}

// startHandshake takes a handshake slot for a connection from src, or
// rejects it when all slots, or src's share of them, are taken.
func (s *directServer) startHandshake(conn net.Conn, src string) bool {
	s.mu.Lock()
	if s.bySource[src] >= maxHandshakesPerAddr {
		s.mu.Unlock()
		s.reject(conn, rejectAddrBusy, fmt.Errorf("%d connections from this address in their handshake", maxHandshakesPerAddr))
		return false
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.mu.Unlock()
		s.reject(conn, rejectTooMany, errors.New("too many connections in their handshake"))
		return false
	}
	s.bySource[src]++
	s.mu.Unlock()
	return true
}

// endHandshake gives back the slot startHandshake took.
func (s *directServer) endHandshake(src string) {
	s.mu.Lock()
	if s.bySource[src]--; s.bySource[src] <= 0 {
		delete(s.bySource, src)
	}
	s.mu.Unlock()
	<-s.slots
}

// handshakeSource is the source a handshake counts against: the remote IP,
// or for IPv6 its /64 (one host usually holds a whole /64).
func handshakeSource(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

func (s *directServer) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[conn] = struct{}{}
	return true
}

func (s *directServer) reject(conn net.Conn, reason string, err error) {
	s.c.metrics.rejected.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	last := s.lastWarn.Load()
	if now-last < int64(time.Second) || !s.lastWarn.CompareAndSwap(last, now) {
		s.suppressed.Add(1)
		return
	}
	s.c.log.Warn("cluster peer connection rejected", "remote_addr", conn.RemoteAddr().String(), "reason", reason, "err", err,
		"suppressed_since_last", s.suppressed.Swap(0))
}

func (s *directServer) serveConn(raw net.Conn, src string) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
		_ = raw.Close()
	}()
	conn := raw
	_ = conn.SetDeadline(time.Now().Add(s.hsTimeout))
	if s.tls != nil {
		tc := tls.Server(raw, s.tls)
		if err := tc.Handshake(); err != nil {
			s.endHandshake(src)
			s.reject(raw, rejectHandshake, fmt.Errorf("tls: %w", err))
			return
		}
		conn = tc
	}
	err := ownerHandshake(conn, s.key)
	s.endHandshake(src)
	if err != nil {
		reason := rejectHandshake
		if isTimeout(err) {
			reason = rejectTimeout
		}
		s.reject(raw, reason, err)
		return
	}
	_ = conn.SetDeadline(time.Time{})

	var (
		wmu     sync.Mutex
		pending sync.WaitGroup // answers on goroutines of their own
		buf     []byte
		out     []byte
	)
	defer pending.Wait() // every request read is answered before the close
	write := func(frame []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := conn.Write(frame); err != nil {
			_ = raw.Close() // the dialer sees the loss and retries
		}
	}
	br := bufio.NewReaderSize(conn, 32<<10)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(idleTimeout))
		// close sets closing before it cuts every read short, so either
		// this sees it or close's deadline comes after the one just set.
		if s.closing.Load() {
			return
		}
		var err error
		inFrame := false
		buf, err = readFrame(br, buf, func() {
			inFrame = true
			_ = conn.SetReadDeadline(time.Now().Add(s.frameTimeout))
		})
		if err != nil {
			switch {
			case errors.Is(err, errFrameSize):
				s.reject(raw, rejectFrameSize, err)
			case inFrame && isTimeout(err) && !s.closing.Load():
				s.reject(raw, rejectTimeout, err)
			case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, errMalformed):
				s.reject(raw, rejectMalformed, err)
			}
			return // EOF, closed, idle, or draining at Close
		}
		id, items, err := decodeRequest(buf)
		if err != nil {
			s.reject(raw, rejectMalformed, err)
			return
		}
		if len(items) <= inlineServe {
			// Small batches are answered here: no hand-over to another
			// goroutine on the common path.
			res := make([]Result, len(items))
			s.decide(items, res)
			s.c.metrics.served.Add(float64(len(items)))
			out = appendResponse(out[:0], id, res)
			write(out)
			continue
		}
		pending.Go(func() {
			res := make([]Result, len(items))
			s.decide(items, res)
			s.c.metrics.served.Add(float64(len(items)))
			write(appendResponse(nil, id, res))
		})
	}
}

func isTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// close stops accepting and lets every connection finish the request it
// is deciding (its answer is written) before closing it.
func (s *directServer) close() {
	s.mu.Lock()
	s.closing.Store(true)
	for conn := range s.conns {
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
}

// ---- The dialer's side: one connection per owner. ----

var errPeerClosed = errors.New("direct connection closed")

type directReply struct {
	res []Result
	err error
}

// peerConn is an authenticated connection to an owner. Requests are
// written whole under wmu and answered by id, in any order.
//
// Reading. There is no reader goroutine: a caller waiting for its answer
// takes the reading role (the reading token) when nobody holds it, reads
// answers and hands each to its caller until its own comes, and gives the
// role back; a caller waiting without the role takes it as soon as it is
// free. A lone forward is thus read by the goroutine that waits for it,
// which saves waking a second goroutine on every forward.
type peerConn struct {
	conn     net.Conn
	raw      net.Conn // the TCP connection under conn (the same without TLS)
	info     peerInfo
	wmu      sync.Mutex
	wbuf     []byte
	reading  chan struct{} // holds one value while a caller reads
	br       *bufio.Reader // read only by the token's holder
	rbuf     []byte
	mu       sync.Mutex
	nextID   uint64
	waiting  map[uint64]chan directReply
	err      error // set once the connection is unusable
	lastUsed atomic.Int64
}

func dialPeer(ctx context.Context, info peerInfo) (*peerConn, error) {
	key, err := hex.DecodeString(info.Key)
	if err != nil || len(key) != keyLen {
		return nil, errors.New("the member entry has no usable key")
	}
	d := net.Dialer{Timeout: dialTimeout}
	raw, err := d.DialContext(ctx, "tcp", info.Addr)
	if err != nil {
		return nil, err
	}
	conn := raw
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	if info.Cert != "" {
		want, err := hex.DecodeString(info.Cert)
		if err != nil {
			_ = raw.Close()
			return nil, errors.New("the member entry has an unreadable certificate fingerprint")
		}
		tc := tls.Client(raw, &tls.Config{
			MinVersion: tls.VersionTLS13,
			// The owner's certificate is pinned to the fingerprint it
			// published in the members bucket (VerifyConnection), which
			// is as trustworthy as the key; no CA chain is involved.
			InsecureSkipVerify: true, //nolint:gosec // pinned in VerifyConnection
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no certificate")
				}
				return pinned(cs.PeerCertificates[0], want)
			},
		})
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("tls: %w", err)
		}
		conn = tc
	}
	if err := dialerHandshake(conn, key); err != nil {
		_ = raw.Close()
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	pc := &peerConn{conn: conn, raw: raw, info: info, waiting: map[uint64]chan directReply{},
		reading: make(chan struct{}, 1), br: bufio.NewReaderSize(conn, 32<<10)}
	pc.lastUsed.Store(time.Now().UnixNano())
	return pc, nil
}

func pinned(cert *x509.Certificate, want []byte) error {
	got := sha256.Sum256(cert.Raw)
	if subtle.ConstantTimeCompare(got[:], want) != 1 {
		return errors.New("the owner's certificate is not the one its member entry names")
	}
	return nil
}

// readUntil reads answers, handing each to its caller, until ch has one
// (the caller's own), the connection fails, or deadline passes. The caller
// holds the reading token.
func (pc *peerConn) readUntil(ch chan directReply, deadline time.Time) {
	_ = pc.conn.SetReadDeadline(deadline)
	for len(ch) == 0 {
		var err error
		pc.rbuf, err = readFrame(pc.br, pc.rbuf, nil)
		if err != nil {
			if isTimeout(err) {
				// An owner that does not answer in fwdTimeout is stuck
				// or gone: the next forward dials afresh.
				err = errors.New("no answer in time")
			}
			pc.fail(err)
			return
		}
		id, res, err := decodeResponse(pc.rbuf)
		if err != nil {
			pc.fail(err)
			return
		}
		pc.mu.Lock()
		to := pc.waiting[id]
		delete(pc.waiting, id)
		pc.mu.Unlock()
		if to != nil {
			to <- directReply{res: res}
		}
	}
}

// fail makes the connection unusable and answers every waiting request
// with err.
func (pc *peerConn) fail(err error) {
	pc.mu.Lock()
	if pc.err != nil {
		pc.mu.Unlock()
		return
	}
	pc.err = fmt.Errorf("%w: %v", errPeerClosed, err)
	for id, ch := range pc.waiting {
		ch <- directReply{err: pc.err}
		delete(pc.waiting, id)
	}
	pc.mu.Unlock()
	_ = pc.conn.Close()
}

func (pc *peerConn) usable(now time.Time) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.err == nil && now.UnixNano()-pc.lastUsed.Load() < int64(idleTimeout/2)
}

// roundTrip sends items and waits for their results. sent reports whether
// the owner may have received the request: when it is false, nothing was
// decided and the batch may go another way.
func (pc *peerConn) roundTrip(items []Item) (res []Result, sent bool, err error) {
	ch := make(chan directReply, 1)
	pc.mu.Lock()
	if pc.err != nil {
		pc.mu.Unlock()
		return nil, false, pc.err
	}
	if len(pc.waiting) == 0 {
		// Nobody is reading, so nobody has seen whether the owner closed
		// the connection since the last answer (it stopped or died): a
		// peek tells, and the batch goes over NATS instead of into a
		// closed connection.
		if err := probeClosed(pc.raw); err != nil {
			pc.mu.Unlock()
			pc.fail(err)
			return nil, false, fmt.Errorf("%w: %v", errPeerClosed, err)
		}
	}
	pc.nextID++
	id := pc.nextID
	pc.waiting[id] = ch
	pc.mu.Unlock()
	forget := func() {
		pc.mu.Lock()
		delete(pc.waiting, id)
		pc.mu.Unlock()
	}

	pc.wmu.Lock()
	pc.wbuf = appendRequestTo(pc.wbuf[:0], id, items, pc.info.IDs, pc.info.Leases)
	if len(pc.wbuf)-4 > maxFrame {
		pc.wmu.Unlock()
		forget()
		return nil, false, errFrameSize
	}
	_ = pc.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	n, err := pc.conn.Write(pc.wbuf)
	full := n == len(pc.wbuf)
	pc.wmu.Unlock()
	pc.lastUsed.Store(time.Now().UnixNano())
	if err != nil {
		forget()
		pc.fail(err)
		// A frame cut short is never decoded, so never decided.
		return nil, full, err
	}

	deadline := time.Now().Add(fwdTimeout)
	var r directReply
	select {
	case r = <-ch:
	case pc.reading <- struct{}{}:
		pc.readUntil(ch, deadline)
		<-pc.reading
		r = <-ch // readUntil returns once ch has an answer, or after fail answered it
	}
	if r.err == nil && len(r.res) != len(items) {
		return nil, true, errors.New("short answer")
	}
	return r.res, true, r.err
}

func (pc *peerConn) close() { pc.fail(errors.New("closed by this server")) }

// peerSlot is the direct connection to one owner, or its absence.
type peerSlot struct {
	mu      sync.Mutex
	conn    *peerConn
	dialing bool
	retryAt time.Time
	warned  time.Time
}

// direct returns a ready connection to owner, or nil when the forward
// should go over NATS. It never waits for a dial: a missing connection
// is dialed in the background while NATS carries the forwards.
func (f *forwarder) direct(q *ownerQueue) *peerConn {
	info, ok := f.c.peer(q.owner)
	if !ok {
		return nil
	}
	now := time.Now()
	s := &q.direct
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil && (s.conn.info != info || !s.conn.usable(now)) {
		s.conn.close()
		s.conn = nil
	}
	if s.conn != nil {
		return s.conn
	}
	if !s.dialing && !now.Before(s.retryAt) && !f.closed.Load() {
		s.dialing = true
		go f.dial(q, info)
	}
	return nil
}

func (f *forwarder) dial(q *ownerQueue, info peerInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	pc, err := dialPeer(ctx, info)
	cancel()
	s := &q.direct
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = false
	if err != nil {
		s.retryAt = time.Now().Add(redialAfter)
		f.c.metrics.dialFailures.Inc()
		if time.Since(s.warned) >= 30*time.Second {
			s.warned = time.Now()
			f.c.log.Warn("direct connection to the owner failed; forwarding over NATS meanwhile", "owner", q.owner, "addr", info.Addr, "err", err)
		}
		return
	}
	if f.closed.Load() {
		pc.close()
		return
	}
	if s.conn != nil {
		s.conn.close()
	}
	s.conn = pc
	f.c.log.Debug("direct connection to the owner ready", "owner", q.owner, "addr", info.Addr)
}

// peer returns how to reach node directly, if this server may dial it.
func (c *Cluster) peer(node string) (peerInfo, bool) {
	m := c.members.peers.Load()
	if m == nil {
		return peerInfo{}, false
	}
	info, ok := (*m)[node]
	if !ok || info.Addr == "" || node == c.cfg.Node || c.cfg.Direct == nil {
		return peerInfo{}, false
	}
	// Another machine's loopback is not the owner's: stay on NATS.
	if bus.LoopbackListen(info.Addr) && (info.Host == "" || info.Host != c.cfg.Direct.Host) {
		return peerInfo{}, false
	}
	return info, true
}

// LogValue keeps the key out of logs should a peerInfo ever be logged.
func (p peerInfo) LogValue() slog.Value {
	return slog.GroupValue(slog.String("addr", p.Addr), slog.String("host", p.Host), slog.Bool("tls", p.Cert != ""))
}
