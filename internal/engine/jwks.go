package engine

// Fetching issuers' key sets. Every server fetches each issuer's jwks_url
// itself, in the background, and a check only reads the last good set
// (jwksFetcher.keys): a check never waits on an issuer.
//
// Rules this file keeps:
//   - one loop per issuer with a URL, started when its config arrives and
//     stopped when it changes URL or goes; the loop fetches at once, then
//     every Refresh or the answer's Cache-Control max-age clamped to
//     [1 min, 24 h];
//   - a failed fetch keeps the last good set, logs a warning with the
//     attempts so far, counts sluice_jwks_fetch_failures_total, and tries
//     again after a back-off from 30 s doubling up to Refresh: never a
//     tight loop;
//   - a token with a kid the set lacks asks for a fetch now, at most once
//     per 30 s per issuer (unknownKey);
//   - a fetch connects only where netguard allows (https, public
//     addresses, ports 443 and 8443, the dialer checking each address),
//     follows no redirect and no proxy, reads at most
//     tenants.MaxJWKSBytes and gives up after Timeout.

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/netguard"
	"github.com/sluicehq/sluice/internal/tenants"
)

// JWKSOptions tunes the fetching of issuers' key sets.
type JWKSOptions struct {
	// AllowPrivate lets jwks_url reach loopback and private addresses on
	// any port (development, tests).
	AllowPrivate bool
	// RootCAs, when set, are the certificate authorities fetches trust
	// (else the system's).
	RootCAs *x509.CertPool
	// Refresh is how often a set is fetched again when its answer says
	// nothing; default 10 minutes.
	Refresh time.Duration
	// Timeout bounds one fetch; default 5 s.
	Timeout time.Duration
}

// Key set fetching bounds.
const (
	jwksMinAge      = time.Minute
	jwksMaxAge      = 24 * time.Hour
	jwksFirstRetry  = 30 * time.Second
	jwksKickEvery   = 30 * time.Second
	defaultRefresh  = 10 * time.Minute
	defaultJWKSWait = 5 * time.Second
)

// jwksSource is one issuer's fetched set and its loop.
type jwksSource struct {
	id, tenantID, url string
	set               atomic.Pointer[keySet]
	lastKick          atomic.Int64 // unix ns of the last refresh a kid asked for
	kick              chan struct{}
	stop              context.CancelFunc
}

// jwksFetcher holds every issuer's fetched set. It is safe for concurrent
// use.
type jwksFetcher struct {
	opts     JWKSOptions
	client   *http.Client
	log      *slog.Logger
	failures prometheus.Counter

	srcs sync.Map // issuer id -> *jwksSource, read by checks

	mu     sync.Mutex // serialises starting and stopping loops
	ctx    context.Context
	byID   map[string]*jwksSource
	loops  sync.WaitGroup
	closed bool
}

func newJWKSFetcher(opts JWKSOptions, log *slog.Logger, failures prometheus.Counter) *jwksFetcher {
	if opts.Refresh <= 0 {
		opts.Refresh = defaultRefresh
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultJWKSWait
	}
	dialer := &net.Dialer{Timeout: opts.Timeout, Control: netguard.Control(opts.AllowPrivate)}
	tr := &http.Transport{
		Proxy: nil, DialContext: dialer.DialContext, ForceAttemptHTTP2: true,
		TLSClientConfig:     &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: opts.Timeout, ResponseHeaderTimeout: opts.Timeout, MaxIdleConnsPerHost: 1,
	}
	client := &http.Client{Transport: tr, Timeout: opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &jwksFetcher{opts: opts, client: client, log: log, failures: failures, ctx: context.Background(), byID: map[string]*jwksSource{}}
}

// checkJWKSURL checks where a jwks_url points before it is stored: its
// form and, unless allowPrivate, that its host resolves to public
// addresses only. Errors name the field jwks_url.
func checkJWKSURL(ctx context.Context, raw string, allowPrivate bool) error {
	if err := tenants.ValidateJWKSURL(raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	return netguard.CheckHost(ctx, net.DefaultResolver, u, "jwks_url", "JWKS URLs", allowPrivate)
}

// start makes later loops run until ctx ends.
func (f *jwksFetcher) start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctx = ctx
	for _, s := range f.byID {
		f.run(s)
	}
}

// keys answers the last good set of issuer id fetched from url, nil when
// none was.
func (f *jwksFetcher) keys(id, url string) *keySet {
	v, ok := f.srcs.Load(id)
	if !ok {
		return nil
	}
	s := v.(*jwksSource)
	if s.url != url {
		return nil // the issuer moved; its new loop has not fetched yet
	}
	return s.set.Load()
}

// unknownKey asks issuer id's loop to fetch now, unless a token asked
// within the last 30 s.
func (f *jwksFetcher) unknownKey(id string, now time.Time) {
	v, ok := f.srcs.Load(id)
	if !ok {
		return
	}
	s := v.(*jwksSource)
	last := s.lastKick.Load()
	if last != 0 && now.UnixNano()-last < int64(jwksKickEvery) {
		return
	}
	if !s.lastKick.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// load replaces every source with the issuers of a snapshot.
func (f *jwksFetcher) load(all []tenants.JWTIssuer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := map[string]bool{}
	for _, iss := range all {
		keep[iss.ID] = true
		f.setLocked(iss)
	}
	for id := range f.byID {
		if !keep[id] {
			f.dropLocked(id)
		}
	}
}

// changed follows one committed write's changes.
func (f *jwksFetcher) changed(cs []tenants.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		switch c.Kind {
		case tenants.ChangeJWTIssuer:
			if c.JWTIssuer != nil {
				f.setLocked(*c.JWTIssuer)
			}
		case tenants.ChangeJWTIssuerDeleted:
			f.dropLocked(c.ID)
		case tenants.ChangeTenantDeleted:
			for id, s := range f.byID {
				if s.tenantID == c.TenantID {
					f.dropLocked(id)
				}
			}
		}
	}
}

// setLocked starts the loop of an issuer with a URL, unless it runs for
// that URL already; f.mu must be held.
func (f *jwksFetcher) setLocked(iss tenants.JWTIssuer) {
	if old := f.byID[iss.ID]; old != nil {
		if old.url == iss.JWKSURL {
			return
		}
		f.dropLocked(iss.ID)
	}
	if iss.JWKSURL == "" || f.closed {
		return
	}
	s := &jwksSource{id: iss.ID, tenantID: iss.TenantID, url: iss.JWKSURL, kick: make(chan struct{}, 1)}
	f.byID[iss.ID] = s
	f.srcs.Store(iss.ID, s)
	f.run(s)
}

// run starts s's loop under f's context; f.mu must be held.
func (f *jwksFetcher) run(s *jwksSource) {
	if s.stop != nil {
		s.stop()
	}
	ctx, cancel := context.WithCancel(f.ctx)
	s.stop = cancel
	f.loops.Go(func() { f.loop(ctx, s) })
}

func (f *jwksFetcher) dropLocked(id string) {
	if s := f.byID[id]; s != nil {
		s.stop()
		delete(f.byID, id)
		f.srcs.Delete(id)
	}
}

// close stops every loop and waits for them.
func (f *jwksFetcher) close() {
	f.mu.Lock()
	f.closed = true
	for id := range f.byID {
		f.dropLocked(id)
	}
	f.mu.Unlock()
	f.loops.Wait()
}

// loop fetches s's set until ctx ends.
func (f *jwksFetcher) loop(ctx context.Context, s *jwksSource) {
	failed := 0
	for {
		wait, err := f.fetch(ctx, s)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed++
			f.failures.Inc()
			wait = min(jwksFirstRetry<<min(failed-1, 10), f.opts.Refresh)
			f.log.Warn("jwks fetch failed; keeping the last good key set", "issuer_id", s.id, "tenant", s.tenantID,
				"attempts", failed, "has_keys", s.set.Load() != nil, "retry_s", wait.Seconds(), "err", err)
		} else {
			failed = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-s.kick:
			t.Stop()
		}
	}
}

var errNoKeys = errors.New("no usable key")

// fetch gets s's set once and keeps it when it parses; it answers when to
// fetch again after a success.
func (f *jwksFetcher) fetch(ctx context.Context, s *jwksSource) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, tenants.MaxJWKSBytes+1))
	if err != nil {
		return 0, err
	}
	if len(body) > tenants.MaxJWKSBytes {
		return 0, fmt.Errorf("key set larger than %d bytes", tenants.MaxJWKSBytes)
	}
	sum := sha256.Sum256(body)
	if cur := s.set.Load(); cur == nil || cur.sum != sum {
		keys, err := tenants.ParseJWKS(body, false)
		if err != nil {
			return 0, fmt.Errorf("%w: %s", errNoKeys, err)
		}
		s.set.Store(&keySet{keys: keys, sum: sum})
	}
	return refreshAfter(resp.Header.Get("Cache-Control"), f.opts.Refresh), nil
}

// refreshAfter is the answer's max-age clamped to [1 min, 24 h], else def.
func refreshAfter(cacheControl string, def time.Duration) time.Duration {
	for _, d := range strings.Split(cacheControl, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(strings.ToLower(d)), "max-age=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			break
		}
		return min(max(time.Duration(min(n, int64(jwksMaxAge/time.Second)))*time.Second, jwksMinAge), jwksMaxAge)
	}
	return def
}
