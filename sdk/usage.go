package sdk

// Usage to bill from and webhook endpoints: management calls, like those
// of manage.go.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Usage groupings.
const (
	UsageByKey    = "key"
	UsageByPolicy = "policy"
)

// UsageRow is one day's units of one consumer key under one policy
// (KeyID "" counts every caller without a key), or, grouped by policy,
// of one policy.
type UsageRow struct {
	Day       string `json:"day"` // a date in the tenant's time zone
	KeyID     string `json:"key_id,omitempty"`
	KeyName   string `json:"key_name,omitempty"`
	KeyPrefix string `json:"key_prefix,omitempty"`
	Policy    string `json:"policy"`
	Units     int64  `json:"units"`
}

// Usage is the units a tenant's callers consumed per day over a range.
type Usage struct {
	From     string     `json:"from"`
	To       string     `json:"to"`
	Group    string     `json:"group"`
	TimeZone string     `json:"time_zone"`
	Total    int64      `json:"total"`
	Rows     []UsageRow `json:"usage"`
}

// Usage returns the units consumed per day from from to to, both included,
// each a date ("2027-01-31") or an RFC 3339 time, which stands for its
// date in the tenant's time zone; group is UsageByKey ("" too) or
// UsageByPolicy. It reads every page of the answer, so a range of many
// keys and days comes whole; Total is the range's.
func (c *Client) Usage(ctx context.Context, from, to, group string) (Usage, error) {
	v := url.Values{}
	v.Set("from", from)
	v.Set("to", to)
	if group != "" {
		v.Set("group", group)
	}
	var all Usage
	for page := 0; ; page++ {
		var p struct {
			Usage
			NextCursor string `json:"next_cursor"`
		}
		if err := c.do(ctx, http.MethodGet, "/v1/usage", v, nil, &p); err != nil {
			return Usage{}, err
		}
		rows := all.Rows
		all = p.Usage
		all.Rows = append(rows, p.Rows...)
		if p.NextCursor == "" {
			if all.Rows == nil {
				all.Rows = []UsageRow{}
			}
			return all, nil
		}
		if p.NextCursor == v.Get("cursor") || len(p.Rows) == 0 {
			return Usage{}, fmt.Errorf("sluice: GET /v1/usage: page %d answered no progress", page+1)
		}
		v.Set("cursor", p.NextCursor)
	}
}

// Webhook is one of the tenant's webhook endpoints. Its secret is shown
// only when it is created or rotated; SecretPrefix tells secrets apart.
type Webhook struct {
	ID                  string     `json:"id"`
	URL                 string     `json:"url"`
	Description         string     `json:"description"`
	Events              []string   `json:"events"`
	Thresholds          []int      `json:"thresholds"`
	SecretPrefix        string     `json:"secret_prefix"`
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
	CreatedAt           time.Time  `json:"created_at"`
	UpdatedAt           time.Time  `json:"updated_at"`
}

// ListWebhooks returns the tenant's webhook endpoints.
func (c *Client) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	var out []Webhook
	return out, c.doList(ctx, "/v1/webhooks", nil, "webhooks", &out)
}
