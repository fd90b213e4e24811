package tenants_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

func TestLimitsJSON(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   tenants.Limits
		canon  string // the marshaled form
		reject bool
	}{
		{
			name:  "single object",
			in:    `{"algorithm": "token_bucket", "limit": 100, "period": "60s", "burst": 20}`,
			want:  tenants.Limits{{Algorithm: "token_bucket", Limit: 100, Period: "60s", Burst: 20}},
			canon: `{"algorithm":"token_bucket","limit":100,"period":"60s","burst":20}`,
		},
		{
			name: "list of named limits",
			in:   `[{"name": "burst", "algorithm": "token_bucket", "limit": 10, "period": "1s"}, {"name": "daily", "algorithm": "fixed_window", "limit": 1000, "period": "1d"}]`,
			want: tenants.Limits{
				{Name: "burst", Algorithm: "token_bucket", Limit: 10, Period: "1s"},
				{Name: "daily", Algorithm: "fixed_window", Limit: 1000, Period: "1d"},
			},
			canon: `[{"name":"burst","algorithm":"token_bucket","limit":10,"period":"1s"},{"name":"daily","algorithm":"fixed_window","limit":1000,"period":"1d"}]`,
		},
		{
			name:  "one named limit stays a list so its name survives",
			in:    `{"name": "only", "algorithm": "sliding_log", "limit": 5, "period": "1m"}`,
			want:  tenants.Limits{{Name: "only", Algorithm: "sliding_log", Limit: 5, Period: "1m"}},
			canon: `[{"name":"only","algorithm":"sliding_log","limit":5,"period":"1m"}]`,
		},
		{
			name:  "list of one unnamed limit",
			in:    `[{"algorithm": "fixed_window", "limit": 5, "period": "1m"}]`,
			want:  tenants.Limits{{Algorithm: "fixed_window", Limit: 5, Period: "1m"}},
			canon: `{"algorithm":"fixed_window","limit":5,"period":"1m"}`,
		},
		{name: "empty list", in: `[]`, want: tenants.Limits{}, canon: `[]`},
		{name: "null", in: `null`, want: nil, canon: `null`},
		{name: "unknown field in object", in: `{"algorithm": "token_bucket", "limit": 1, "perod": "1s"}`, reject: true},
		{name: "unknown field in list", in: `[{"algorithm": "token_bucket", "limit": 1, "period": "1s", "x": 1}]`, reject: true},
		{name: "string", in: `"10/s"`, reject: true},
		{name: "number", in: `10`, reject: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got tenants.Limits
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.reject {
				if err == nil {
					t.Fatalf("accepted %s as %+v", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %#v, want %#v", got, tt.want)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.canon {
				t.Fatalf("marshaled %s, want %s", b, tt.canon)
			}
			var again tenants.Limits
			if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip: %v, %#v", err, again)
			}
		})
	}
}

func TestLimitsJSONUnknownFieldIsInvalid(t *testing.T) {
	var p tenants.Policy
	err := json.Unmarshal([]byte(`{"tiers": {"pro": {"algorithm": "token_bucket", "limit": 1, "perod": "1s"}}}`), &p)
	if errs.Code(err) != errs.Invalid || errs.Message(err) != `limits: unknown field "perod"` {
		t.Fatalf("err = %v", err)
	}
}

func TestParsePeriod(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "60s", want: time.Minute},
		{in: "1m", want: time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "1d", want: 24 * time.Hour},
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "0", want: 0},
		{in: "", bad: true},
		{in: "d", bad: true},
		{in: "-1s", bad: true},
		{in: "+1s", bad: true},
		{in: "-1d", bad: true},
		{in: "1.5d", bad: true},
		{in: "1d-1h", bad: true},
		{in: "1dd", bad: true},
		{in: "60", bad: true},
		{in: "soon", bad: true},
	}
	for _, tt := range tests {
		got, err := tenants.ParsePeriod(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParsePeriod(%q) = %v, %v; want %v, bad=%v", tt.in, got, err, tt.want, tt.bad)
		}
	}
	if d, err := (tenants.LimitSpec{Period: "2d"}).PeriodDuration(); err != nil || d != 48*time.Hour {
		t.Errorf("PeriodDuration = %v, %v", d, err)
	}
}
