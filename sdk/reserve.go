package sdk

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// ReserveOptions shape a reservation. Zero values take Sluice's defaults.
type ReserveOptions struct {
	// Cap is the most a settle may charge; at least the estimate, which is
	// the default.
	Cap int64
	// TTL is how long the reservation waits for its settle (1 s to 24 h;
	// default 15 min). Unsettled, it stands at its estimate.
	TTL time.Duration
}

// Reservation names a reserved estimate, to settle with Settle.
type Reservation struct {
	ID        string    // "" when nothing was reserved (denied, or no limit applied)
	ExpiresAt time.Time // when an unsettled reservation stands at its estimate
}

// Settlement is Sluice's answer to a settle.
type Settlement struct {
	Reservation string    `json:"reservation"`
	Policy      string    `json:"policy"`
	Reserved    int64     `json:"reserved"`
	Cap         int64     `json:"cap"`
	Actual      int64     `json:"actual"`
	Difference  int64     `json:"difference"` // charged (> 0) or given back (< 0)
	SettledAt   time.Time `json:"settled_at"`
	Replayed    bool      `json:"replayed"` // a repeat of an earlier settle; nothing changed again
}

// Reserve is Check for a request whose cost is known only afterwards (an
// LLM call's tokens): it takes estimate units now, as a check of that cost
// would, and answers a Reservation to settle with what the request really
// used. A denial is a Decision with no reservation, not an error.
//
// Reserve always asks Sluice: it neither consults nor fills the denial
// memory and is never batched. When Sluice could not answer, err says why
// and d is the failure-mode decision (see FailOpen), with no reservation.
// The Decision's Header is nil; WriteHeaders derives the headers from its
// fields.
func (c *Client) Reserve(ctx context.Context, req CheckRequest, estimate int64, opts ReserveOptions) (Decision, Reservation, error) {
	c.checks.Add(1)
	body := struct {
		APIKey     string `json:"api_key,omitempty"`
		JWT        string `json:"jwt,omitempty"`
		IP         string `json:"ip,omitempty"`
		Method     string `json:"method,omitempty"`
		Path       string `json:"path"`
		Reserve    int64  `json:"reserve"`
		ReserveCap int64  `json:"reserve_cap,omitempty"`
		ReserveTTL string `json:"reserve_ttl,omitempty"`
	}{APIKey: req.APIKey, JWT: req.JWT, IP: req.IP, Method: req.Method, Path: req.Path, Reserve: estimate, ReserveCap: opts.Cap}
	if opts.TTL > 0 {
		body.ReserveTTL = opts.TTL.String()
	}
	var a struct {
		Allowed              bool      `json:"allowed"`
		Reason               string    `json:"reason"`
		Policy               *string   `json:"policy"`
		Tier                 *string   `json:"tier"`
		Identity             Identity  `json:"identity"`
		Limit                int64     `json:"limit"`
		Remaining            int64     `json:"remaining"`
		ResetMS              int64     `json:"reset_ms"`
		RetryAfterMS         *int64    `json:"retry_after_ms"`
		ShadowDenied         bool      `json:"shadow_denied"`
		Reservation          string    `json:"reservation"`
		ReservationExpiresAt time.Time `json:"reservation_expires_at"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/check", nil, body, &a); err != nil {
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			// Bad input or a refused credential is the caller's to fix,
			// not an outage to fail open or closed over.
			return Decision{}, Reservation{}, err
		}
		return c.failure(ctx, err, 1), Reservation{}, err
	}
	d := Decision{Allowed: a.Allowed, Reason: a.Reason, Identity: a.Identity, Limit: a.Limit, Remaining: a.Remaining,
		Reset: millis(a.ResetMS), ShadowDenied: a.ShadowDenied}
	if a.Policy != nil {
		d.Policy = *a.Policy
	}
	if a.Tier != nil {
		d.Tier = *a.Tier
	}
	if a.RetryAfterMS != nil { // null (no wait helps) reads as 0, as Check reads it
		d.RetryAfter = millis(*a.RetryAfterMS)
	}
	return d, Reservation{ID: a.Reservation, ExpiresAt: a.ReservationExpiresAt}, nil
}

// settleAttempts is how often Settle asks before it gives up on an
// unavailable Sluice: a settle is idempotent, so asking again is safe.
const settleAttempts = 3

// maxSettleWait is the longest Retry-After of a rate_limited settle that
// Settle waits out before asking again; a longer one is the caller's.
const maxSettleWait = 2 * time.Second

// Settle settles a reservation with the units the request really used:
// Sluice gives back the difference (actual below the estimate) or charges
// it (above, up to the reservation's cap). It is idempotent: a repeat
// with the same actual answers Replayed and changes nothing, so Settle
// asks again, up to three times, when Sluice is unavailable or
// unreachable, or refused it past the tenant's settles a second (after the
// answer's Retry-After, when that is at most 2 s). A reservation with no ID (nothing was reserved) needs no
// settle; Settle answers a zero Settlement for it.
func (c *Client) Settle(ctx context.Context, r Reservation, actual int64) (Settlement, error) {
	var s Settlement
	if r.ID == "" {
		return s, nil
	}
	body := struct {
		Reservation string `json:"reservation"`
		Actual      int64  `json:"actual"`
	}{r.ID, actual}
	var err error
	for attempt := 1; attempt <= settleAttempts; attempt++ {
		err = c.do(ctx, http.MethodPost, "/v1/settle", nil, body, &s)
		wait := time.Duration(attempt) * 100 * time.Millisecond
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Code == CodeRateLimited && apiErr.RetryAfter > 0 && apiErr.RetryAfter <= maxSettleWait {
			wait = apiErr.RetryAfter // refused before anything was done: safe to send again
		} else if err == nil || (apiErr != nil && apiErr.Status < 500) {
			break
		}
		if ctx.Err() != nil || attempt == settleAttempts {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return s, err
}
