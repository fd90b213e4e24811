-- Persisted buckets clustered on (part, key) instead of key with an index on
-- part. The worker writes each transaction's buckets in (part, key) order,
-- so a flood of new callers appends to one B-tree instead of inserting at
-- random places in a second one (the index); BENCHMARKS.md has the worker's
-- rows per second before and after.
-- A server taking a cluster partition over reads one range of the table;
-- hydration of a whole server reads the table in (part, key) order
-- (bus.CompareBucketKeys). A lookup by key computes the key's partition
-- (bus.Partition), which the worker stores with every row.
--
-- Rewriting the table takes a few seconds per million rows, once.

-- +goose Up
CREATE TABLE buckets_by_part (
    part       INTEGER NOT NULL,
    key        TEXT NOT NULL,
    tenant_id  TEXT NOT NULL,
    state      TEXT NOT NULL,
    full_at    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (part, key)
) WITHOUT ROWID;
INSERT INTO buckets_by_part (part, key, tenant_id, state, full_at, seq, updated_at)
    SELECT part, key, tenant_id, state, full_at, seq, updated_at FROM buckets ORDER BY part, key;
DROP TABLE buckets;
ALTER TABLE buckets_by_part RENAME TO buckets;

-- +goose Down
CREATE TABLE buckets_by_key (
    key        TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    part       INTEGER NOT NULL,
    state      TEXT NOT NULL,
    full_at    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO buckets_by_key (key, tenant_id, part, state, full_at, seq, updated_at)
    SELECT key, tenant_id, part, state, full_at, seq, updated_at FROM buckets;
DROP TABLE buckets;
ALTER TABLE buckets_by_key RENAME TO buckets;
CREATE INDEX buckets_part ON buckets(part);
