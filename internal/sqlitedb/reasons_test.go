package sqlitedb

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/sluicehq/sluice/migrations"
)

// Migration 0006 splits denials by reason; rows counted before it get the
// reason the row itself tells, and the "others" rows without a policy,
// which cannot tell, keep their denials in denied only.
func TestDenialReasonsOfOlderRows(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open(driverName, "file:"+filepath.Join(t.TempDir(), "old.db")+"?_foreign_keys=on")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO tenants (id, name, created_at) VALUES ('ten_a', 'a', 0)`,
		`INSERT INTO consumer_keys (id, tenant_id, name, tier, prefix, hash, created_at, updated_at, revoked_at)
			VALUES ('ckey_revoked', 'ten_a', 'r', 'pro', 'ck_r', 'h1', 0, 0, 1), ('ckey_live', 'ten_a', 'l', 'pro', 'ck_l', 'h2', 0, 0, NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	rows := []struct {
		policy, kind, id string
		denied           int64
		rl, ik, bl       int64 // what 0006 should make of it
	}{
		{"heavy", "ip", "192.0.2.1", 7, 7, 0, 0}, // under a policy: rate limited
		{"", "ip", "192.0.2.2", 3, 0, 0, 3},      // an IP with no policy: blocked
		{"", "key", "invalid_key", 2, 0, 2, 0},   // unknown keys
		{"", "key", "ckey_revoked", 1, 0, 1, 0},  // a revoked key of the tenant
		{"", "key", "ckey_live", 4, 0, 0, 4},     // a live key denied without a policy: blocked
		{"", "others", "", 5, 0, 0, 0},           // cannot tell
		{"heavy", "others", "", 6, 6, 0, 0},      // others under a policy: rate limited
	}
	for _, r := range rows {
		for _, table := range []string{"counters", "counter_rollups"} {
			q := `INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied) VALUES ('ten_a', 1, ?, 't', ?, ?, 1, ?)`
			if table == "counter_rollups" {
				q = `INSERT INTO counter_rollups (tenant_id, res, start, policy, tier, identity_kind, identity_id, allowed, denied, first_minute, last_minute)
					VALUES ('ten_a', 60, 0, ?, 't', ?, ?, 1, ?, 0, 0)`
			}
			if _, err := db.ExecContext(ctx, q, r.policy, r.kind, r.id, r.denied); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"counters", "counter_rollups"} {
		for _, r := range rows {
			var rl, ik, bl, d int64
			err := db.QueryRowContext(ctx, `SELECT rate_limited, invalid_key, blocked, denied FROM `+table+`
				WHERE policy = ? AND identity_kind = ? AND identity_id = ?`, r.policy, r.kind, r.id).Scan(&rl, &ik, &bl, &d)
			if err != nil {
				t.Fatal(err)
			}
			if rl != r.rl || ik != r.ik || bl != r.bl || d != r.denied {
				t.Errorf("%s %s/%s:%s: %d rate_limited, %d invalid_key, %d blocked of %d; want %d, %d, %d",
					table, r.policy, r.kind, r.id, rl, ik, bl, d, r.rl, r.ik, r.bl)
			}
		}
	}
}
