package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/reserve"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/service/servicetest"
	"github.com/sluicehq/sluice/internal/tenants"
)

// A tenant's reservations are bounded per second on one server; another
// tenant's are not touched by it.
func TestReserveLimiter(t *testing.T) {
	var l reserveLimiter
	if err := l.allow("ten_a", ReservesPerSecond-1); err != nil {
		t.Fatal(err)
	}
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.allow("ten_a", 2); errs.Code(err) != errs.RateLimited {
		t.Fatalf("past the bound: %v", err)
	}
	if err := l.allow("ten_b", ReservesPerSecond); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if err := l.allow("ten_a", 0); err != nil {
		t.Fatalf("no reservation: %v", err)
	}
}

// settleEngine applies settles to a ledger, failing those it is told to.
type settleEngine struct {
	Engine // only what settle uses is implemented
	mem    *servicetest.Memory
	mu     sync.Mutex
	fail   int // the next fail applies answer unavailable
	landed map[string]int64
}

func (e *settleEngine) Ready() bool                                 { return true }
func (e *settleEngine) TenantSuspended(string) bool                 { return false }
func (e *settleEngine) TenantForServiceKey(k string) (string, bool) { return "ten_a", k == "sk_test" }
func (e *settleEngine) Settle(_ context.Context, r reserve.Reservation, _ time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail > 0 {
		e.fail--
		return errs.Errorf(errs.Unavailable, "hand-over")
	}
	e.landed[r.ID] += r.Difference()
	e.mem.Applied(r.TenantID, r.ID) // as the bucket's owner marks it
	return nil
}

// A settle whose difference could not be applied stays recorded and
// answers 503; a repeat of it (the client's retry, from any server)
// applies the difference, once, and only then answers success; repeats
// after that only answer. A repeat never answers success for a
// difference that has not landed.
func TestSettleAnswersSuccessOnlyOnceLanded(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mem := servicetest.New(func() time.Time { return now })
	eng := &settleEngine{mem: mem, landed: map[string]int64{}}
	srv := New(Config{Engine: eng, Services: mem.Services(), Now: func() time.Time { return now }})
	if err := mem.Services().Reservations.Create(context.Background(), reserve.Reservation{ID: "rsv_1", TenantID: "ten_a",
		Reserved: 100, Cap: 100, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	settle := func() (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/settle", strings.NewReader(`{"reservation":"rsv_1","actual":30}`))
		req.Header.Set("Authorization", "Bearer sk_test")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	eng.fail = 2
	for i := range 2 {
		if code, body := settle(); code != http.StatusServiceUnavailable {
			t.Fatalf("attempt %d while the apply fails: %d %s, want 503", i+1, code, body)
		}
	}
	if len(eng.landed) != 0 {
		t.Fatalf("landed %v while every apply failed", eng.landed)
	}
	code, body := settle()
	if code != http.StatusOK || !strings.Contains(body, `"replayed":true`) || eng.landed["rsv_1"] != -70 {
		t.Fatalf("the retry once the apply works: %d %s, landed %v (want -70 once)", code, body, eng.landed)
	}
	for range 3 {
		if code, body := settle(); code != http.StatusOK || !strings.Contains(body, `"replayed":true`) {
			t.Fatalf("a repeat after it landed: %d %s", code, body)
		}
	}
	if eng.landed["rsv_1"] != -70 {
		t.Fatalf("repeats after the settle landed applied it again: %v", eng.landed)
	}
}

// A worker's refusal of a tenant's reservations or settles, with when to
// retry, is remembered: until then the server refuses that tenant's
// next ones itself (before a check takes an estimate), and no other
// tenant's.
func TestHeldOffAfterTheWorkersRefusal(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	now := t0
	l := reserveLimiter{now: func() time.Time { return now }, held: heldOff{what: "reserve"}}
	l.held.note("ten_a", errs.Errorf(errs.Unavailable, "down"), now)
	l.held.note("ten_a", errs.Errorf(errs.RateLimited, "no retry time"), now)
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatalf("held off by an error that says no retry time: %v", err)
	}
	l.held.note("ten_a", errs.Limited(300*time.Millisecond, "limited"), now)
	now = t0.Add(100 * time.Millisecond)
	err := l.allow("ten_a", 1)
	if errs.Code(err) != errs.RateLimited || errs.RetryAfter(err) != 200*time.Millisecond {
		t.Fatalf("while held off: %v (retry after %s)", err, errs.RetryAfter(err))
	}
	if err := l.allow("ten_b", 1); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	now = t0.Add(300 * time.Millisecond)
	if err := l.allow("ten_a", 1); err != nil {
		t.Fatalf("after the retry time: %v", err)
	}
	// The table drops what has passed as it grows.
	for i := range 1000 {
		l.held.note(fmt.Sprint("ten_", i), errs.Limited(time.Millisecond, "limited"), now.Add(time.Duration(i)*time.Second))
	}
	if n := len(l.held.until); n > 128 {
		t.Fatalf("%d tenants held, want at most 128", n)
	}
}

// refusingPolicies refuses every policy write as the worker does past a
// tenant's config-write rate, counting the writes that reach it.
type refusingPolicies struct {
	service.Policies
	writes atomic.Int64
}

func (p *refusingPolicies) Create(context.Context, string, tenants.Policy) (service.Written[tenants.Policy], error) {
	p.writes.Add(1)
	return service.Written[tenants.Policy]{}, errs.Limited(500*time.Millisecond, "config write: more than 20 a second for this tenant across the cluster")
}

// Once the worker refused a tenant's config write with a time to retry,
// the server refuses the tenant's next config writes itself until then,
// without asking the worker; reads pass, and other tenants' writes go on
// to the worker.
func TestConfigWritesHeldOffAfterTheWorkersRefusal(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mem := servicetest.New(func() time.Time { return now })
	svcs := mem.Services()
	pols := &refusingPolicies{Policies: svcs.Policies}
	svcs.Policies = pols
	srv := New(Config{Engine: twoTenants{}, Services: svcs, Now: func() time.Time { return now }})
	do := func(method, key, body string) int {
		req := httptest.NewRequest(method, "/v1/policies", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec.Code
	}
	const policy = `{"name":"p","path":"/p","tiers":{"anonymous":{"algorithm":"token_bucket","limit":10,"period":"1s"}}}`
	if code := do(http.MethodPost, "sk_a", policy); code != http.StatusTooManyRequests || pols.writes.Load() != 1 {
		t.Fatalf("the worker's refusal: %d after %d writes, want 429 after 1", code, pols.writes.Load())
	}
	for range 5 {
		if code := do(http.MethodPost, "sk_a", policy); code != http.StatusTooManyRequests {
			t.Fatalf("a write while held off: %d, want 429", code)
		}
	}
	if n := pols.writes.Load(); n != 1 {
		t.Fatalf("%d writes reached the worker while held off, want 1", n)
	}
	if code := do(http.MethodGet, "sk_a", ""); code != http.StatusOK {
		t.Fatalf("a read while held off: %d, want 200", code)
	}
	if code := do(http.MethodPost, "sk_b", policy); code != http.StatusTooManyRequests || pols.writes.Load() != 2 {
		t.Fatalf("another tenant's write: %d after %d writes, want it asked of the worker", code, pols.writes.Load())
	}
	now = now.Add(500 * time.Millisecond)
	if do(http.MethodPost, "sk_a", policy); pols.writes.Load() != 3 {
		t.Fatalf("a write once the retry time passed did not reach the worker (%d writes)", pols.writes.Load())
	}
}

// twoTenants authenticates sk_a as ten_a and sk_b as ten_b.
type twoTenants struct{ Engine }

func (twoTenants) Ready() bool                 { return true }
func (twoTenants) TenantSuspended(string) bool { return false }
func (twoTenants) TenantForServiceKey(k string) (string, bool) {
	switch k {
	case "sk_a":
		return "ten_a", true
	case "sk_b":
		return "ten_b", true
	}
	return "", false
}
