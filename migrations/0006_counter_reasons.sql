-- Denials by reason. denied stays the total of a row's denials; the three
-- new columns split it into rate_limited, invalid_key and blocked, which
-- the dashboard and the analytics API show as separate series.
--
-- Rows counted before this migration carry no reason. Where the row itself
-- tells, the reason is filled in: a denial under a policy is rate_limited
-- (invalid keys and blocks are decided before any policy matches); an IP
-- denied with no policy was blocked; the tenant's unknown keys
-- ('invalid_key') were invalid. A key of the tenant denied with no policy
-- was invalid if the key is revoked or expired now, else blocked. The
-- "others" rows denied with no policy cannot tell: their denials stay in
-- denied without a reason.

-- +goose Up
ALTER TABLE counters ADD COLUMN rate_limited INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counters ADD COLUMN invalid_key INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counters ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counter_rollups ADD COLUMN rate_limited INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counter_rollups ADD COLUMN invalid_key INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counter_rollups ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;

UPDATE counters SET rate_limited = denied WHERE denied > 0 AND policy != '';
UPDATE counters SET blocked = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'ip';
UPDATE counters SET invalid_key = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'key'
    AND (identity_id = 'invalid_key' OR identity_id IN (SELECT id FROM consumer_keys
        WHERE consumer_keys.tenant_id = counters.tenant_id AND (revoked_at IS NOT NULL OR expires_at <= CAST(strftime('%s', 'now') AS INTEGER) * 1000)));
UPDATE counters SET blocked = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'key' AND invalid_key = 0;

UPDATE counter_rollups SET rate_limited = denied WHERE denied > 0 AND policy != '';
UPDATE counter_rollups SET blocked = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'ip';
UPDATE counter_rollups SET invalid_key = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'key'
    AND (identity_id = 'invalid_key' OR identity_id IN (SELECT id FROM consumer_keys
        WHERE consumer_keys.tenant_id = counter_rollups.tenant_id AND (revoked_at IS NOT NULL OR expires_at <= CAST(strftime('%s', 'now') AS INTEGER) * 1000)));
UPDATE counter_rollups SET blocked = denied WHERE denied > 0 AND policy = '' AND identity_kind = 'key' AND invalid_key = 0;

-- +goose Down
ALTER TABLE counter_rollups DROP COLUMN blocked;
ALTER TABLE counter_rollups DROP COLUMN invalid_key;
ALTER TABLE counter_rollups DROP COLUMN rate_limited;
ALTER TABLE counters DROP COLUMN blocked;
ALTER TABLE counters DROP COLUMN invalid_key;
ALTER TABLE counters DROP COLUMN rate_limited;
