package bus

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// A rate_limited error keeps its retry time across the wire, rounded up
// to the millisecond; the field is additive, so a reader that does not
// know it decodes the error as before, and a writer that does not send it
// decodes as no retry time.
func TestReplyCarriesRetryAfter(t *testing.T) {
	data := EncodeReply(nil, errs.Limited(1500*time.Microsecond, "settle: too many"))
	err := DecodeReply(data, nil)
	if errs.Code(err) != errs.RateLimited || errs.Message(err) != "settle: too many" || errs.RetryAfter(err) != 2*time.Millisecond {
		t.Fatalf("decoded %v, retry after %s", err, errs.RetryAfter(err))
	}
	var old struct {
		V     int `json:"v"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &old); err != nil || old.Error == nil || old.Error.Code != errs.RateLimited {
		t.Fatalf("an older reader: %+v %v", old, err)
	}
	err = DecodeReply([]byte(`{"v":1,"error":{"code":"rate_limited","message":"m"}}`), nil)
	if errs.Code(err) != errs.RateLimited || errs.RetryAfter(err) != 0 {
		t.Fatalf("from an older writer: %v", err)
	}
	if data := EncodeReply(nil, errs.Errorf(errs.NotFound, "none")); json.Valid(data) && string(data) != `{"v":1,"error":{"code":"not_found","message":"none"}}` {
		t.Fatalf("an error without a retry time changed on the wire: %s", data)
	}
}
