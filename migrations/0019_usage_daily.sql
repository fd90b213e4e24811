-- Usage a tenant can bill from: the units its callers consumed, per day,
-- policy and consumer key, kept 400 days (internal/worker/usage.go). day
-- is the date ('YYYY-MM-DD') in the tenant's time zone when the units
-- were counted; key_id is '' for callers without a key. The worker adds
-- to these rows in the transaction that applies the counter batches, so
-- every unit is counted once.

-- +goose Up
CREATE TABLE usage_daily (
    tenant_id TEXT NOT NULL,
    day       TEXT NOT NULL,
    policy    TEXT NOT NULL,
    key_id    TEXT NOT NULL,
    units     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, policy, key_id)
) WITHOUT ROWID;
-- Retention deletes by day.
CREATE INDEX usage_daily_day ON usage_daily(day);

-- +goose Down
DROP TABLE usage_daily;
