-- Analytics kept bounded (internal/worker/rollup.go). Minute rows stay in
-- counters for a few days; older ones are rolled up here into hour rows,
-- and those into day rows, each period keeping its top identities exactly
-- plus one "others" row per policy and tier (identity_kind 'others',
-- identity_id ''), so that totals stay exact. start is the period's first
-- unix minute and res its length in minutes (60 or 1440); first_minute and
-- last_minute are the minutes the row's identity was first and last
-- counted in, so "first seen" and "last seen" stay exact to the minute.

-- +goose Up
CREATE TABLE counter_rollups (
    tenant_id     TEXT NOT NULL,
    res           INTEGER NOT NULL,
    start         INTEGER NOT NULL,
    policy        TEXT NOT NULL,
    tier          TEXT NOT NULL,
    identity_kind TEXT NOT NULL,
    identity_id   TEXT NOT NULL,
    allowed       INTEGER NOT NULL DEFAULT 0,
    denied        INTEGER NOT NULL DEFAULT 0,
    first_minute  INTEGER NOT NULL,
    last_minute   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, res, start, policy, tier, identity_kind, identity_id)
);
CREATE INDEX counter_rollups_start ON counter_rollups(start);

-- +goose Down
DROP TABLE counter_rollups;
