package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"
)

// recorded is one management request as the server saw it.
type recorded struct {
	method, target, body string
}

// managementServer answers each "METHOD /target" with a canned status and
// body and records what it received.
func managementServer(t *testing.T, answers map[string]struct {
	status int
	body   string
}) (*Client, *[]recorded) {
	var got []recorded
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testServiceKey {
			t.Errorf("%s %s without the service key", r.Method, r.URL)
		}
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: body without a JSON content type", r.Method, r.URL)
		}
		got = append(got, recorded{r.Method, r.URL.RequestURI(), string(b)})
		a, ok := answers[r.Method+" "+r.URL.RequestURI()]
		if !ok {
			writeEnvelope(w, 404, "not_found", "no such object")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(ts.Close)
	return newTestClient(t, ts.URL), &got
}

func TestPolicyCalls(t *testing.T) {
	const stored = `{"id":"pol_1","name":"heavy-example","method":"GET","path":"/api/example","query":{"mode":"heavy"},"consistency":"exact","shadow":false,
		"tiers":{"anonymous":{"algorithm":"token_bucket","limit":10,"period":"60s"},
		         "pro":[{"name":"burst","algorithm":"token_bucket","limit":10,"period":"1s"},{"name":"daily","algorithm":"fixed_window","limit":1000,"period":"24h"}]}}`
	c, got := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"POST /v1/policies":         {201, stored},
		"GET /v1/policies":          {200, `{"policies":[` + stored + `]}`},
		"GET /v1/policies/pol_1":    {200, stored},
		"PUT /v1/policies/pol_1":    {200, stored},
		"DELETE /v1/policies/pol_1": {204, ``},
	})
	ctx := context.Background()
	want := Policy{
		ID: "pol_1", Name: "heavy-example", Method: "GET", Path: "/api/example", Query: map[string]string{"mode": "heavy"}, Consistency: "exact",
		Tiers: map[string]Limits{
			"anonymous": {{Algorithm: "token_bucket", Limit: 10, Period: "60s"}},
			"pro":       {{Name: "burst", Algorithm: "token_bucket", Limit: 10, Period: "1s"}, {Name: "daily", Algorithm: "fixed_window", Limit: 1000, Period: "24h"}},
		},
	}
	p, err := c.CreatePolicy(ctx, want)
	if err != nil || !reflect.DeepEqual(p, want) {
		t.Fatalf("CreatePolicy = %+v, %v", p, err)
	}
	var sent map[string]any
	json.Unmarshal([]byte((*got)[0].body), &sent)
	if _, hasID := sent["id"]; hasID {
		t.Error("CreatePolicy sent an id")
	}
	if anon, ok := sent["tiers"].(map[string]any)["anonymous"].(map[string]any); !ok || anon["limit"] != 10.0 {
		t.Errorf("a single limit was not sent as an object: %s", (*got)[0].body)
	}
	if ps, err := c.ListPolicies(ctx); err != nil || len(ps) != 1 || !reflect.DeepEqual(ps[0], want) {
		t.Errorf("ListPolicies = %+v, %v", ps, err)
	}
	if p, err := c.GetPolicy(ctx, "pol_1"); err != nil || p.ID != "pol_1" {
		t.Errorf("GetPolicy = %+v, %v", p, err)
	}
	if _, err := c.UpdatePolicy(ctx, "pol_1", want); err != nil {
		t.Errorf("UpdatePolicy: %v", err)
	}
	if err := c.DeletePolicy(ctx, "pol_1"); err != nil {
		t.Errorf("DeletePolicy: %v", err)
	}
	_, err = c.GetPolicy(ctx, "other/../x")
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != CodeNotFound || e.Message != "no such object" {
		t.Errorf("GetPolicy of a missing id: %#v", err)
	}
	if last := (*got)[len(*got)-1]; last.target != "/v1/policies/other%2F..%2Fx" {
		t.Errorf("id not escaped: %q", last.target)
	}
}

func TestKeyAndBucketCalls(t *testing.T) {
	exp := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	c, got := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"POST /v1/keys":          {201, `{"id":"key_1","key":"ck_secret","prefix":"ck_secr","name":"mobile app","tier":"pro","expires_at":"2027-01-01T00:00:00Z"}`},
		"GET /v1/keys":           {200, `[{"id":"key_1","prefix":"ck_secr","name":"mobile app","tier":"pro"}]`},
		"GET /v1/keys/key_1":     {200, `{"id":"key_1","prefix":"ck_secr","name":"mobile app","tier":"pro"}`},
		"PATCH /v1/keys/key_1":   {200, `{"id":"key_1","prefix":"ck_secr","name":"mobile app","tier":"free"}`},
		"DELETE /v1/keys/key_1":  {204, ``},
		"POST /v1/buckets/reset": {204, ``},
	})
	ctx := context.Background()
	k, err := c.CreateKey(ctx, NewKey{Name: "mobile app", Tier: "pro", ExpiresAt: &exp})
	if err != nil || k.Secret != "ck_secret" || k.ExpiresAt == nil || !k.ExpiresAt.Equal(exp) {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	if ks, err := c.ListKeys(ctx); err != nil || len(ks) != 1 || ks[0].ID != "key_1" {
		t.Errorf("ListKeys = %+v, %v", ks, err)
	}
	if k, err := c.GetKey(ctx, "key_1"); err != nil || k.Secret != "" {
		t.Errorf("GetKey = %+v, %v", k, err)
	}
	free := "free"
	if k, err := c.UpdateKey(ctx, "key_1", KeyUpdate{Tier: &free}); err != nil || k.Tier != "free" {
		t.Errorf("UpdateKey = %+v, %v", k, err)
	}
	if err := c.RevokeKey(ctx, "key_1"); err != nil {
		t.Errorf("RevokeKey: %v", err)
	}
	if err := c.ResetBucket(ctx, "heavy-example", Identity{Kind: "ip", ID: "203.0.113.7"}); err != nil {
		t.Errorf("ResetBucket: %v", err)
	}
	wantBodies := map[string]string{
		"POST /v1/keys":          `{"name":"mobile app","tier":"pro","expires_at":"2027-01-01T00:00:00Z"}`,
		"PATCH /v1/keys/key_1":   `{"tier":"free"}`,
		"POST /v1/buckets/reset": `{"policy":"heavy-example","identity":{"kind":"ip","id":"203.0.113.7"}}`,
	}
	for _, r := range *got {
		if want, ok := wantBodies[r.method+" "+r.target]; ok && r.body != want {
			t.Errorf("%s %s sent %s, want %s", r.method, r.target, r.body, want)
		}
	}
}

func TestAnalyticsCalls(t *testing.T) {
	c, got := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"GET /v1/analytics/timeseries?from=2026-03-01T12%3A00%3A00Z&policy=heavy-example&step=5m&to=2026-03-01T13%3A00%3A00Z": {200,
			`{"points":[{"start":"2026-03-01T12:00:00Z","allowed":5,"denied":6,"rate_limited":3,"invalid_key":2,"blocked":1}]}`},
		"GET /v1/analytics/top?from=2026-03-01T12%3A00%3A00Z&limit=5&to=2026-03-01T13%3A00%3A00Z": {200,
			`{"identities":[{"identity":{"kind":"ip","id":"203.0.113.7"},"allowed":1,"denied":3,"rate_limited":1,"invalid_key":0,"blocked":2,"denial_ratio":0.75}]}`},
	})
	ctx := context.Background()
	pts, err := c.Timeseries(ctx, TimeseriesQuery{From: t0, To: t0.Add(time.Hour), Step: 5 * time.Minute, Policy: "heavy-example"})
	if err != nil || len(pts) != 1 || pts[0].Denied != 6 || pts[0].RateLimited != 3 || pts[0].InvalidKey != 2 || pts[0].Blocked != 1 || !pts[0].Start.Equal(t0) {
		t.Errorf("Timeseries = %+v, %v (requests %+v)", pts, err, *got)
	}
	top, err := c.Top(ctx, TopQuery{From: t0, To: t0.Add(time.Hour), Limit: 5})
	if err != nil || len(top) != 1 || top[0].DenialRatio != 0.75 || top[0].Identity.ID != "203.0.113.7" || top[0].RateLimited != 1 || top[0].Blocked != 2 {
		t.Errorf("Top = %+v, %v", top, err)
	}
}

// A zero range end is left to Sluice, which answers the last 24 hours.
func TestAnalyticsDefaultRange(t *testing.T) {
	c, got := managementServer(t, map[string]struct {
		status int
		body   string
	}{
		"GET /v1/analytics/top": {200, `{"from":"2026-02-28T12:00:00Z","to":"2026-03-01T12:00:00Z","identities":[]}`},
		"GET /v1/analytics/timeseries?from=2026-03-01T12%3A00%3A00Z": {200, `{"from":"2026-03-01T12:00:00Z","to":"2026-03-01T13:00:00Z","step":"1m","points":[]}`},
	})
	ctx := context.Background()
	if _, err := c.Top(ctx, TopQuery{}); err != nil {
		t.Errorf("Top without a range: %v (requests %+v)", err, *got)
	}
	if _, err := c.Timeseries(ctx, TimeseriesQuery{From: t0}); err != nil {
		t.Errorf("Timeseries without an end: %v (requests %+v)", err, *got)
	}
}

func TestFormatStep(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "1m", 2 * time.Hour: "2h", 90 * time.Second: "90s", 1500 * time.Millisecond: "1.5s",
	} {
		if got := formatStep(d); got != want {
			t.Errorf("formatStep(%v) = %q, want %q", d, got, want)
		}
	}
}
