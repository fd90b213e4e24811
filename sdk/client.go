package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults.
const (
	DefaultTimeout     = 100 * time.Millisecond
	DefaultDenialCache = 10000
	DefaultKeyHeader   = "X-API-Key"

	// managementTimeout bounds management and analytics calls whose context
	// has no deadline of its own.
	managementTimeout = 10 * time.Second
	// failureLogEvery is the least time between two log lines about failures.
	failureLogEvery = 10 * time.Second
)

// Client talks to one Sluice deployment on behalf of one tenant (one service
// key). It is safe for concurrent use; create one per process and share it,
// so that its connections are reused.
type Client struct {
	base     string // scheme://host[/prefix], no trailing slash
	checkURL *url.URL
	batchURL *url.URL

	// checkHeader is shared by every check request. It is never modified
	// after New; it is cloned per request when the http.Client has a cookie
	// jar, because http.Client then adds cookies to the request's header.
	checkHeader http.Header
	// wait is what the middleware's checks may wait (WithWait).
	wait          time.Duration
	cloneHeader   bool
	authorization string

	hc *http.Client
	// rt is the client's own transport, used directly for checks: a check
	// needs none of http.Client's redirects, cookies or timeouts, and
	// skipping it saves the copy of the headers it keeps for redirects.
	// nil when the caller supplied an http.Client.
	rt         http.RoundTripper
	timeout    time.Duration
	failClosed bool
	logger     *slog.Logger // nil: slog.Default() at the time of logging

	keyHeader   string // canonical header name
	bearerJWT   bool   // a non-ck_ bearer token is sent as the check's jwt
	proxies     []netip.Prefix
	proxyHeader string // canonical: "X-Forwarded-For" or "Forwarded"

	denials *denialCache // nil when disabled
	batch   *batcher     // nil unless WithBatching
	strs    interner     // reasons, policy names, tiers, identity kinds
	ids     interner     // identity ids that are not the request's own
	now     func() time.Time

	checks       atomic.Uint64
	failures     atomic.Uint64
	localDenials atomic.Uint64
	lastLog      atomic.Int64 // unix nanoseconds of the last failure log line
	suppressed   atomic.Uint64
}

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout     time.Duration
	failClosed  bool
	hc          *http.Client
	logger      *slog.Logger
	denialSize  int
	proxies     []string
	proxyHeader string
	keyHeader   string
	bearerJWT   bool
	batching    bool
	wait        time.Duration
}

// WithTimeout bounds each check (Check, Peek) to d; default 100 ms. A batch
// gets d plus 100 µs per check. A shorter deadline on the caller's context
// wins.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// FailOpen makes checks that Sluice could not answer allowed (the default).
func FailOpen() Option { return func(o *options) { o.failClosed = false } }

// FailClosed makes checks that Sluice could not answer denied; the
// middleware answers them with 503.
func FailClosed() Option { return func(o *options) { o.failClosed = true } }

// WithHTTPClient makes the client send its requests through hc instead of
// its own transport (tuned for many small requests: keep-alive, up to 256
// idle connections, no compression, no proxy from the environment). hc's
// RoundTripper must not modify requests, as http.RoundTripper requires.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// WithLogger sets the logger for failure lines; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDenialCache sets how many recent denials the client remembers to
// answer repeated checks locally (default 10000); 0 turns the memory off.
func WithDenialCache(size int) Option { return func(o *options) { o.denialSize = size } }

// WithTrustedProxies lists the proxies (CIDRs such as "10.0.0.0/8", or
// single addresses) whose forwarding header the middleware believes. A
// request whose peer is not in the list is identified by its peer address;
// otherwise the client address is the right-most address in the header that
// is not itself a trusted proxy. Without this option, forwarding headers are
// ignored.
func WithTrustedProxies(cidrs ...string) Option {
	return func(o *options) { o.proxies = append(o.proxies, cidrs...) }
}

// WithProxyHeader names the forwarding header the trusted proxies maintain:
// "X-Forwarded-For" (the default) or "Forwarded" (RFC 7239). Only one is
// read: a header the proxies do not maintain is written by the client and
// would let it pick its own address.
func WithProxyHeader(name string) Option { return func(o *options) { o.proxyHeader = name } }

// WithKeyHeader names the request header that carries the caller's API key
// (default "X-API-Key"). "Authorization: Bearer ck_…" is accepted as well.
func WithKeyHeader(name string) Option { return func(o *options) { o.keyHeader = name } }

// WithBearerJWT makes the middleware (and CheckRequestFor) send a bearer
// token in the Authorization header that is not a consumer key ("ck_…") as
// the check's JWT, for apps whose users arrive with a token from the
// tenant's identity provider. Without it such tokens are left alone and
// the caller is counted by its address. A consumer key, in its header or
// as the bearer token, still comes first.
func WithBearerJWT() Option { return func(o *options) { o.bearerJWT = true } }

// WithWait makes the middleware's checks (Middleware, Decide, and the
// Echo middleware, which uses Decide) wait up to d for their bucket when
// a rate limit denies them, instead of answering 429 at once: Sluice
// admits each as soon as its bucket allows, first come first served, and
// the request then proceeds, having waited. d is at most MaxWait; each
// such check's timeout is WithTimeout's plus d. The handler's own
// deadline still wins (the request's context).
func WithWait(d time.Duration) Option { return func(o *options) { o.wait = d } }

// New returns a client for the Sluice at baseURL (for example
// "http://127.0.0.1:8080") that authenticates with serviceKey ("sk_…").
//
// New panics if baseURL is not an absolute http or https URL or an option
// is invalid (a malformed proxy CIDR, a negative size or timeout): these
// are configuration mistakes best caught when the process starts.
func New(baseURL, serviceKey string, opts ...Option) *Client {
	o := options{
		timeout:     DefaultTimeout,
		denialSize:  DefaultDenialCache,
		keyHeader:   DefaultKeyHeader,
		proxyHeader: "X-Forwarded-For",
	}
	for _, opt := range opts {
		opt(&o)
	}

	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		panic(fmt.Sprintf("sluice: New: base URL %q is not an absolute http(s) URL", baseURL))
	}
	if o.timeout <= 0 {
		panic(fmt.Sprintf("sluice: New: timeout %v is not positive", o.timeout))
	}
	if o.wait < 0 || o.wait > MaxWait {
		panic(fmt.Sprintf("sluice: New: wait %v is not between 0 and %v", o.wait, MaxWait))
	}
	if o.denialSize < 0 {
		panic(fmt.Sprintf("sluice: New: denial cache size %d is negative", o.denialSize))
	}
	u.RawQuery, u.Fragment = "", ""

	c := &Client{
		base:          u.String(),
		timeout:       o.timeout,
		wait:          o.wait,
		failClosed:    o.failClosed,
		logger:        o.logger,
		keyHeader:     textproto.CanonicalMIMEHeaderKey(o.keyHeader),
		bearerJWT:     o.bearerJWT,
		proxyHeader:   textproto.CanonicalMIMEHeaderKey(o.proxyHeader),
		authorization: "Bearer " + serviceKey,
		strs:          interner{max: 256},
		ids:           interner{max: 1024},
		now:           time.Now,
	}
	c.checkURL, _ = url.Parse(c.base + "/v1/check")
	c.batchURL, _ = url.Parse(c.base + "/v1/check/batch")
	switch c.proxyHeader {
	case "X-Forwarded-For", "Forwarded":
	default:
		panic(fmt.Sprintf("sluice: New: proxy header %q is neither X-Forwarded-For nor Forwarded", o.proxyHeader))
	}
	for _, s := range o.proxies {
		p, err := parsePrefix(s)
		if err != nil {
			panic(fmt.Sprintf("sluice: New: trusted proxy %q: %v", s, err))
		}
		c.proxies = append(c.proxies, p)
	}

	c.hc = o.hc
	if c.hc == nil {
		t := newTransport()
		c.hc, c.rt = &http.Client{Transport: t}, t
	}
	c.cloneHeader = c.hc.Jar != nil
	c.checkHeader = http.Header{
		"Authorization": {c.authorization},
		"Content-Type":  {"application/json"},
		"Accept":        {"application/json"},
		"User-Agent":    {"sluice-go"},
	}
	if o.denialSize > 0 {
		c.denials = newDenialCache(o.denialSize)
	}
	if o.batching {
		c.batch = &batcher{c: c}
	}
	return c
}

func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// newTransport is tuned for many small requests to one host: connections
// are kept alive and plenty stay idle, bodies are not compressed (they are
// a few hundred bytes), and environment proxies are not consulted, so a
// process-wide HTTP_PROXY does not silently add a hop to every check.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
		DisableCompression:  true,
	}
}

// CloseIdleConnections closes the idle connections of the client's
// transport (or of the http.Client given with WithHTTPClient).
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Stats are the client's counters since New.
type Stats struct {
	Checks       uint64 // checks asked for: Check and Peek calls plus each check of a batch
	Failures     uint64 // checks answered by the failure mode because Sluice did not answer
	LocalDenials uint64 // checks denied from the denial memory without asking Sluice
	Remembered   int    // denials the memory holds now
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := Stats{
		Checks:       c.checks.Load(),
		Failures:     c.failures.Load(),
		LocalDenials: c.localDenials.Load(),
	}
	if c.denials != nil {
		s.Remembered = c.denials.len()
	}
	return s
}

// failure returns the failure-mode decision for n checks Sluice did not
// answer. It counts them and logs, at most once per failureLogEvery, unless
// the caller's own context was canceled: a caller that went away is no
// failure of Sluice's.
func (c *Client) failure(ctx context.Context, err error, n int) Decision {
	d := Decision{Allowed: !c.failClosed, Reason: ReasonUnavailable, Local: true}
	if errors.Is(ctx.Err(), context.Canceled) {
		return d
	}
	total := c.failures.Add(uint64(n))
	now := c.now().UnixNano()
	last := c.lastLog.Load()
	if now-last >= int64(failureLogEvery) && c.lastLog.CompareAndSwap(last, now) {
		mode := "open"
		if c.failClosed {
			mode = "closed"
		}
		l := c.logger
		if l == nil {
			l = slog.Default()
		}
		l.Warn("sluice check failed",
			slog.Any("error", err),
			slog.String("fail_mode", mode),
			slog.Uint64("failures_total", total),
			slog.Uint64("suppressed", c.suppressed.Swap(0)))
	} else {
		c.suppressed.Add(1)
	}
	return d
}
