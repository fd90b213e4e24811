// Package webhook sends the webhook outbox (tenants/webhooks.go) to
// tenants' endpoints: the worker runs one Deliverer while it is the
// active worker.
//
// The loop. Every Poll, or when kicked, the deliverer reads the endpoints
// with a queue due (one queue per endpoint and ordering key), then a few
// due queues of each, takes each queue's first pending delivery and sends
// it on a pool of Concurrency goroutines. At most one delivery of a queue
// is in flight, at most PerEndpoint of one endpoint and at most PerTenant
// of one tenant's endpoints, the last PerTenant free slots going only to
// tenants with none in flight (slots.go); free slots go round the tenants
// with something due, one at a time, starting after the tenant served
// last: a tenant whose endpoints never answer holds its share of the pool
// and never the others', and the order among tenants is fair, not oldest
// first. A poll reads one row per due endpoint and at most as many queues
// of each as it may start, whatever an endpoint's backlog. Outcomes are
// written in batches by one goroutine (the store's one writer), and a
// queue is taken again only once its last outcome is committed: that is
// what keeps deliveries of a key in order. A delivery that fails is
// retried on Schedule; after the last retry it is marked failed and the
// next of its key goes.
//
// Nothing is lost across restarts: the outbox is in SQLite. An attempt in
// flight when the worker stops is not recorded and is made again: delivery
// is at least once, and receivers tell repeats apart by webhook-id.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/tick"
)

// DefaultSchedule is when a failed delivery is tried again, after each
// failed attempt in turn (Standard Webhooks' reference schedule): the last
// retry comes about 27 h after the first attempt.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Config tunes a Deliverer; a zero field takes its default.
type Config struct {
	// AllowPrivate lets endpoints reach loopback, private and link-local
	// addresses (the operator's --webhook-allow-private).
	AllowPrivate bool
	// RootCAs are the certificates endpoints are verified against; the
	// system's when nil.
	RootCAs *x509.CertPool
	// Timeout bounds one attempt, from dialing to the response's
	// headers and the first bytes of its body. Default 10s.
	Timeout time.Duration
	// Schedule is the wait before each retry; DefaultSchedule when nil.
	Schedule []time.Duration
	// Concurrency is how many deliveries are in flight at most. Default 32.
	Concurrency int
	// PerEndpoint is how many of them may be to one endpoint (each of a
	// different ordering key). Default 8.
	PerEndpoint int
	// PerTenant is how many of them may be to one tenant's endpoints.
	// Default a quarter of Concurrency.
	PerTenant int
	// Poll is how often due deliveries are looked for. Default 200ms.
	Poll time.Duration
	// Housekeeping is how often the pending gauge and the tenants' dropped
	// deliveries are read, and deleted endpoints' deliveries removed.
	// Default 5s.
	Housekeeping time.Duration
	// Retention is how long delivered and failed deliveries are kept.
	// Default 30 days.
	Retention time.Duration
	Now       func() time.Time
	Log       *slog.Logger
}

// MaxResponseBody is the most of a response's body read (and kept, in part,
// as the error of a failed attempt).
const MaxResponseBody = 4 << 10

// Deliverer sends the outbox.
type Deliverer struct {
	cfg     Config
	queue   *tenants.DeliveryQueue
	client  *http.Client
	kick    chan struct{}
	results chan tenants.Attempt
	metrics metrics

	slots *slots

	mu          sync.Mutex
	secretCache map[string]cachedSecrets

	// drops is each tenant's count of dropped deliveries at the last look
	// (housekeeping's alone).
	drops map[string]int64
}

type metrics struct {
	outcomes *prometheus.CounterVec
	pending  prometheus.Gauge
	latency  prometheus.Histogram
	dropped  prometheus.Counter
}

// New returns a deliverer of q's outbox.
func New(cfg Config, q *tenants.DeliveryQueue) *Deliverer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Schedule == nil {
		cfg.Schedule = DefaultSchedule
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = 8
	}
	if cfg.PerTenant <= 0 {
		cfg.PerTenant = max(1, cfg.Concurrency/4)
	}
	cfg.PerTenant = min(cfg.PerTenant, cfg.Concurrency)
	cfg.PerEndpoint = min(cfg.PerEndpoint, cfg.PerTenant)
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.Housekeeping <= 0 {
		cfg.Housekeeping = 5 * time.Second
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 30 * 24 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second, Control: control(cfg.AllowPrivate)}
	tr := &http.Transport{
		Proxy:               nil, // a proxy would reach addresses the dialer never sees
		DialContext:         dialer.DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: cfg.Timeout,
		MaxIdleConnsPerHost: cfg.PerEndpoint,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	d := &Deliverer{
		cfg: cfg, queue: q, kick: make(chan struct{}, 1), results: make(chan tenants.Attempt, cfg.Concurrency),
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		slots:  newSlots(cfg.Concurrency, cfg.PerEndpoint, cfg.PerTenant), secretCache: map[string]cachedSecrets{},
	}
	d.metrics = metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_webhook_attempts_total",
			Help: "Webhook delivery attempts, by outcome: delivered, retry (failed, tried again later) or failed (failed for good)."}, []string{"outcome"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_webhook_pending_deliveries",
			Help: "Webhook deliveries not yet delivered or failed for good, due or waiting for a retry."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_webhook_attempt_seconds",
			Help: "Time of one webhook delivery attempt, until the response or the failure.", Buckets: prometheus.DefBuckets}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_webhook_dropped_total",
			Help: "Pending webhook deliveries dropped unsent because their tenant's outbox was at its bound."}),
	}
	return d
}

// Collectors are the deliverer's metrics.
func (d *Deliverer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{d.metrics.outcomes, d.metrics.pending, d.metrics.latency, d.metrics.dropped}
}

// LoadRoots answers the system's certificates with those of the PEM file
// at path added (--webhook-ca-file), or nil (the system's) when path is
// empty.
func LoadRoots(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--webhook-ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--webhook-ca-file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// Kick makes the loop look for due deliveries now.
func (d *Deliverer) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends.
func (d *Deliverer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { d.record(ctx) })
	wg.Go(func() {
		d.drops, _ = d.queue.Drops(ctx)
		tick.Every(ctx, d.cfg.Housekeeping, func() { d.housekeep(ctx) })
	})
	wg.Go(func() { tick.Every(ctx, 10*time.Minute, func() { d.prune(ctx) }) })
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	var attempts sync.WaitGroup
	for ctx.Err() == nil {
		d.claim(ctx, &attempts)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-d.kick:
		}
	}
	attempts.Wait()
	wg.Wait()
}

// claim starts the first delivery of due queues, as far as the pool and
// the bounds per tenant and per endpoint allow, the tenants taking turns.
func (d *Deliverer) claim(ctx context.Context, attempts *sync.WaitGroup) {
	now := d.cfg.Now()
	free, mark := d.slots.read()
	if free <= 0 {
		return
	}
	// Releases before the read are in what it read.
	defer d.slots.forget(mark)
	eps, err := d.queue.DueEndpoints(ctx, now)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Log.Warn("reading due webhook deliveries failed; will retry", "err", err)
		}
		return
	}
	turns := turnsAfter(eps, d.slots.after())
	for free > 0 && len(turns) > 0 {
		// One round: each tenant with something due starts at most one
		// delivery.
		next := turns[:0]
		for _, t := range turns {
			if free == 0 {
				break
			}
			if d.startOne(ctx, t, now, mark, attempts) {
				free--
			}
			if len(t.endpoints) > 0 {
				next = append(next, t)
			}
		}
		turns = next
	}
}

// tenantTurn is a tenant's due endpoints in a claim, each with the
// queues read of it so far.
type tenantTurn struct {
	tenantID  string
	endpoints []*dueEndpoint
}

type dueEndpoint struct {
	id     string
	queues []tenants.DueQueue
	read   bool
}

// turnsAfter groups due endpoints by tenant (eps are by tenant), in the
// order tenants take turns: starting after last, the tenant served last.
func turnsAfter(eps []tenants.DueEndpoint, last string) []*tenantTurn {
	var ts []*tenantTurn
	for _, e := range eps {
		if len(ts) == 0 || ts[len(ts)-1].tenantID != e.TenantID {
			ts = append(ts, &tenantTurn{tenantID: e.TenantID})
		}
		t := ts[len(ts)-1]
		t.endpoints = append(t.endpoints, &dueEndpoint{id: e.WebhookID})
	}
	first := 0
	for first < len(ts) && ts[first].tenantID <= last {
		first++
	}
	return append(ts[first:len(ts):len(ts)], ts[:first]...)
}

// startOne starts one delivery of the tenant's, taking its endpoints in
// turn, and reports whether it did. Endpoints with nothing startable left
// are removed from t.
func (d *Deliverer) startOne(ctx context.Context, t *tenantTurn, now time.Time, mark uint64, attempts *sync.WaitGroup) bool {
	for len(t.endpoints) > 0 {
		if d.slots.tenantFull(t.tenantID) {
			t.endpoints = nil
			return false
		}
		e := t.endpoints[0]
		q, ok := d.nextQueue(ctx, e, now, mark)
		if !ok {
			t.endpoints = t.endpoints[1:]
			continue
		}
		// The endpoint goes to the back: the tenant's next turn is
		// another endpoint's, if it has one.
		t.endpoints = append(t.endpoints[1:], e)
		head, ok, err := d.queue.Head(ctx, q)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Log.Warn("reading a webhook delivery failed; will retry", "webhook", q.WebhookID, "err", err)
			}
			continue
		}
		if !ok || head.Due.After(now) {
			// Empty, or its first delivery waits for a retry or its time.
			if err := d.queue.Refresh(ctx, q); err != nil && ctx.Err() == nil {
				d.cfg.Log.Warn("updating a webhook queue failed", "webhook", q.WebhookID, "err", err)
			}
			continue
		}
		if !d.slots.take(q, t.tenantID) {
			continue
		}
		attempts.Go(func() {
			a, ok := d.attempt(ctx, head)
			if !ok {
				d.release([]tenants.Attempt{{WebhookID: q.WebhookID, OrderKey: q.OrderKey}})
				return
			}
			select {
			case d.results <- a:
			case <-ctx.Done():
				d.release([]tenants.Attempt{a})
			}
		})
		return true
	}
	return false
}

// nextQueue answers the endpoint's next due queue that may start,
// reading, at its first call in a claim, as many of its due queues as may
// start plus those in flight (which are still due).
func (d *Deliverer) nextQueue(ctx context.Context, e *dueEndpoint, now time.Time, mark uint64) (tenants.DueQueue, bool) {
	if !e.read {
		e.read = true
		inflight, room := d.slots.endpointRoom(e.id)
		if room == 0 {
			return tenants.DueQueue{}, false
		}
		qs, err := d.queue.DueQueues(ctx, e.id, now, inflight+room)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Log.Warn("reading due webhook deliveries failed; will retry", "webhook", e.id, "err", err)
			}
			return tenants.DueQueue{}, false
		}
		e.queues = qs
	}
	for len(e.queues) > 0 {
		q := e.queues[0]
		e.queues = e.queues[1:]
		if d.slots.startable(q, mark) {
			return q, true
		}
	}
	return tenants.DueQueue{}, false
}

// release lets the loop take the attempts' queues again.
func (d *Deliverer) release(as []tenants.Attempt) {
	for _, a := range as {
		d.slots.release(tenants.DueQueue{WebhookID: a.WebhookID, OrderKey: a.OrderKey})
	}
}

// record writes outcomes, as many as are waiting in one transaction, and
// only then releases their queues.
func (d *Deliverer) record(ctx context.Context) {
	for {
		var batch []tenants.Attempt
		select {
		case <-ctx.Done():
			return
		case a := <-d.results:
			batch = append(batch, a)
		}
	more:
		for len(batch) < 512 {
			select {
			case a := <-d.results:
				batch = append(batch, a)
			default:
				break more
			}
		}
		for {
			err := d.queue.RecordAttempts(ctx, batch)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				// Not recorded: these deliveries are attempted again
				// after a restart (at least once).
				d.release(batch)
				return
			}
			d.cfg.Log.Error("recording webhook attempts failed; will retry", "attempts", len(batch), "err", err)
			time.Sleep(time.Second)
		}
		d.release(batch)
		d.Kick()
	}
}

// attempt sends one delivery and answers its outcome; ok is false when
// the attempt did not happen (the worker is stopping, the endpoint was
// deleted).
func (d *Deliverer) attempt(ctx context.Context, del tenants.OutboxDelivery) (tenants.Attempt, bool) {
	start := d.cfg.Now()
	a := tenants.Attempt{RowID: del.RowID, WebhookID: del.WebhookID, OrderKey: del.OrderKey, At: start}
	secrets, err := d.secrets(ctx, del.WebhookID, start)
	switch {
	case ctx.Err() != nil:
		return a, false
	case errs.Is(err, errs.NotFound):
		return a, false // deleted meanwhile, with its deliveries
	case err != nil:
		// Failed like an attempt, so that it is retried on the schedule,
		// logged and listed rather than skipped in silence.
		err = fmt.Errorf("cannot sign (is this worker's %s the one that sealed the endpoint's secret?): %w", KeyFile, err)
	}
	actx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	var req *http.Request
	if err == nil {
		req, err = http.NewRequestWithContext(actx, http.MethodPost, del.URL, bytes.NewReader(del.Payload))
	}
	if err == nil {
		ts := start.Unix()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "Sluice-Webhooks/1")
		req.Header.Set("webhook-id", del.MsgID)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", Sign(secrets, del.MsgID, ts, del.Payload))
		var resp *http.Response
		resp, err = d.client.Do(req)
		if err == nil {
			a.Code = resp.StatusCode
			// At most MaxResponseBody is read: a receiver's answer costs
			// the worker little however large it is.
			head, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody))
			resp.Body.Close()
			if a.Code >= 200 && a.Code < 300 {
				a.Delivered = true
			} else {
				err = fmt.Errorf("HTTP %d: %s", a.Code, strings.TrimSpace(string(head[:min(len(head), 200)])))
			}
		}
	}
	if ctx.Err() != nil {
		return a, false
	}
	a.Latency = d.cfg.Now().Sub(start)
	d.metrics.latency.Observe(a.Latency.Seconds())
	if a.Delivered {
		d.metrics.outcomes.WithLabelValues("delivered").Inc()
		return a, true
	}
	a.Err = describe(err, d.cfg.Timeout)
	attempt := del.Step + 1
	if del.Step < len(d.cfg.Schedule) {
		wait := d.cfg.Schedule[del.Step]
		a.Retry = start.Add(wait)
		d.metrics.outcomes.WithLabelValues("retry").Inc()
		d.cfg.Log.Warn("webhook delivery failed; will retry", "tenant", del.TenantID, "webhook", del.WebhookID, "delivery", del.MsgID,
			"event", del.Event, "attempt", attempt, "attempts_max", len(d.cfg.Schedule)+1, "retry_in", wait.String(), "status", a.Code, "err", a.Err)
		return a, true
	}
	d.metrics.outcomes.WithLabelValues("failed").Inc()
	d.cfg.Log.Warn("webhook delivery failed for good after its last retry; the next of its key goes now", "tenant", del.TenantID,
		"webhook", del.WebhookID, "delivery", del.MsgID, "event", del.Event, "attempts", attempt, "status", a.Code, "err", a.Err)
	return a, true
}

// secretsTTL is how long an endpoint's opened secrets are kept in memory:
// a rotation signs with the new secret within it.
const secretsTTL = time.Second

type cachedSecrets struct {
	secrets []string
	until   time.Time
}

// secrets answers the secrets an endpoint's deliveries are signed with,
// opened at most once a secretsTTL.
func (d *Deliverer) secrets(ctx context.Context, webhookID string, now time.Time) ([]string, error) {
	d.mu.Lock()
	c, ok := d.secretCache[webhookID]
	d.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.secrets, nil
	}
	ss, err := d.queue.Secrets(ctx, webhookID, now)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if len(d.secretCache) > 10_000 {
		clear(d.secretCache)
	}
	d.secretCache[webhookID] = cachedSecrets{secrets: ss, until: now.Add(secretsTTL)}
	d.mu.Unlock()
	return ss, nil
}

// describe says why an attempt failed, for the deliveries list.
func describe(err error, timeout time.Duration) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errRefused):
		// The dial error around it names the address.
		return errRefused.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer within " + timeout.String()
	}
	return err.Error()
}

// housekeep sets the pending gauge, reports the deliveries tenants'
// bounds dropped since its last look, and removes deleted endpoints'
// deliveries, a batch per transaction.
func (d *Deliverer) housekeep(ctx context.Context) {
	if n, err := d.queue.Pending(ctx); err == nil {
		d.metrics.pending.Set(float64(n))
	}
	if drops, err := d.queue.Drops(ctx); err == nil {
		for tenantID, n := range drops {
			if more := n - d.drops[tenantID]; more > 0 && d.drops != nil {
				d.metrics.dropped.Add(float64(more))
				d.cfg.Log.Warn("a tenant's webhook outbox is full: its oldest pending deliveries were dropped unsent",
					"tenant", tenantID, "dropped", more, "dropped_total", n)
			}
		}
		d.drops = drops
	}
	for ctx.Err() == nil {
		n, err := d.queue.PurgeDeleted(ctx, purgeBatch)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Log.Warn("removing a deleted webhook's deliveries failed; will retry", "err", err)
			}
			return
		}
		if n == 0 {
			return
		}
	}
}

// purgeBatch is how many rows of a deleted endpoint one transaction
// removes.
const purgeBatch = 1000

// prune deletes deliveries done before the retention, in batches.
func (d *Deliverer) prune(ctx context.Context) {
	now := d.cfg.Now()
	for ctx.Err() == nil {
		n, err := d.queue.Prune(ctx, now.Add(-d.cfg.Retention), now, 1000)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Log.Warn("pruning old webhook deliveries failed; will retry", "err", err)
			}
			return
		}
		if n < 1000 {
			return
		}
	}
}
