package tenants

import (
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
)

// KeyPatch is a partial update of a consumer key (PATCH /v1/keys/{id}).
// A nil field is left as it is.
//
// In JSON, an absent field is left as it is, "expires_at": null removes
// the expiry, and "overrides": null or {} removes every override. Because
// KeyPatch decodes itself, it also refuses unknown fields, which a
// decoder's DisallowUnknownFields would not do for it.
type KeyPatch struct {
	Name      *string
	Tier      *string
	ExpiresAt *time.Time // a new expiry
	// ClearExpiry removes the expiry; it may not be set with ExpiresAt.
	ClearExpiry bool
	// Overrides replaces the key's overrides; a pointer to an empty or nil
	// map removes them all.
	Overrides *map[string]Limits
	// BillingAnchor sets the day its month quotas reset on (0 = the 1st).
	BillingAnchor *int
	// CustomerID attaches the key to one of the tenant's customers; a
	// pointer to "" detaches it ("customer_id": null).
	CustomerID *string
}

// Empty reports whether the patch changes nothing.
func (p KeyPatch) Empty() bool {
	return p.Name == nil && p.Tier == nil && p.ExpiresAt == nil && !p.ClearExpiry && p.Overrides == nil && p.BillingAnchor == nil && p.CustomerID == nil
}

// MarshalJSON implements json.Marshaler.
func (p KeyPatch) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if p.Name != nil {
		m["name"] = *p.Name
	}
	if p.Tier != nil {
		m["tier"] = *p.Tier
	}
	if p.ClearExpiry {
		m["expires_at"] = nil
	} else if p.ExpiresAt != nil {
		m["expires_at"] = *p.ExpiresAt
	}
	if p.Overrides != nil {
		m["overrides"] = *p.Overrides
	}
	if p.BillingAnchor != nil {
		if *p.BillingAnchor == 0 {
			m["billing_anchor"] = nil // removed: UnmarshalJSON reads null as 0
		} else {
			m["billing_anchor"] = *p.BillingAnchor
		}
	}
	if p.CustomerID != nil {
		if *p.CustomerID == "" {
			m["customer_id"] = nil
		} else {
			m["customer_id"] = *p.CustomerID
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *KeyPatch) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*p = KeyPatch{}
	for _, k := range sortedKeys(raw) {
		v := raw[k]
		null := string(v) == "null"
		switch k {
		case "name", "tier":
			var s string
			if null || json.Unmarshal(v, &s) != nil {
				return invalid(k, "must be a string")
			}
			if k == "name" {
				p.Name = &s
			} else {
				p.Tier = &s
			}
		case "expires_at":
			if null {
				p.ClearExpiry = true
				continue
			}
			var t time.Time
			if json.Unmarshal(v, &t) != nil {
				return invalid(k, "must be an RFC 3339 time or null")
			}
			p.ExpiresAt = &t
		case "overrides":
			var m map[string]Limits
			if err := json.Unmarshal(v, &m); err != nil {
				if errs.Code(err) == errs.Invalid {
					return err
				}
				return invalid(k, "must be an object of policy names to limits")
			}
			p.Overrides = &m
		case "billing_anchor":
			// null clears the anchor (month quotas reset on the 1st); a
			// day must be one: 0 is not a day of the month.
			var d int
			if !null {
				if json.Unmarshal(v, &d) != nil || d < 1 || d > MaxBillingAnchor {
					return invalid(k, "must be a day of the month from 1 to 31, or null for none (the 1st)")
				}
			}
			p.BillingAnchor = &d
		case "customer_id":
			// null detaches the key from its customer.
			var id string
			if !null && (json.Unmarshal(v, &id) != nil || id == "") {
				return invalid(k, "must be a customer id (cus_…), or null to detach the key")
			}
			p.CustomerID = &id
		default:
			return errs.Errorf(errs.Invalid, "unknown field %q", k)
		}
	}
	return nil
}
