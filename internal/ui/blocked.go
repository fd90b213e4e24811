package ui

import (
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/ui/views"
)

// After a block the form redirects with done=blocked and the new block's
// id. The page then names who was blocked, from the block itself as the
// worker stores it (so a crafted link can only name a real block of the
// viewer's own scope), with an Undo button that lifts it. A block that is
// gone or expired meanwhile leaves the plain notice.

// withBlock adds the new block's id to a redirect target.
func withBlock(path, blockID string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "block=" + url.QueryEscape(blockID)
}

// findBlock returns the block the redirect names, if it is still active
// and within tenantID ("" for the operator: any tenant).
func findBlock(c echo.Context, config service.Services, tenantID string, now time.Time) (tenants.Block, bool) {
	id := c.QueryParam("block")
	if c.QueryParam("done") != "blocked" || id == "" {
		return tenants.Block{}, false
	}
	bs, err := config.Blocks.List(c.Request().Context(), tenantID)
	if err != nil {
		return tenants.Block{}, false
	}
	for _, b := range bs {
		if b.ID == id && (tenantID == "" || b.TenantID == tenantID) && b.Active(now) {
			return b, true
		}
	}
	return tenants.Block{}, false
}

// operatorBlocked names the block on an operator page; from says which
// page the undo returns to.
func operatorBlocked(c echo.Context, config service.Services, p *views.Page, now time.Time, from string) {
	b, ok := findBlock(c, config, "", now)
	if !ok {
		return
	}
	n := &views.BlockedNotice{Kind: b.Identity.Kind, ID: blockedID(b.Identity), Until: b.ExpiresAt,
		Undo: views.UndoForm{Action: "/ui/admin/blocks/" + b.ID + "/delete", Fields: []views.Hidden{{Name: "from", Value: from}}}}
	t, err := config.Tenants.Get(c.Request().Context(), b.TenantID)
	if err == nil {
		n.TenantName = t.Name
	}
	p.Blocked = n
}

// tenantBlocked names the block on the tenant's callers page.
func tenantBlocked(c echo.Context, config service.Services, p *views.Page, tenantID string, now time.Time) {
	b, ok := findBlock(c, config, tenantID, now)
	if !ok {
		return
	}
	id := blockedID(b.Identity)
	p.Blocked = &views.BlockedNotice{Kind: b.Identity.Kind, ID: id, Until: b.ExpiresAt,
		Undo: views.UndoForm{Action: "/ui/callers/unblock", Fields: []views.Hidden{
			{Name: "kind", Value: b.Identity.Kind}, {Name: "id", Value: id}, {Name: "block_id", Value: b.ID},
		}}}
}
