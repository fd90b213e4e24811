package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
)

type releaseBody struct {
	Lease string `json:"lease"`
}

// releaseAnswer is POST /v1/release's answer. Released is true when this
// call gave the slot back; Status says why not otherwise, and Message
// says it in a sentence naming the field.
type releaseAnswer struct {
	Lease          string    `json:"lease"`
	Released       bool      `json:"released"`
	Status         string    `json:"status"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	Message        string    `json:"message,omitempty"`
}

// release gives back the slot a check's lease holds. It is idempotent: a
// lease released before, or expired, answers 200 with released false and
// changes nothing; an unknown, malformed or another tenant's lease
// answers 404.
func (h releaseRoutes) release(c echo.Context) error {
	now := h.Now()
	var b releaseBody
	if err := bind(c, &b); err != nil {
		return err
	}
	if b.Lease == "" {
		return errs.Errorf(errs.Invalid, "lease: required, the id an allowed check answered")
	}
	r, err := h.Engine.Release(c.Request().Context(), tenantID(c), b.Lease, now)
	if err != nil {
		return err
	}
	out := releaseAnswer{Lease: b.Lease, Released: r.Status == engine.LeaseReleased, Status: r.Status, LeaseExpiresAt: r.Expires}
	switch r.Status {
	case engine.LeaseAlreadyReleased:
		out.Message = "lease: already released; nothing changed"
	case engine.LeaseExpired:
		out.Message = "lease: expired at " + r.Expires.Format(time.RFC3339) + " and its slot was freed then; nothing changed"
	}
	return c.JSON(http.StatusOK, out)
}
