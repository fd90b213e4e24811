package worker

// The worker's side of webhooks: it turns the quota stream's crossings
// into deliveries (applyQuota, in the stream's batch transaction, so a
// message is acked only once its deliveries are committed), looks for
// new top offenders once a minute, and runs the delivery loop
// (internal/worker/webhook) while it is the active worker.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/tick"
	"github.com/sluicehq/sluice/internal/worker/analytics"
	"github.com/sluicehq/sluice/internal/worker/webhook"
)

// WebhookOptions tune webhook delivery. cmd/worker and cmd/server (for
// its embedded worker) share the flags (RegisterWebhookFlags).
type WebhookOptions struct {
	// AllowPrivate (--webhook-allow-private, SLUICE_WEBHOOK_ALLOW_PRIVATE)
	// lets endpoints point at loopback, private and link-local addresses.
	AllowPrivate bool
	// CAFile (--webhook-ca-file, SLUICE_WEBHOOK_CA_FILE) is a PEM bundle
	// trusted besides the system's certificates.
	CAFile string
	// Timeout (--webhook-timeout, SLUICE_WEBHOOK_TIMEOUT) bounds one
	// delivery attempt.
	Timeout time.Duration
	// Slots (--webhook-slots, SLUICE_WEBHOOK_SLOTS) is how many
	// deliveries are in flight at most, and TenantSlots
	// (--webhook-tenant-slots, SLUICE_WEBHOOK_TENANT_SLOTS) how many of
	// them one tenant's endpoints may hold.
	Slots, TenantSlots int
	// Key (SLUICE_WEBHOOK_KEY, 64 hex characters) seals endpoints'
	// secrets; workers that take over from each other (a standby) must
	// share it. Without it, KeyFile is used.
	Key []byte
	// KeyFile is the key sealing endpoints' secrets when Key is not set,
	// made on first use: webhook.key in the data directory. Empty keeps a
	// key in memory only (tests): secrets are then lost with the process.
	KeyFile string
	// Schedule, Poll, Housekeeping and TopOffenderInterval are for tests:
	// the retry schedule (webhook.DefaultSchedule), how often due
	// deliveries are looked for, how often the deliverer's housekeeping
	// runs (webhook.Config), and how often top offenders are looked for
	// (default 1m).
	Schedule            []time.Duration
	Poll                time.Duration
	Housekeeping        time.Duration
	TopOffenderInterval time.Duration
}

// RegisterWebhookFlags adds the webhook flags to fs, with their
// SLUICE_WEBHOOK_* environment twins read through getenv (the flag wins),
// and sets KeyFile from data once parsed (see WebhookKeyFile).
func RegisterWebhookFlags(fs *flag.FlagSet, o *WebhookOptions, getenv func(string) string) error {
	var bad []error
	allow := false
	if v := getenv("SLUICE_WEBHOOK_ALLOW_PRIVATE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad = append(bad, fmt.Errorf("SLUICE_WEBHOOK_ALLOW_PRIVATE: %q is not true or false", v))
		}
		allow = b
	}
	timeout := 10 * time.Second
	if v := getenv("SLUICE_WEBHOOK_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			bad = append(bad, fmt.Errorf("SLUICE_WEBHOOK_TIMEOUT: %w", err))
		}
		timeout = d
	}
	slots, tenantSlots := 32, 8
	for name, dst := range map[string]*int{"SLUICE_WEBHOOK_SLOTS": &slots, "SLUICE_WEBHOOK_TENANT_SLOTS": &tenantSlots} {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				bad = append(bad, fmt.Errorf("%s: %q is not a whole number", name, v))
			}
			*dst = n
		}
	}
	if v := getenv("SLUICE_WEBHOOK_KEY"); v != "" {
		k, err := hex.DecodeString(v)
		if err != nil || len(k) != 32 {
			bad = append(bad, fmt.Errorf("SLUICE_WEBHOOK_KEY must be 64 hex characters (32 random bytes), e.g. from: openssl rand -hex 32"))
		}
		o.Key = k
	}
	fs.BoolVar(&o.AllowPrivate, "webhook-allow-private", allow, "let webhook endpoints point at loopback, private and link-local addresses; off, they are refused when stored and when connecting (SLUICE_WEBHOOK_ALLOW_PRIVATE)")
	fs.StringVar(&o.CAFile, "webhook-ca-file", getenv("SLUICE_WEBHOOK_CA_FILE"), "PEM certificates webhook endpoints are verified against besides the system's (SLUICE_WEBHOOK_CA_FILE)")
	fs.DurationVar(&o.Timeout, "webhook-timeout", timeout, "how long one webhook delivery attempt may take (SLUICE_WEBHOOK_TIMEOUT)")
	fs.IntVar(&o.Slots, "webhook-slots", slots, "how many webhook deliveries may be in flight at once (SLUICE_WEBHOOK_SLOTS)")
	fs.IntVar(&o.TenantSlots, "webhook-tenant-slots", tenantSlots, "how many of them one tenant's endpoints may hold, so that endpoints that never answer cannot stall other tenants' deliveries; the last this many free slots go only to tenants with none in flight (SLUICE_WEBHOOK_TENANT_SLOTS)")
	return errors.Join(bad...)
}

// Validate rejects bad webhook options.
func (o WebhookOptions) Validate() error {
	if o.Timeout != 0 && (o.Timeout < 100*time.Millisecond || o.Timeout > 5*time.Minute) {
		return fmt.Errorf("--webhook-timeout %s: must be between 100ms and 5m", o.Timeout)
	}
	if o.Slots < 0 || o.Slots > 4096 {
		return fmt.Errorf("--webhook-slots %d: must be between 1 and 4096", o.Slots)
	}
	if o.TenantSlots < 0 || o.Slots > 0 && o.TenantSlots > o.Slots {
		return fmt.Errorf("--webhook-tenant-slots %d: must be between 1 and --webhook-slots (%d)", o.TenantSlots, o.Slots)
	}
	if _, err := webhook.LoadRoots(o.CAFile); err != nil {
		return err
	}
	return nil
}

// WebhookKeyFile is where a worker with data directory data keeps the key
// sealing webhook secrets.
func WebhookKeyFile(data string) string { return filepath.Join(data, webhook.KeyFile) }

// setUpWebhooks makes the sealer and the deliverer.
func (w *Worker) setUpWebhooks() error {
	o := w.cfg.Webhooks
	var sealer *webhook.Sealer
	var err error
	switch {
	case o.Key != nil:
		sealer, err = webhook.NewSealer(o.Key)
	case o.KeyFile != "":
		sealer, err = webhook.LoadSealer(o.KeyFile)
	default:
		key := make([]byte, 32)
		rand.Read(key)
		sealer, err = webhook.NewSealer(key)
	}
	if err != nil {
		return err
	}
	w.store.SetWebhookSealer(sealer)
	roots, err := webhook.LoadRoots(o.CAFile)
	if err != nil {
		return err
	}
	w.webhooks = webhook.New(webhook.Config{AllowPrivate: o.AllowPrivate, RootCAs: roots, Timeout: o.Timeout, Schedule: o.Schedule,
		Concurrency: o.Slots, PerTenant: o.TenantSlots, Poll: o.Poll, Housekeeping: o.Housekeeping,
		Now: w.cfg.Now, Log: w.log.With("component", "webhooks")}, w.store.DeliveryQueue())
	return nil
}

// checkWebhookURL checks where a webhook URL points (configsvc's hook).
func (w *Worker) checkWebhookURL(ctx context.Context, url string) error {
	return webhook.CheckURL(ctx, net.DefaultResolver, url, w.cfg.Webhooks.AllowPrivate)
}

// applyQuota writes the deliveries of the quota crossings of payloads.
func (w *Worker) applyQuota(tx *sql.Tx, payloads []payload) (int, error) {
	var cs []tenants.QuotaCrossing
	for _, b := range decodeBatches(w, payloads, func(b *bus.QuotaBatch) int { return b.V }) {
		cs = append(cs, b.Crossings...)
	}
	if len(cs) == 0 {
		return 0, nil
	}
	n, err := w.store.Outbox().EnqueueQuotaCrossings(context.Background(), tx, cs, w.cfg.Now())
	if err == nil && n > 0 {
		// Committed a moment later; the loop's next look finds them.
		w.webhooks.Kick()
	}
	return n, err
}

// topOffenderWindow is the window top offenders are ranked over, and
// topOffenders how many of them an endpoint hears about.
const (
	topOffenderWindow = time.Hour
	topOffenders      = 10
)

// watchTopOffenders announces, for tenants with an endpoint that wants
// caller.top_offender, the callers that entered their top 10 by denials
// over the last hour.
func (w *Worker) watchTopOffenders(ctx context.Context) {
	every := w.cfg.Webhooks.TopOffenderInterval
	if every <= 0 {
		every = time.Minute
	}
	queries := analytics.Queries{DB: w.db}
	tick.Every(ctx, every, func() {
		ids, err := w.store.Outbox().TenantsWanting(ctx, tenants.EventTopOffender)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("top offenders for webhooks: listing tenants failed", "err", err)
			}
			return
		}
		now := w.cfg.Now()
		from := now.Add(-topOffenderWindow)
		for _, id := range ids {
			top, err := queries.Top(ctx, service.TopQuery{TenantID: id, From: from, To: now, Limit: topOffenders})
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("top offenders for webhooks: ranking failed", "tenant", id, "err", err)
				}
				continue
			}
			var os []tenants.TopOffender
			for i, e := range top {
				if e.Denied > 0 {
					os = append(os, tenants.TopOffender{Identity: e.Identity, Rank: i + 1, Denied: e.Denied, Allowed: e.Allowed})
				}
			}
			if len(os) == 0 {
				continue
			}
			if n, err := w.store.Outbox().EnqueueTopOffenders(ctx, id, os, from, now); err != nil {
				if ctx.Err() == nil {
					w.log.Warn("top offenders for webhooks: enqueue failed", "tenant", id, "err", err)
				}
			} else if n > 0 {
				w.webhooks.Kick()
			}
		}
	})
}
