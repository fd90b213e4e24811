-- Sluice's initial schema. Times are INTEGER unix milliseconds (UTC);
-- nullable times mean "never". JSON columns hold documented shapes.

-- +goose Up
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
);

-- Dashboard users. tenant_id is NULL for the platform operator.
CREATE TABLE users (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT REFERENCES tenants(id) ON DELETE CASCADE,
    email         TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash TEXT NOT NULL,
    role          TEXT NOT NULL CHECK (role IN ('operator', 'owner', 'member')),
    created_at    INTEGER NOT NULL
);

CREATE TABLE service_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    prefix     TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE TABLE consumer_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    tier       TEXT NOT NULL,
    prefix     TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    overrides  TEXT NOT NULL DEFAULT '{}',
    expires_at INTEGER,
    revoked_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX consumer_keys_tenant ON consumer_keys(tenant_id);

CREATE TABLE policies (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    query       TEXT NOT NULL DEFAULT '{}',
    consistency TEXT NOT NULL,
    shadow      INTEGER NOT NULL DEFAULT 0,
    tiers       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE blocks (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    identity_kind TEXT NOT NULL CHECK (identity_kind IN ('ip', 'key')),
    identity_id   TEXT NOT NULL,
    reason        TEXT NOT NULL,
    expires_at    INTEGER,
    created_at    INTEGER NOT NULL
);
CREATE INDEX blocks_tenant ON blocks(tenant_id);

-- Small platform-wide values: the operator token's hash, the config version.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Persisted hot-cache buckets, keyed tenant/policy/identity. state is the
-- JSON of the bucket's limits and per-limit state; full_at (unix ns) is when
-- the bucket is full again, after which the TTL sweep deletes the row; seq
-- is the state stream sequence that wrote it, so a redelivered older state
-- never overwrites a newer one; part is the key's cluster partition
-- (bus.Partition), so a server taking a partition over loads only its rows.
-- Every allowed check ends in an upsert here, so the table is clustered on
-- its key (WITHOUT ROWID: one B-tree instead of two) and full_at, which
-- changes on every upsert, has no index: the sweep scans the table every
-- 30 s instead of every upsert paying for index churn.
CREATE TABLE buckets (
    key        TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    part       INTEGER NOT NULL,
    state      TEXT NOT NULL,
    full_at    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX buckets_part ON buckets(part);

-- Decision counts per tenant, policy, tier, identity and minute.
CREATE TABLE counters (
    tenant_id     TEXT NOT NULL,
    minute        INTEGER NOT NULL,
    policy        TEXT NOT NULL,
    tier          TEXT NOT NULL,
    identity_kind TEXT NOT NULL,
    identity_id   TEXT NOT NULL,
    allowed       INTEGER NOT NULL DEFAULT 0,
    denied        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, minute, policy, tier, identity_kind, identity_id)
);
CREATE INDEX counters_minute ON counters(minute);

-- Stream messages whose effect is committed, recorded in the same
-- transaction as the effect, so that a redelivered message (a worker died
-- between COMMIT and ack) is never applied twice. Rows at or below the
-- consumer's ack floor can never be redelivered and are pruned.
CREATE TABLE stream_applied (
    stream TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;

-- +goose Down
DROP TABLE stream_applied;
DROP TABLE counters;
DROP TABLE buckets;
DROP TABLE settings;
DROP TABLE blocks;
DROP TABLE policies;
DROP TABLE consumer_keys;
DROP TABLE service_keys;
DROP TABLE users;
DROP TABLE tenants;
