package sdk

// Management and analytics calls: what a tenant's scripts use to set up
// policies and keys. They are not on the request path, so they use
// encoding/json and plain requests. They return an *Error for any non-2xx
// answer and never apply the failure mode.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Policy is an endpoint with per-tier limits.
type Policy struct {
	ID          string            `json:"id,omitempty"` // set by Sluice
	Name        string            `json:"name"`
	Method      string            `json:"method,omitempty"` // "*" or "" for any
	Path        string            `json:"path"`             // pattern: literal segments, ":name", trailing "*"
	Query       map[string]string `json:"query,omitempty"`
	Consistency string            `json:"consistency,omitempty"` // "exact" (default) or "local"
	Shadow      bool              `json:"shadow"`
	Tiers       map[string]Limits `json:"tiers"`
	// UnlistedTiers is what callers of a tier the policy does not list
	// get when it has no "default" tier either: "allow" (no limit, the
	// default) or "deny".
	UnlistedTiers string `json:"unlisted_tiers,omitempty"`
	// Descriptor makes the policy one rule of Envoy's rate limit service,
	// matched by the descriptors of a gRPC ShouldRateLimit call instead of
	// a path (Sluice's docs/ENVOY.md). Such policies are usually written
	// by `sluice apply -f` from the reference server's YAML.
	Descriptor *DescriptorRule `json:"descriptor,omitempty"`
}

// DescriptorRule is one node of a domain's descriptor tree, in the terms
// of Envoy's reference rate limit server's configuration.
type DescriptorRule struct {
	Domain          string            `json:"domain"`
	Path            []DescriptorEntry `json:"path"`    // the key and value of each level down to this node
	Limited         bool              `json:"limited"` // the node has a rate_limit
	Unit            string            `json:"unit,omitempty"`
	RequestsPerUnit uint32            `json:"requests_per_unit,omitempty"`
	Unlimited       bool              `json:"unlimited,omitempty"`
	RuleName        string            `json:"rule_name,omitempty"`
	Replaces        []string          `json:"replaces,omitempty"`
	QuotaMode       bool              `json:"quota_mode,omitempty"`
	DetailedMetric  bool              `json:"detailed_metric,omitempty"`
	ValueToMetric   bool              `json:"value_to_metric,omitempty"`
	ShareThreshold  bool              `json:"share_threshold,omitempty"`
	Metadata        string            `json:"metadata,omitempty"` // JSON
	Extras          bool              `json:"extras,omitempty"`   // limits use Sluice's own fields
	// DeniedUncounted: a request over the node's limits counts nothing;
	// without it every request's hits count, allowed or not, as in the
	// reference.
	DeniedUncounted bool `json:"denied_uncounted,omitempty"`
	// Order is a wildcard node's place among its wildcard siblings (0
	// first): the first that matches a value wins.
	Order int `json:"order,omitempty"`
}

// DescriptorEntry is one level of a descriptor.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value,omitempty"`
}

// Limit is one limit of a tier.
type Limit struct {
	Name      string `json:"name,omitempty"` // required when a tier has several limits
	Algorithm string `json:"algorithm"`      // token_bucket, sliding_window, sliding_log, fixed_window, concurrency
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`          // e.g. "60s", "1m"; empty for concurrency
	Burst     int64  `json:"burst,omitempty"` // token_bucket capacity; default Limit
	// Calendar, instead of Period: "day", "week", "month" or "year", a
	// fixed_window count that resets at the start of each in the tenant's
	// time zone (a month on the key's billing anchor day).
	Calendar string `json:"calendar,omitempty"`
	// Per is what the limit counts per: "key" (each caller; the default
	// when empty) or "customer" (one bucket shared by all of a customer's
	// keys and JWT subjects).
	Per string `json:"per,omitempty"`
}

// Limits is a tier's limits. It is written as a single object when it
// holds one unnamed limit and as a list otherwise, and reads either.
type Limits []Limit

// MarshalJSON implements json.Marshaler.
func (l Limits) MarshalJSON() ([]byte, error) {
	if len(l) == 1 && l[0].Name == "" {
		return json.Marshal(l[0])
	}
	return json.Marshal([]Limit(l))
}

// UnmarshalJSON implements json.Unmarshaler.
func (l *Limits) UnmarshalJSON(b []byte) error {
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '{' {
		var one Limit
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*l = Limits{one}
		return nil
	}
	return json.Unmarshal(b, (*[]Limit)(l))
}

// Key is a consumer API key. Secret is only set in CreateKey's answer:
// Sluice keeps only a hash.
type Key struct {
	ID        string            `json:"id"`
	Secret    string            `json:"key,omitempty"`
	Prefix    string            `json:"prefix,omitempty"`
	Name      string            `json:"name"`
	Tier      string            `json:"tier"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Overrides map[string]Limits `json:"overrides,omitempty"` // per policy name, replacing the tier's limits
	// BillingAnchor is the day of the month its month quotas reset on
	// (0: none, the 1st).
	BillingAnchor int `json:"billing_anchor,omitempty"`
	// CustomerID is the customer the key belongs to ("" for none).
	CustomerID string `json:"customer_id,omitempty"`
}

// NewKey describes a key to create.
type NewKey struct {
	Name      string            `json:"name"`
	Tier      string            `json:"tier,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Overrides map[string]Limits `json:"overrides,omitempty"`
	// BillingAnchor: the day of the month (1-31) the key's month quotas
	// reset on, clamped to each month's last day; 0 = the 1st.
	BillingAnchor int `json:"billing_anchor,omitempty"`
	// CustomerID attaches the key to one of the tenant's customers.
	CustomerID string `json:"customer_id,omitempty"`
}

// KeyUpdate changes the fields that are set.
type KeyUpdate struct {
	Name      *string           `json:"name,omitempty"`
	Tier      *string           `json:"tier,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Overrides map[string]Limits `json:"overrides,omitempty"`
	// BillingAnchor moves the key's month quotas to this day of the month
	// (1-31).
	BillingAnchor *int `json:"billing_anchor,omitempty"`
	// CustomerID attaches the key to one of the tenant's customers; a
	// pointer to "" detaches it.
	CustomerID *string `json:"customer_id,omitempty"`
}

// MarshalJSON implements json.Marshaler: a detached customer is sent as
// "customer_id": null.
func (u KeyUpdate) MarshalJSON() ([]byte, error) {
	type plain KeyUpdate
	if u.CustomerID == nil || *u.CustomerID != "" {
		return json.Marshal(plain(u))
	}
	u.CustomerID = nil
	return json.Marshal(struct {
		plain
		CustomerID *string `json:"customer_id"`
	}{plain: plain(u)})
}

// CreatePolicy creates p (its ID is ignored) and returns it as stored.
func (c *Client) CreatePolicy(ctx context.Context, p Policy) (Policy, error) {
	p.ID = ""
	var out Policy
	return out, c.do(ctx, http.MethodPost, "/v1/policies", nil, p, &out)
}

// ListPolicies returns the tenant's policies.
func (c *Client) ListPolicies(ctx context.Context) ([]Policy, error) {
	var out []Policy
	return out, c.doList(ctx, "/v1/policies", nil, "policies", &out)
}

// GetPolicy returns one policy.
func (c *Client) GetPolicy(ctx context.Context, id string) (Policy, error) {
	var out Policy
	return out, c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(id), nil, nil, &out)
}

// UpdatePolicy replaces policy id with p and returns it as stored.
func (c *Client) UpdatePolicy(ctx context.Context, id string, p Policy) (Policy, error) {
	p.ID = ""
	var out Policy
	return out, c.do(ctx, http.MethodPut, "/v1/policies/"+url.PathEscape(id), nil, p, &out)
}

// DeletePolicy deletes a policy.
func (c *Client) DeletePolicy(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/policies/"+url.PathEscape(id), nil, nil, nil)
}

// CreateKey issues a consumer key; the answer's Secret is shown only now.
func (c *Client) CreateKey(ctx context.Context, k NewKey) (Key, error) {
	var out Key
	return out, c.do(ctx, http.MethodPost, "/v1/keys", nil, k, &out)
}

// ListKeys returns the tenant's keys (without secrets).
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out []Key
	return out, c.doList(ctx, "/v1/keys", nil, "keys", &out)
}

// GetKey returns one key (without its secret).
func (c *Client) GetKey(ctx context.Context, id string) (Key, error) {
	var out Key
	return out, c.do(ctx, http.MethodGet, "/v1/keys/"+url.PathEscape(id), nil, nil, &out)
}

// UpdateKey changes a key's name, tier, expiry or overrides.
func (c *Client) UpdateKey(ctx context.Context, id string, u KeyUpdate) (Key, error) {
	var out Key
	return out, c.do(ctx, http.MethodPatch, "/v1/keys/"+url.PathEscape(id), nil, u, &out)
}

// RevokeKey revokes a key: checks with it answer invalid_key within a
// second, cluster-wide.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// ResetBucket refills an identity's buckets for a policy.
func (c *Client) ResetBucket(ctx context.Context, policy string, id Identity) error {
	body := struct {
		Policy   string   `json:"policy"`
		Identity Identity `json:"identity"`
	}{policy, id}
	return c.do(ctx, http.MethodPost, "/v1/buckets/reset", nil, body, nil)
}

// TimeseriesQuery selects allowed and denied counts per step.
type TimeseriesQuery struct {
	// From and To bound the range; a zero To is now, a zero From 24 hours
	// before To.
	From, To time.Time
	Step     time.Duration // sent as e.g. "1m"; 0 leaves it to Sluice
	Policy   string        // "" for all policies
}

// TimeseriesPoint is the decisions of one step. Denied counts every
// denial; RateLimited, InvalidKey, Blocked and ConcurrencyLimited split it
// by reason (for minutes counted before Sluice recorded reasons they may
// add up to less).
type TimeseriesPoint struct {
	Start       time.Time `json:"start"`
	Allowed     int64     `json:"allowed"`
	Denied      int64     `json:"denied"`
	RateLimited int64     `json:"rate_limited"`
	InvalidKey  int64     `json:"invalid_key"`
	Blocked     int64     `json:"blocked"`
	// ConcurrencyLimited counts denials by a concurrency limit.
	ConcurrencyLimited int64 `json:"concurrency_limited"`
	// Units is what the step's decisions consumed (usage units).
	Units int64 `json:"units"`
}

// Timeseries returns allowed and denied decisions per step, and the units
// they consumed.
func (c *Client) Timeseries(ctx context.Context, q TimeseriesQuery) ([]TimeseriesPoint, error) {
	v := rangeValues(q.From, q.To)
	if q.Step > 0 {
		v.Set("step", formatStep(q.Step))
	}
	if q.Policy != "" {
		v.Set("policy", q.Policy)
	}
	var out []TimeseriesPoint
	return out, c.doList(ctx, "/v1/analytics/timeseries", v, "points", &out)
}

// TopQuery selects the identities with the most denials.
type TopQuery struct {
	// From and To bound the range; a zero To is now, a zero From 24 hours
	// before To.
	From, To time.Time
	Limit    int    // 0 leaves it to Sluice (20)
	Policy   string // "" for all policies
}

// TopEntry is one identity's decisions; Denied split by reason as in
// TimeseriesPoint.
type TopEntry struct {
	Identity    Identity `json:"identity"`
	Allowed     int64    `json:"allowed"`
	Denied      int64    `json:"denied"`
	RateLimited int64    `json:"rate_limited"`
	InvalidKey  int64    `json:"invalid_key"`
	Blocked     int64    `json:"blocked"`
	// ConcurrencyLimited counts denials by a concurrency limit.
	ConcurrencyLimited int64     `json:"concurrency_limited"`
	DenialRatio        float64   `json:"denial_ratio"`
	FirstSeen          time.Time `json:"first_seen"`
	LastSeen           time.Time `json:"last_seen"`
}

// Top returns identities ranked by denials.
func (c *Client) Top(ctx context.Context, q TopQuery) ([]TopEntry, error) {
	v := rangeValues(q.From, q.To)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Policy != "" {
		v.Set("policy", q.Policy)
	}
	var out []TopEntry
	return out, c.doList(ctx, "/v1/analytics/top", v, "identities", &out)
}

// rangeValues sends the range's ends that are set; Sluice defaults the
// others (the last 24 hours).
func rangeValues(from, to time.Time) url.Values {
	v := url.Values{}
	if !from.IsZero() {
		v.Set("from", from.Format(time.RFC3339))
	}
	if !to.IsZero() {
		v.Set("to", to.Format(time.RFC3339))
	}
	return v
}

// formatStep writes d in the largest whole unit: "1h", "5m", "30s".
func formatStep(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// doList GETs a list. API.md does not fix the list envelope, so the answer
// may be a bare array or an object holding it, under name or as its only
// array member.
func (c *Client) doList(ctx context.Context, path string, q url.Values, name string, out any) error {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, path, q, nil, &raw); err != nil {
		return err
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("sluice: GET %s: %w", path, err)
		}
		list, ok := obj[name]
		if !ok {
			for _, v := range obj {
				if v = bytes.TrimSpace(v); len(v) > 0 && v[0] == '[' {
					if list != nil {
						return fmt.Errorf("sluice: GET %s: answer holds several lists and no %q", path, name)
					}
					list = v
				}
			}
		}
		raw = list
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("sluice: GET %s: %w", path, err)
	}
	return nil
}

// do sends one management request; in (if not nil) is the JSON body, out
// (if not nil) receives the JSON answer.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, managementTimeout)
		defer cancel()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("sluice: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("sluice: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", c.authorization)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sluice: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("sluice: %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := errorFromResponse(resp.StatusCode, data)
		e.RetryAfter = retryAfter(resp.Header)
		return e
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("sluice: %s %s: decoding answer: %w", method, path, err)
		}
	}
	return nil
}
