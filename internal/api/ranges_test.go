package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/service/servicetest"
	"github.com/sluicehq/sluice/internal/tenants"
)

// rangeEngine is a tenant's service key and the operator's token, and
// nothing else.
type rangeEngine struct {
	Engine // only what authentication uses is implemented
}

func (rangeEngine) Ready() bool                                 { return true }
func (rangeEngine) TenantSuspended(string) bool                 { return false }
func (rangeEngine) TenantForServiceKey(k string) (string, bool) { return "ten_a", k == "sk_test" }
func (rangeEngine) OperatorTokenHash() string                   { return tenants.HashToken("op_test") }

// Without from and to, the abuse report and analytics answer the last 24
// hours and say so; one end given keeps it and defaults the other; a time
// that is not one still answers 400.
func TestRangeDefaults(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 30, 15, 500_000_000, time.UTC)
	mem := servicetest.New(func() time.Time { return now })
	srv := New(Config{Engine: rangeEngine{}, Services: mem.Services(), Now: func() time.Time { return now }})
	get := func(target, token string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v: %s", target, err, rec.Body)
		}
		return rec.Code, body
	}
	for _, tc := range []struct {
		target, token, from, to string
	}{
		{"/v1/admin/abuse", "op_test", "2026-11-28T12:30:15Z", "2026-11-29T12:30:15Z"},
		{"/v1/admin/abuse?limit=5", "op_test", "2026-11-28T12:30:15Z", "2026-11-29T12:30:15Z"},
		{"/v1/analytics/top", "sk_test", "2026-11-28T12:30:15Z", "2026-11-29T12:30:15Z"},
		{"/v1/analytics/timeseries?step=1h", "sk_test", "2026-11-28T12:30:15Z", "2026-11-29T12:30:15Z"},
		{"/v1/admin/abuse?to=2026-11-20T00:00:00Z", "op_test", "2026-11-19T00:00:00Z", "2026-11-20T00:00:00Z"},
		{"/v1/analytics/top?from=2026-11-29T12:00:00Z", "sk_test", "2026-11-29T12:00:00Z", "2026-11-29T12:30:15Z"},
		{"/v1/admin/abuse?from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00Z", "op_test", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"},
	} {
		code, body := get(tc.target, tc.token)
		if code != http.StatusOK || body["from"] != tc.from || body["to"] != tc.to {
			t.Errorf("%s: %d from %v to %v, want 200 from %s to %s (%v)", tc.target, code, body["from"], body["to"], tc.from, tc.to, body)
		}
	}
	if code, body := get("/v1/admin/abuse?from=yesterday", "op_test"); code != http.StatusBadRequest {
		t.Errorf("a from that is no time: %d %v", code, body)
	}
}
