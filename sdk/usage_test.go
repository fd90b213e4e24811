package sdk

import (
	"context"
	"testing"
)

// Usage follows next_cursor to the last page and answers every page's
// rows in order, with the range's total; a server that answers the same
// cursor again is an error, not an endless loop.
func TestUsagePages(t *testing.T) {
	c, got := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"GET /v1/usage?from=2027-01-01&to=2027-01-31": {200, `{"from":"2027-01-01","to":"2027-01-31","group":"key","time_zone":"UTC","total":9,
			"usage":[{"day":"2027-01-01","key_id":"key_1","key_name":"a","key_prefix":"ck_a","policy":"api","units":4}],"next_cursor":"c1"}`},
		"GET /v1/usage?cursor=c1&from=2027-01-01&to=2027-01-31": {200, `{"from":"2027-01-01","to":"2027-01-31","group":"key","time_zone":"UTC","total":9,
			"usage":[{"day":"2027-01-02","key_id":"","key_name":"","key_prefix":"","policy":"api","units":5}]}`},
		"GET /v1/usage?from=2027-02-01&group=policy&to=2027-02-28": {200, `{"from":"2027-02-01","to":"2027-02-28","group":"policy","time_zone":"UTC","total":3,
			"usage":[{"day":"2027-02-01","policy":"api","units":3}],"next_cursor":"c2"}`},
		"GET /v1/usage?cursor=c2&from=2027-02-01&group=policy&to=2027-02-28": {200, `{"from":"2027-02-01","to":"2027-02-28","group":"policy","time_zone":"UTC","total":3,
			"usage":[{"day":"2027-02-01","policy":"api","units":3}],"next_cursor":"c2"}`},
	})
	ctx := context.Background()
	u, err := c.Usage(ctx, "2027-01-01", "2027-01-31", "")
	if err != nil || u.Total != 9 || len(u.Rows) != 2 || u.Rows[0] != (UsageRow{Day: "2027-01-01", KeyID: "key_1", KeyName: "a", KeyPrefix: "ck_a", Policy: "api", Units: 4}) ||
		u.Rows[1] != (UsageRow{Day: "2027-01-02", Policy: "api", Units: 5}) || u.From != "2027-01-01" || u.Group != UsageByKey {
		t.Fatalf("Usage = %+v, %v (requests %+v)", u, err, *got)
	}
	if u, err := c.Usage(ctx, "2027-02-01", "2027-02-28", UsageByPolicy); err == nil {
		t.Fatalf("a page that names itself as the next: %+v", u)
	}
}

func TestListWebhooks(t *testing.T) {
	c, _ := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"GET /v1/webhooks": {200, `{"webhooks":[{"id":"wh_1","url":"https://example.com/hook","description":"","events":["quota.threshold"],
			"thresholds":[80,100],"secret_prefix":"whsec_AbCd","created_at":"2027-01-01T00:00:00Z","updated_at":"2027-01-01T00:00:00Z"}]}`},
	})
	ws, err := c.ListWebhooks(context.Background())
	if err != nil || len(ws) != 1 || ws[0].ID != "wh_1" || ws[0].Thresholds[1] != 100 || ws[0].SecretPrefix != "whsec_AbCd" || ws[0].CreatedAt.IsZero() {
		t.Fatalf("ListWebhooks = %+v, %v", ws, err)
	}
}
