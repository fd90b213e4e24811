package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// Lease names a slot of a concurrency limit that an allowed check took.
type Lease struct {
	ID        string    // "" when no slot was taken (denied, or no concurrency limit applied)
	ExpiresAt time.Time // when Sluice frees the slot by itself if it is not released
}

// Release statuses (Released.Status).
const (
	LeaseReleased        = "released"         // this call gave the slot back
	LeaseAlreadyReleased = "already_released" // released before; nothing changed
	LeaseExpired         = "expired"          // its TTL had passed and freed the slot; nothing changed
)

// Released is Sluice's answer to a release.
type Released struct {
	Lease          string    `json:"lease"`
	Released       bool      `json:"released"`
	Status         string    `json:"status"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Message        string    `json:"message"`
}

// Acquire is Check for a request that holds a slot of a concurrency limit
// while it runs (a stream, an export): an allowed check under such a limit
// takes a slot for at most ttl (1 s to 24 h; 0 takes Sluice's default,
// 60 s) and answers its Lease, which the caller gives back with Release
// when the request ends. A check under rate limits only answers a Lease
// with no ID. A denial is a Decision, not an error; when Sluice could not
// answer, err says why and d is the failure-mode decision, with no lease.
func (c *Client) Acquire(ctx context.Context, req CheckRequest, ttl time.Duration) (Decision, Lease, error) {
	req.LeaseTTL, req.Peek = ttl, false
	d, err := c.Check(ctx, req)
	return d, Lease{ID: d.Lease, ExpiresAt: d.LeaseExpiresAt}, err
}

// releaseAttempts is how often Release asks before it gives up on an
// unavailable Sluice: a release is idempotent, so asking again is safe.
const releaseAttempts = 3

// Release gives back the slot of l. It is idempotent: a lease released
// before, or expired, answers Released false with its Status and changes
// nothing, so Release asks again, up to three times, when Sluice is
// unavailable or unreachable. A lease with no ID needs no release;
// Release answers a zero Released for it. An unknown or another tenant's
// lease is an *Error with Code "not_found".
func (c *Client) Release(ctx context.Context, l Lease) (Released, error) {
	var r Released
	if l.ID == "" {
		return r, nil
	}
	body := struct {
		Lease string `json:"lease"`
	}{l.ID}
	var err error
	for attempt := 1; attempt <= releaseAttempts; attempt++ {
		err = c.do(ctx, http.MethodPost, "/v1/release", nil, body, &r)
		var apiErr *Error
		if err == nil || (errors.As(err, &apiErr) && apiErr.Status < 500) || ctx.Err() != nil || attempt == releaseAttempts {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
	return r, err
}

// releaseAfter gives back d's slot when the request it admitted has
// ended, however it ended; the middleware defers it. The request's own
// context may be cancelled by then, so the release runs on one that is
// not, bounded by releaseWait: the response waits for it, and a release
// that does not land frees its slot at the lease's expiry anyway.
func (c *Client) releaseAfter(ctx context.Context, d *Decision) {
	if d.Lease == "" {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.releaseWait())
	defer cancel()
	if _, err := c.Release(rctx, Lease{ID: d.Lease, ExpiresAt: d.LeaseExpiresAt}); err != nil {
		c.logFailure("release", err)
	}
}

// releaseWait bounds the middleware's release, retries included: ten
// check timeouts (1 s with the default 100 ms).
func (c *Client) releaseWait() time.Duration { return 10 * c.timeout }

// ReleaseAfter is what the middleware defers after an allowed request: it
// gives back the slot d took of a concurrency limit, if any, logging a
// failure (the slot then frees itself at d.LeaseExpiresAt). Other
// frameworks' middleware defers it too, so that it runs when the handler
// returns, fails or panics.
func (c *Client) ReleaseAfter(ctx context.Context, d Decision) { c.releaseAfter(ctx, &d) }

// logFailure logs a failed call other than a check, at most once per
// failure-log interval, as failed checks are.
func (c *Client) logFailure(what string, err error) {
	now := c.now().UnixNano()
	last := c.lastLog.Load()
	if now-last < int64(failureLogEvery) || !c.lastLog.CompareAndSwap(last, now) {
		c.suppressed.Add(1)
		return
	}
	l := c.logger
	if l == nil {
		l = slog.Default()
	}
	l.Warn("sluice "+what+" failed", slog.Any("error", err), slog.Uint64("suppressed", c.suppressed.Swap(0)))
}
