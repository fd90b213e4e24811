package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service/servicetest"
)

// partEngine decides a batch's first checks, reserving where asked, and
// then fails, as an engine whose owner went away mid-batch does; it
// records what is settled.
type partEngine struct {
	Engine  // the rest is not used by a batch
	decided int
	settled []int64
}

func (e *partEngine) Ready() bool                               { return true }
func (e *partEngine) TenantForServiceKey(string) (string, bool) { return "ten_a", true }
func (e *partEngine) TenantSuspended(string) bool               { return false }

func (e *partEngine) CheckBatch(_ context.Context, tenant string, reqs []engine.CheckRequest, _ time.Time) ([]engine.Answer, error) {
	out := make([]engine.Answer, e.decided)
	for i := range out {
		out[i] = engine.Answer{Allowed: true, Reason: engine.ReasonOK}
		if reqs[i].Hold {
			out[i].Hold = &reserve.Hold{BucketKey: tenant + "/pol/ip:192.0.2.1", PolicyID: "pol"}
		}
	}
	return out, errs.Errorf(errs.Unavailable, "The owner of this caller's bucket is changing hands; try again shortly.")
}

func (e *partEngine) GiveBack(_ context.Context, _ string, _ reserve.Hold, estimate int64, _ time.Time) error {
	e.settled = append(e.settled, -estimate)
	return nil
}

// A batch that fails in the engine after some of its checks took their
// reservations' estimates gives every one of those back and answers the
// error, with no reservation.
func TestBatchFailingPartWayGivesEstimatesBack(t *testing.T) {
	eng := &partEngine{decided: 3}
	e := New(Config{Engine: eng, Services: servicetest.New(time.Now).Services()})
	body := `{"checks": [{"ip": "192.0.2.1", "path": "/x", "reserve": 10}, {"ip": "192.0.2.1", "path": "/x"},
		{"ip": "192.0.2.1", "path": "/x", "reserve": 20}, {"ip": "192.0.2.1", "path": "/x", "reserve": 30}]}`
	req := httptest.NewRequest(http.MethodPost, "/v1/check/batch", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk_test")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "rsv_") {
		t.Fatalf("answer %d %s, want 503 and no reservation", rec.Code, rec.Body)
	}
	if len(eng.settled) != 2 || eng.settled[0] != -10 || eng.settled[1] != -20 {
		t.Fatalf("given back %v, want the two decided reservations' -10 and -20", eng.settled)
	}
}
