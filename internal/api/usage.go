package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/engine"
)

// usageLimit is one limit of one policy as a key has used it in its
// current period.
type usageLimit struct {
	Policy    string    `json:"policy"`
	Limit     string    `json:"limit,omitempty"` // the limit's name, when the tier has several
	Tier      string    `json:"tier"`
	Override  bool      `json:"override,omitempty"`
	Quota     int64     `json:"quota"`
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	ResetsAt  time.Time `json:"resets_at"`
	Period    string    `json:"period,omitempty"`
	Calendar  string    `json:"calendar,omitempty"`
}

// keyUsage answers, for each policy that limits the key, what it has used
// of each limit in its current period and when that period resets: read
// from the buckets as a peek reads them, so nothing is taken or counted.
func (h *handler) keyUsage(c echo.Context) error {
	now := h.Now()
	st, err := h.Engine.PeekCaller(tenantID(c), engine.KindKey, c.Param("id"), now)
	if err != nil {
		return err
	}
	out := []usageLimit{}
	for _, p := range st.Policies {
		if p.Unlisted || p.Err != "" {
			continue
		}
		for _, l := range p.Limits {
			u := usageLimit{Policy: p.Policy, Tier: p.Tier, Override: p.Override, Quota: l.Limit, Remaining: l.Remaining,
				Used: max(l.Limit-l.Remaining, 0), Calendar: l.Calendar}
			if name, ok := strings.CutPrefix(l.Name, p.Policy+"."); ok {
				u.Limit = name
			}
			if l.Calendar == "" {
				u.Period = l.Period.String()
			}
			reset := l.Reset
			if l.PeriodEnd > 0 {
				reset = l.PeriodEnd
			}
			u.ResetsAt = now.Add(reset).UTC().Truncate(time.Millisecond)
			out = append(out, u)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"key_id": st.ID, "key_status": st.KeyStatus, "tier": st.Tier, "at": now.UTC().Truncate(time.Millisecond), "usage": out})
}
