package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A settle refused past the tenant's settles a second (429 rate_limited,
// nothing done) is asked again after its Retry-After; one whose
// Retry-After is longer than Settle waits is the caller's, with the wait
// in the error.
func TestSettleWaitsOutRateLimited(t *testing.T) {
	var calls atomic.Int32
	var retryAfter atomic.Value
	retryAfter.Store("1")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", retryAfter.Load().(string))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"code":"rate_limited","message":"settle: more than 5000 a second"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"reservation":"rsv_1","actual":3,"difference":-7}`))
	}))
	defer ts.Close()
	c := New(ts.URL, testServiceKey)
	start := time.Now()
	s, err := c.Settle(context.Background(), Reservation{ID: "rsv_1"}, 3)
	if err != nil || s.Difference != -7 || calls.Load() != 2 {
		t.Fatalf("after one refusal: %+v %v (%d calls)", s, err, calls.Load())
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("asked again after %s, before the Retry-After", waited)
	}
	calls.Store(0)
	retryAfter.Store("30")
	_, err = c.Settle(context.Background(), Reservation{ID: "rsv_1"}, 3)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.RetryAfter != 30*time.Second || calls.Load() != 1 {
		t.Fatalf("a long Retry-After: %v (%d calls)", err, calls.Load())
	}
}
