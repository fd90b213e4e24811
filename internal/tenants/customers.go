package tenants

import (
	"encoding/json"
	"maps"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/errs"
)

// IDCustomer prefixes customer ids.
const IDCustomer = "cus_"

// Bounds on a customer's fields and on pages of customers.
const (
	MaxExternalID       = 128
	MaxMetadataEntries  = 50
	MaxMetadataKey      = 40
	MaxMetadataValue    = 500
	DefaultCustomerPage = 50
	MaxCustomerPage     = 500
)

var metadataKeyRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,40}$`)

// Customer is one of a tenant's own customers: an organisation that holds
// several of the tenant's consumer keys (ConsumerKey.CustomerID).
// ExternalID is the tenant's id for it, unique within the tenant. Tier,
// BillingAnchor and Overrides are checked as a key's are; Metadata is the
// tenant's, stored and shown, never read by Sluice.
type Customer struct {
	ID            string            `json:"id"`
	TenantID      string            `json:"tenant_id"`
	ExternalID    string            `json:"external_id"`
	Name          string            `json:"name"`
	Tier          string            `json:"tier"`
	BillingAnchor int               `json:"billing_anchor,omitempty"`
	Overrides     map[string]Limits `json:"overrides,omitempty"`
	Metadata      map[string]string `json:"metadata"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
}

// CustomerBody is a customer as clients write it: the body of POST
// /v1/customers (external_id and tier required) and of PATCH
// /v1/customers/{id} (every field optional). A nil field is left as it is.
// In JSON, "billing_anchor": null removes the anchor, and "overrides" or
// "metadata" null or {} removes them all. It decodes itself, so it refuses
// unknown fields and names the field of a value of the wrong type.
type CustomerBody struct {
	ExternalID    *string
	Name          *string
	Tier          *string
	BillingAnchor *int // a day 1–31; a pointer to 0 removes the anchor
	Overrides     *map[string]Limits
	Metadata      *map[string]string
}

// MarshalJSON implements json.Marshaler.
func (b CustomerBody) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range map[string]*string{"external_id": b.ExternalID, "name": b.Name, "tier": b.Tier} {
		if v != nil {
			m[k] = *v
		}
	}
	if b.BillingAnchor != nil {
		if *b.BillingAnchor == 0 {
			m["billing_anchor"] = nil
		} else {
			m["billing_anchor"] = *b.BillingAnchor
		}
	}
	if b.Overrides != nil {
		m["overrides"] = *b.Overrides
	}
	if b.Metadata != nil {
		m["metadata"] = *b.Metadata
	}
	return json.Marshal(m)
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *CustomerBody) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return errs.Errorf(errs.Invalid, "body: must be a JSON object")
	}
	*b = CustomerBody{}
	for _, k := range sortedKeys(raw) {
		v := raw[k]
		null := string(v) == "null"
		switch k {
		case "external_id", "name", "tier":
			var s string
			if null || json.Unmarshal(v, &s) != nil {
				return invalid(k, "must be a string")
			}
			switch k {
			case "external_id":
				b.ExternalID = &s
			case "name":
				b.Name = &s
			default:
				b.Tier = &s
			}
		case "billing_anchor":
			var d int
			if !null && (json.Unmarshal(v, &d) != nil || d < 1 || d > MaxBillingAnchor) {
				return invalid(k, "must be a day of the month from 1 to 31, or null for none (the 1st)")
			}
			b.BillingAnchor = &d
		case "overrides":
			m := map[string]Limits{}
			if !null {
				if err := json.Unmarshal(v, &m); err != nil {
					if errs.Code(err) == errs.Invalid {
						return err
					}
					return invalid(k, "must be an object of policy names to limits")
				}
			}
			b.Overrides = &m
		case "metadata":
			m := map[string]string{}
			if !null && json.Unmarshal(v, &m) != nil {
				return invalid(k, "must be an object of string values")
			}
			b.Metadata = &m
		default:
			return errs.Errorf(errs.Invalid, "unknown field %q", k)
		}
	}
	return nil
}

// Apply writes b over c and validates the result, naming the field at
// fault; c is left partly written on an error. Whether override names are
// the tenant's policies, and whether the external id is free, are the
// store's checks.
func (b CustomerBody) Apply(c *Customer) error {
	if b.ExternalID != nil {
		c.ExternalID = *b.ExternalID
	}
	if b.Name != nil {
		c.Name = *b.Name
	}
	if b.Tier != nil {
		c.Tier = *b.Tier
	}
	if b.BillingAnchor != nil {
		c.BillingAnchor = *b.BillingAnchor
	}
	if b.Overrides != nil {
		c.Overrides = maps.Clone(*b.Overrides)
	}
	if b.Metadata != nil {
		c.Metadata = maps.Clone(*b.Metadata)
	}
	if len(c.Overrides) == 0 {
		c.Overrides = nil
	}
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	return c.Validate()
}

// Validate checks the fields a client sets on a customer.
func (c Customer) Validate() error {
	if err := ValidateExternalID("external_id", c.ExternalID); err != nil {
		return err
	}
	if c.Name != "" {
		if err := validateName("name", c.Name); err != nil {
			return err
		}
	}
	if err := ValidateTier("tier", c.Tier); err != nil {
		return err
	}
	if err := ValidateBillingAnchor("billing_anchor", c.BillingAnchor); err != nil {
		return err
	}
	if err := ValidateOverrides(c.Overrides); err != nil {
		return err
	}
	return validateMetadata(c.Metadata)
}

// ValidateExternalID checks a customer's external id: 1 to 128 bytes of
// printable UTF-8.
func ValidateExternalID(field, id string) error {
	switch {
	case id == "":
		return invalid(field, "required: your own id for this customer, such as org_42")
	case len(id) > MaxExternalID || !printable(id):
		return invalid(field, "must be 1 to %d bytes of printable characters", MaxExternalID)
	}
	return nil
}

func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return invalid("metadata", "must hold at most %d entries", MaxMetadataEntries)
	}
	for _, k := range sortedKeys(md) {
		if !metadataKeyRE.MatchString(k) {
			return invalid("metadata", "%q is not a key: 1 to %d characters of A-Z, a-z, 0-9, _, . and -", truncate(k, MaxMetadataKey), MaxMetadataKey)
		}
		if v := md[k]; len(v) > MaxMetadataValue || !utf8.ValidString(v) {
			return invalid("metadata."+k, "must be at most %d bytes of UTF-8", MaxMetadataValue)
		}
	}
	return nil
}

// CustomerQuery asks for one page of a tenant's customers, oldest first.
type CustomerQuery struct {
	TenantID string `json:"tenant_id"`
	// Search keeps customers whose "external_id name tier" contains it,
	// compared in lower case.
	Search string `json:"search,omitempty"`
	// Offset is where the page starts among the matching customers; past
	// the last one it is moved back to the last page's start.
	Offset int `json:"offset,omitempty"`
	// Limit is the page size: 1–MaxCustomerPage, DefaultCustomerPage when 0.
	Limit int `json:"limit,omitempty"`
}

// CustomerPage is one page of customers and the counts a list shows.
type CustomerPage struct {
	Customers []Customer `json:"customers"`
	Offset    int        `json:"offset"`
	Limit     int        `json:"limit"`
	// Total counts every customer of the tenant; Matched those the query
	// keeps, over all pages.
	Total   int `json:"total"`
	Matched int `json:"matched"`
}

func (q CustomerQuery) validate() error {
	if q.Limit < 0 || q.Limit > MaxCustomerPage {
		return invalid("limit", "must be from 1 to %d", MaxCustomerPage)
	}
	if q.Offset < 0 {
		return invalid("offset", "must not be negative")
	}
	if len(q.Search) > maxKeyNameLength {
		return invalid("search", "longer than %d bytes", maxKeyNameLength)
	}
	return nil
}
