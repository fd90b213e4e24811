package tenants

// Reads of a tenant's consumer keys sized for a page: the dashboard shows a
// page of a filtered, sorted list, names the few keys an analytics table
// shows, and counts keys, without moving every key of a tenant that has
// tens of thousands. Filtering, sorting and paging happen in SQL.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Sorts of KeyQuery.
const (
	KeySortName    = "name"    // case-insensitively (ASCII); the default
	KeySortPrefix  = "prefix"  // byte order
	KeySortTier    = "tier"    // byte order
	KeySortExpires = "expires" // soonest first, keys that never expire last
	KeySortRanked  = "ranked"  // KeyQuery.Ranked first, in that order
)

// DefaultKeyPage and MaxKeyPage bound KeyQuery.Limit; MaxRankedKeys bounds
// KeyQuery.Ranked and the ids of a names lookup.
const (
	DefaultKeyPage = 50
	MaxKeyPage     = 500
	MaxRankedKeys  = 1000
)

// KeyQuery asks for one page of a tenant's consumer keys.
type KeyQuery struct {
	TenantID string `json:"tenant_id"`
	// Search keeps keys whose "name prefix tier" contains it, compared in
	// lower case (strings.ToLower on both sides).
	Search string `json:"search,omitempty"`
	// Tier keeps keys of exactly this tier.
	Tier string `json:"tier,omitempty"`
	// CustomerID keeps the keys of this customer of the tenant.
	CustomerID string `json:"customer_id,omitempty"`
	// IncludeRevoked keeps revoked keys; without it they are left out and
	// counted in KeyPage.HiddenRevoked.
	IncludeRevoked bool `json:"include_revoked,omitempty"`
	// Sort is one of the KeySort constants; "" is KeySortName. Ties, and
	// the keys KeySortRanked does not rank, are ordered oldest first.
	Sort string `json:"sort,omitempty"`
	// Ranked are key ids in the order KeySortRanked puts first (the
	// dashboard's most recently used keys); at most MaxRankedKeys.
	Ranked []string `json:"ranked,omitempty"`
	// Offset is where the page starts among the matching keys. Past the
	// last key it is moved back to the last page's start.
	Offset int `json:"offset,omitempty"`
	// Limit is the page size: 1–MaxKeyPage, DefaultKeyPage when 0.
	Limit int `json:"limit,omitempty"`
}

// KeyPage is one page of keys and the counts a list's states need.
type KeyPage struct {
	Keys []ConsumerKey `json:"keys"`
	// Offset is where Keys start among the matching keys (the query's, or
	// moved back to the last page).
	Offset int `json:"offset"`
	// Limit is the page size used.
	Limit int `json:"limit"`
	// Total counts every key of the tenant, revoked and expired included.
	Total int `json:"total"`
	// Matched counts the keys the query keeps, over all pages.
	Matched int `json:"matched"`
	// HiddenRevoked counts the revoked keys the filter matched that were
	// left out because IncludeRevoked was not set.
	HiddenRevoked int `json:"hidden_revoked"`
}

// KeyCounts counts a tenant's consumer keys.
type KeyCounts struct {
	Total   int `json:"total"`
	Revoked int `json:"revoked"`
}

func (q KeyQuery) validate() error {
	switch q.Sort {
	case "", KeySortName, KeySortPrefix, KeySortTier, KeySortExpires, KeySortRanked:
	default:
		return invalid("sort", "must be one of name, prefix, tier, expires, ranked")
	}
	if q.Limit < 0 || q.Limit > MaxKeyPage {
		return invalid("limit", "must be from 1 to %d", MaxKeyPage)
	}
	if q.Offset < 0 {
		return invalid("offset", "must not be negative")
	}
	if len(q.Ranked) > MaxRankedKeys {
		return invalid("ranked", "at most %d ids", MaxRankedKeys)
	}
	return nil
}

// keyOrder is each sort's ORDER BY over consumer_keys AS k and, for
// KeySortRanked, json_each AS r. The name order matches the index of
// migration 0013 so the first pages are read in order.
var keyOrder = map[string]string{
	KeySortName:    `k.name COLLATE NOCASE, k.created_at, k.id`,
	KeySortPrefix:  `k.prefix, k.created_at, k.id`,
	KeySortTier:    `k.tier, k.created_at, k.id`,
	KeySortExpires: `k.expires_at IS NULL, k.expires_at, k.created_at, k.id`,
	KeySortRanked:  `r.key IS NULL, r.key, k.created_at, k.id`,
}

// qualifiedKeyColumns are consumerKeyColumns of the table aliased k: the
// ranked sort joins json_each, which has an id column too.
var qualifiedKeyColumns = "k." + strings.ReplaceAll(consumerKeyColumns, ", ", ", k.")

// Page returns one page of the tenant's consumer keys that
// q keeps, with the counts the list shows. An unknown tenant has no keys.
func (s *KeyStore) Page(ctx context.Context, q KeyQuery) (KeyPage, error) {
	if err := q.validate(); err != nil {
		return KeyPage{}, err
	}
	if q.Sort == "" {
		q.Sort = KeySortName
	}
	if q.Limit == 0 {
		q.Limit = DefaultKeyPage
	}
	// No transaction: the DSN makes every transaction immediate, and a
	// page read must not queue behind (or hold up) config writes. A write
	// landing between the counts and the page shows as a count one off
	// until the next load.
	db := s.db
	where, args := `k.tenant_id = ?`, []any{q.TenantID}
	if q.Tier != "" {
		where += ` AND k.tier = ?`
		args = append(args, q.Tier)
	}
	if q.CustomerID != "" {
		where += ` AND k.customer_id = ?`
		args = append(args, q.CustomerID)
	}
	if q.Search != "" {
		// sluice_fold is strings.ToLower, registered on every connection
		// by internal/sqlitedb.
		where += ` AND instr(sluice_fold(k.name || ' ' || k.prefix || ' ' || k.tier), ?) > 0`
		args = append(args, strings.ToLower(q.Search))
	}
	page := KeyPage{Keys: []ConsumerKey{}, Limit: q.Limit}
	var matched, revoked int
	if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(k.revoked_at IS NOT NULL), 0) FROM consumer_keys k WHERE `+where, args...).Scan(&matched, &revoked); err != nil {
		return KeyPage{}, fmt.Errorf("count consumer keys: %w", err)
	}
	page.Total = matched
	if q.Tier != "" || q.Search != "" || q.CustomerID != "" {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM consumer_keys WHERE tenant_id = ?`, q.TenantID).Scan(&page.Total); err != nil {
			return KeyPage{}, fmt.Errorf("count consumer keys: %w", err)
		}
	}
	page.Matched = matched
	if !q.IncludeRevoked {
		page.Matched, page.HiddenRevoked = matched-revoked, revoked
		where += ` AND k.revoked_at IS NULL`
	}
	page.Offset = q.Offset
	if page.Offset >= page.Matched {
		page.Offset = max(0, (page.Matched-1)/q.Limit*q.Limit)
	}
	if page.Matched == 0 {
		return page, nil
	}

	from := `consumer_keys k`
	if q.Sort == KeySortRanked {
		ranked, err := json.Marshal(dedupe(q.Ranked))
		if err != nil {
			return KeyPage{}, fmt.Errorf("encode ranked keys: %w", err)
		}
		from += ` LEFT JOIN json_each(?) r ON r.value = k.id`
		args = append([]any{string(ranked)}, args...)
	}
	args = append(args, q.Limit, page.Offset)
	keys, err := queryAll(ctx, db, scanConsumerKey,
		`SELECT `+qualifiedKeyColumns+` FROM `+from+` WHERE `+where+` ORDER BY `+keyOrder[q.Sort]+` LIMIT ? OFFSET ?`, args...)
	if err != nil {
		return KeyPage{}, fmt.Errorf("list consumer keys: %w", err)
	}
	if keys != nil {
		page.Keys = keys
	}
	return page, nil
}

// dedupe drops repeated ids, keeping the first: a repeated id would join
// its key twice.
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Names maps those of ids that are the tenant's consumer keys
// to their names; other ids (another tenant's keys, unknown ones) are left
// out. At most MaxRankedKeys ids.
func (s *KeyStore) Names(ctx context.Context, tenantID string, ids []string) (map[string]string, error) {
	if len(ids) > MaxRankedKeys {
		return nil, invalid("ids", "at most %d ids", MaxRankedKeys)
	}
	out := make(map[string]string, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	raw, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode key ids: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, name FROM consumer_keys WHERE tenant_id = ? AND id IN (SELECT value FROM json_each(?))`, tenantID, string(raw))
	if err != nil {
		return nil, fmt.Errorf("name consumer keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("name consumer keys: %w", err)
		}
		out[id] = name
	}
	return out, rows.Err()
}

// Count counts the tenant's consumer keys.
func (s *KeyStore) Count(ctx context.Context, tenantID string) (KeyCounts, error) {
	var c KeyCounts
	err := s.db.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(revoked_at IS NOT NULL), 0) FROM consumer_keys WHERE tenant_id = ?`, tenantID).Scan(&c.Total, &c.Revoked)
	if err != nil {
		return KeyCounts{}, fmt.Errorf("count consumer keys: %w", err)
	}
	return c, nil
}
