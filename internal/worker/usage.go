package worker

// Usage a tenant can bill from. Counter rows carry the units their
// decisions consumed (bus.CounterRow.Units); applyCounters adds them, in
// the same transaction as the analytics counters, to one row per tenant,
// day, policy and consumer key (usage_daily, migration 0019). A batch is
// applied exactly once (the stream_applied dedupe), so every unit is
// counted once: no fold, roll-up or "others" cell ever touches these rows,
// and the units of one key are exact however many callers the tenant has.
//
// The day is the date, in the tenant's time zone as the worker knows it
// when it applies the batch, of the minute the units were counted in.
// Zone offsets are whole minutes (India's +05:30, Nepal's +05:45 and
// Chatham's +12:45 included), so a minute never straddles two days and
// the day of every unit is the day its decision was made there: the
// days of a month add up to what a month quota counted in it.

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// UsageRetention is how long daily usage is kept: over 13 months, so that
// a year ago's month is still there to compare with, whatever
// --analytics-days keeps of the analytics.
const UsageRetention = service.MaxUsageDays * 24 * time.Hour

// dailyUsage keeps usage_daily: it adds counter batches' units (apply,
// within the stream's transaction), answers usage queries and prunes what
// is older than UsageRetention.
type dailyUsage struct {
	db      *sql.DB
	writeTx func(context.Context, func(*sql.Tx) error) error
	now     func() time.Time
	zones   zoneCache // tenants' time zones
}

// zoneCache keeps each time zone loaded once: time.LoadLocation reads and
// parses the zone's file every time.
type zoneCache struct {
	mu   sync.Mutex
	locs map[string]*time.Location
}

// load answers the zone named name; a name this machine does not know
// (validation keeps it from being stored, but a database may come from a
// machine with a newer zone database) counts in UTC.
func (z *zoneCache) load(name string) *time.Location {
	z.mu.Lock()
	defer z.mu.Unlock()
	if loc, ok := z.locs[name]; ok {
		return loc
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" {
		loc = time.UTC
	}
	if z.locs == nil {
		z.locs = map[string]*time.Location{}
	}
	z.locs[name] = loc
	return loc
}

// usageKey names one usage_daily row.
type usageKey struct{ tenant, day, policy, key string }

// apply adds the batches' units to usage_daily within tx. The
// tenants' zones are read in tx too, so a zone changed meanwhile applies
// from the first batch after its change; a tenant deleted meanwhile gets
// no rows.
func (u *dailyUsage) apply(tx *sql.Tx, batches []*bus.CounterBatch) error {
	sums := map[usageKey]int64{}
	locs := map[string]*time.Location{} // nil: the tenant is gone
	for _, b := range batches {
		for _, r := range b.Rows {
			if r.Units == 0 {
				continue
			}
			loc, seen := locs[r.TenantID]
			if !seen {
				var zone string
				err := tx.QueryRow(`SELECT time_zone FROM tenants WHERE id = ?`, r.TenantID).Scan(&zone)
				switch {
				case errors.Is(err, sql.ErrNoRows):
				case err != nil:
					return err
				default:
					loc = u.zones.load(zone)
				}
				locs[r.TenantID] = loc
			}
			if loc == nil {
				continue
			}
			k := usageKey{tenant: r.TenantID, day: time.Unix(r.Minute*60, 0).In(loc).Format(time.DateOnly), policy: r.Policy}
			if r.IdentityKind == tenants.IdentityKey {
				k.key = r.IdentityID
			}
			sums[k] += r.Units
		}
	}
	if len(sums) == 0 {
		return nil
	}
	// In the table's order, so that consecutive rows land on the same pages.
	keys := make([]usageKey, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b usageKey) int {
		if c := strings.Compare(a.tenant, b.tenant); c != 0 {
			return c
		}
		if c := strings.Compare(a.day, b.day); c != 0 {
			return c
		}
		if c := strings.Compare(a.policy, b.policy); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	m := sqlitedb.NewMultiRow(tx, `INSERT INTO usage_daily (tenant_id, day, policy, key_id, units) VALUES`, 5,
		`ON CONFLICT (tenant_id, day, policy, key_id) DO UPDATE SET units = units + excluded.units`)
	for _, k := range keys {
		if err := m.Add(k.tenant, k.day, k.policy, k.key, sums[k]); err != nil {
			return err
		}
	}
	return m.Flush()
}

// prune deletes daily usage older than UsageRetention, a day more
// for the zones ahead of UTC, in short transactions.
func (u *dailyUsage) prune(ctx context.Context, now time.Time) (int64, error) {
	cut := now.UTC().Add(-UsageRetention - 24*time.Hour).Format(time.DateOnly)
	var deleted int64
	for ctx.Err() == nil {
		var n int64
		err := u.writeTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM usage_daily WHERE (tenant_id, day, policy, key_id) IN
				(SELECT tenant_id, day, policy, key_id FROM usage_daily WHERE day < ? LIMIT 5000)`, cut)
			if err == nil {
				n, _ = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return deleted, err
		}
		deleted += n
		if n < 5000 {
			break
		}
	}
	return deleted, ctx.Err()
}

// query answers a UsageQuery.
func (u *dailyUsage) query(ctx context.Context, q service.UsageQuery) (service.Usage, error) {
	group := q.Group
	switch group {
	case "":
		group = service.UsageByKey
	case service.UsageByKey, service.UsageByPolicy:
	default:
		return service.Usage{}, errs.Errorf(errs.Invalid, "group: must be %q or %q", service.UsageByKey, service.UsageByPolicy)
	}
	var zone string
	err := u.db.QueryRowContext(ctx, `SELECT time_zone FROM tenants WHERE id = ?`, q.TenantID).Scan(&zone)
	if errors.Is(err, sql.ErrNoRows) {
		return service.Usage{}, errs.Errorf(errs.NotFound, "tenant not found")
	}
	if err != nil {
		return service.Usage{}, err
	}
	loc := u.zones.load(zone)
	from, to, err := usageRange(q.From, q.To, loc, u.now())
	if err != nil {
		return service.Usage{}, err
	}
	if to.Before(from) {
		return service.Usage{}, errs.Errorf(errs.Invalid, "to: must not be before from")
	}
	if days := int(to.Sub(from).Hours()/24) + 1; days > service.MaxUsageDays {
		return service.Usage{}, errs.Errorf(errs.Invalid, "to: at most %d days from from, not %d", service.MaxUsageDays, days)
	}
	if q.Limit < 0 || q.Limit > service.MaxUsageRows {
		return service.Usage{}, errs.Errorf(errs.Invalid, "limit: must be between 1 and %d", service.MaxUsageRows)
	}
	// A query without Limit comes from a server older than paging: it
	// gets the whole range or a refusal, never a cut answer.
	whole := q.Limit == 0
	page := q.Limit
	if whole {
		page = service.MaxUsageRows
	}
	after, err := decodeUsageCursor(q.Cursor, group)
	if err != nil {
		return service.Usage{}, err
	}
	if whole && q.Cursor != "" {
		return service.Usage{}, errs.Errorf(errs.Invalid, "cursor: only with limit")
	}
	out := service.Usage{From: from.Format(time.DateOnly), To: to.Format(time.DateOnly), Group: group, TimeZone: loc.String(),
		Rows: []service.UsageRow{}, Paged: !whole}
	more, err := u.page(ctx, q.TenantID, &out, after, page)
	if err != nil {
		return service.Usage{}, err
	}
	if more {
		if whole {
			return service.Usage{}, errs.Errorf(errs.Invalid, "to: the range holds more than %d rows; ask for fewer days at a time", service.MaxUsageRows)
		}
		out.NextCursor = encodeUsageCursor(group, out.Rows[len(out.Rows)-1])
	}
	if whole {
		return out, nil
	}
	// A page's total is the whole range's.
	err = u.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(units), 0) FROM usage_daily WHERE tenant_id = ? AND day >= ? AND day <= ?`,
		q.TenantID, out.From, out.To).Scan(&out.Total)
	return out, err
}

// page reads into out (its range and grouping set) the rows after
// the row after names, at most page of them, adding up their units, and
// answers whether more follow. Pages are read in the order of the rows
// (keyset), from after's day on, so a page costs its rows and one day's,
// however far into the range it is. Rows of 0 units are left out by the
// query itself, so they never take a page's room.
func (u *dailyUsage) page(ctx context.Context, tenantID string, out *service.Usage, after [3]string, page int) (bool, error) {
	start := max(out.From, after[0])
	var rows *sql.Rows
	var err error
	if out.Group == service.UsageByKey {
		rows, err = u.db.QueryContext(ctx, `SELECT u.day, u.key_id, COALESCE(k.name, ''), COALESCE(k.prefix, ''), u.policy, u.units
			FROM usage_daily u LEFT JOIN consumer_keys k ON k.id = u.key_id AND k.tenant_id = u.tenant_id
			WHERE u.tenant_id = ? AND u.day >= ? AND u.day <= ? AND u.units <> 0 AND (u.day, u.key_id, u.policy) > (?, ?, ?)
			ORDER BY u.day, u.key_id, u.policy LIMIT ?`, tenantID, start, out.To, after[0], after[1], after[2], page+1)
	} else {
		rows, err = u.db.QueryContext(ctx, `SELECT day, policy, SUM(units) FROM usage_daily
			WHERE tenant_id = ? AND day >= ? AND day <= ? AND (day, policy) > (?, ?)
			GROUP BY day, policy HAVING SUM(units) <> 0 ORDER BY day, policy LIMIT ?`, tenantID, start, out.To, after[0], after[2], page+1)
	}
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		if len(out.Rows) == page {
			return true, nil
		}
		var r service.UsageRow
		if out.Group == service.UsageByKey {
			err = rows.Scan(&r.Day, &r.KeyID, &r.KeyName, &r.KeyPrefix, &r.Policy, &r.Units)
		} else {
			err = rows.Scan(&r.Day, &r.Policy, &r.Units)
		}
		if err != nil {
			return false, err
		}
		out.Rows = append(out.Rows, r)
		out.Total += r.Units
	}
	return false, rows.Err()
}

// maxUsageCursor bounds a cursor's length: a day, a key id and a policy
// name, encoded.
const maxUsageCursor = 1024

// encodeUsageCursor names the row a page ended on, for the next page to
// start after: the grouping's letter, the day, the key id and the policy,
// as JSON in URL-safe base64, opaque to callers.
func encodeUsageCursor(group string, r service.UsageRow) string {
	b, _ := json.Marshal([]string{group[:1], r.Day, r.KeyID, r.Policy})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeUsageCursor reads a cursor of group: the day, key id and policy
// of the row to start after; all empty, before every row, for none.
func decodeUsageCursor(c, group string) ([3]string, error) {
	var after [3]string
	if c == "" {
		return after, nil
	}
	bad := errs.Errorf(errs.Invalid, "cursor: not one this query answered; start again without it")
	if len(c) > maxUsageCursor {
		return after, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return after, bad
	}
	var parts []string
	if json.Unmarshal(b, &parts) != nil || len(parts) != 4 || parts[0] != group[:1] {
		return after, bad
	}
	if _, err := time.Parse(time.DateOnly, parts[1]); err != nil {
		return after, bad
	}
	return [3]string{parts[1], parts[2], parts[3]}, nil
}

// usageRange reads a usage range's days. Without either end it is the
// current month in loc; without from it starts on the first of to's month,
// without to it ends today.
func usageRange(fromV, toV string, loc *time.Location, now time.Time) (from, to time.Time, err error) {
	y, m, d := now.In(loc).Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	switch {
	case fromV == "" && toV == "":
		from = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return from, from.AddDate(0, 1, -1), nil
	case toV == "":
		from, err = usageDay("from", fromV, loc)
		return from, today, err
	}
	to, err = usageDay("to", toV, loc)
	if err != nil {
		return from, to, err
	}
	if fromV == "" {
		return time.Date(to.Year(), to.Month(), 1, 0, 0, 0, 0, time.UTC), to, nil
	}
	from, err = usageDay("from", fromV, loc)
	return from, to, err
}

// usageDay reads a usage range bound: a date, or an RFC 3339 time, which
// stands for its date in loc. The date answered is midnight UTC of that
// date, for counting days.
func usageDay(field, v string, loc *time.Location) (time.Time, error) {
	if v == "" {
		return time.Time{}, errs.Errorf(errs.Invalid, "%s: required, a date such as 2027-01-31 or an RFC 3339 time", field)
	}
	if d, err := time.Parse(time.DateOnly, v); err == nil {
		return d, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errs.Errorf(errs.Invalid, "%s: must be a date such as 2027-01-31 or an RFC 3339 time such as 2027-01-31T15:04:05Z", field)
	}
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC), nil
}
