package tenants

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// LimitSpec is one limit as the API writes it. The quota engine's own
// limit type is built from it with PeriodDuration; this package does not
// import the engine, so the conversion lives with the caller.
type LimitSpec struct {
	Name      string `json:"name,omitempty"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	// Period is Go duration text ("60s", "1m30s") or whole days ("1d"),
	// optionally followed by duration text ("1d12h").
	Period string `json:"period"`
	// Burst is the token bucket's capacity; 0 means Limit.
	Burst int64 `json:"burst,omitempty"`
	// Calendar, instead of Period, makes a fixed window that resets at the
	// start of each day, week (Monday), month or year in the tenant's
	// time zone, or, for a month, on the key's billing anchor day.
	Calendar string `json:"calendar,omitempty"`
	// Per says what the limit counts per: PerKey (also when empty), one
	// bucket for each caller, or PerCustomer, one bucket shared by all of a
	// customer's callers.
	Per string `json:"per,omitempty"`
}

// What a limit counts per (LimitSpec.Per).
const (
	PerKey      = "key"
	PerCustomer = "customer"
)

// PerCustomer reports whether the limit counts per customer.
func (l LimitSpec) PerCustomer() bool { return l.Per == PerCustomer }

// HasPerCustomer reports whether ls holds a limit counted per customer.
func (ls Limits) HasPerCustomer() bool {
	for _, l := range ls {
		if l.PerCustomer() {
			return true
		}
	}
	return false
}

// PeriodDuration parses Period.
func (l LimitSpec) PeriodDuration() (time.Duration, error) {
	return ParsePeriod(l.Period)
}

// ParsePeriod parses a period: Go duration text, optionally preceded by a
// whole number of days ("1d", "7d", "1d12h").
func ParsePeriod(s string) (time.Duration, error) {
	bad := fmt.Errorf("invalid period %q", s)
	if s == "" {
		return 0, bad
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil { // ParseUint takes no sign
			return 0, bad
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		return 0, bad
	}
	return days + d, nil
}

// Limits is a tier's set of limits. A check passes only if every limit
// allows it.
//
// In JSON, Limits holding exactly one unnamed limit is a single object, as
// API.md writes a simple tier; any other Limits is an array. Either form
// unmarshals, so a marshaled value always reads back equal. Unknown fields
// inside a limit are rejected here, because a decoder's DisallowUnknownFields
// does not reach into a custom unmarshaler.
type Limits []LimitSpec

// MarshalJSON implements json.Marshaler.
func (ls Limits) MarshalJSON() ([]byte, error) {
	if ls == nil {
		return []byte("null"), nil
	}
	if len(ls) == 1 && ls[0].Name == "" {
		return json.Marshal(ls[0])
	}
	return json.Marshal([]LimitSpec(ls))
}

// UnmarshalJSON implements json.Unmarshaler.
func (ls *Limits) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errs.Errorf(errs.Invalid, "limits: must be an object or an array of objects")
	}
	switch b[0] {
	case 'n':
		if string(b) != "null" {
			break
		}
		*ls = nil
		return nil
	case '{':
		var l LimitSpec
		if err := decodeStrict(b, &l); err != nil {
			return err
		}
		*ls = Limits{l}
		return nil
	case '[':
		var s []LimitSpec
		if err := decodeStrict(b, &s); err != nil {
			return err
		}
		if s == nil {
			s = []LimitSpec{}
		}
		*ls = s
		return nil
	}
	return errs.Errorf(errs.Invalid, "limits: must be an object or an array of objects")
}

func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return errs.Errorf(errs.Invalid, "limits: unknown field %s", f)
		}
		return err
	}
	return nil
}
