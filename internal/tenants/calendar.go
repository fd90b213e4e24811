package tenants

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Calendar periods a limit may reset on instead of a rolling period.
const (
	CalendarDay   = "day"
	CalendarWeek  = "week"
	CalendarMonth = "month"
	CalendarYear  = "year"
)

var calendars = []string{CalendarDay, CalendarWeek, CalendarMonth, CalendarYear}

// MaxBillingAnchor is the last day of a month a key's billing anchor may
// name; a month without that day resets on its last day.
const MaxBillingAnchor = 31

// ValidateTimeZone checks an IANA time zone name ("Europe/Paris", "UTC").
// "Local" is refused: it would mean each server's own zone.
func ValidateTimeZone(field, name string) error {
	if name == "" || len(name) > 64 || name == "Local" || strings.ContainsAny(name, " \t\n") {
		return invalid(field, "must be an IANA time zone name such as \"Europe/Paris\" or \"UTC\"")
	}
	if _, err := time.LoadLocation(name); err != nil {
		return invalid(field, "unknown time zone %q: use an IANA name such as \"America/New_York\"", name)
	}
	return nil
}

// ValidateBillingAnchor checks a key's billing anchor: 0 (none: the 1st)
// or a day of the month, 1 to 31.
func ValidateBillingAnchor(field string, day int) error {
	if day < 0 || day > MaxBillingAnchor {
		return invalid(field, "must be a day of the month from 1 to 31, or 0 for none (got %d)", day)
	}
	return nil
}

// SetTimeZone sets the zone the tenant's calendar quotas reset in.
// A bucket's count moves into the new zone's current period, the share of
// it that period overlaps (internal/quota, carry): a period that has just
// begun in the new zone is not charged with the old one's usage.
func (s *TenantStore) SetTimeZone(ctx context.Context, id, zone string, now time.Time) (Tenant, []Change, error) {
	if err := ValidateTimeZone("time_zone", zone); err != nil {
		return Tenant{}, nil, err
	}
	now = normTime(now)
	var t Tenant
	changes, err := s.writeConfig(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		if t, err = queryOne(ctx, tx, scanTenant, "tenant not found", `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id); err != nil {
			return nil, err
		}
		old := t.Zone()
		if old == zone {
			return nil, nil
		}
		t.TimeZone = zone
		if _, err := tx.ExecContext(ctx, `UPDATE tenants SET time_zone = ? WHERE id = ?`, zone, id); err != nil {
			return nil, fmt.Errorf("set tenant time zone: %w", err)
		}
		err = recordAudit(ctx, tx, AuditEntry{TenantID: t.ID, At: now, Action: ActionUpdated, ObjectType: AuditTenant,
			ObjectID: t.ID, ObjectName: t.Name, Changes: diffFields([]field{{"time zone", old}}, []field{{"time zone", zone}})})
		if err != nil {
			return nil, err
		}
		return []Change{tenantChange(t)}, nil
	})
	if err != nil {
		return Tenant{}, nil, err
	}
	return t, changes, nil
}
