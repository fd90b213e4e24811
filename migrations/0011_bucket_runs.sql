-- Bucket states are first appended to sorted runs and merged into buckets
-- later, one partition at a time (internal/worker/runs.go).
--
-- A flood of callers scattered over a buckets table larger than the page
-- cache dirties one B-tree page per row written in place: about 4 KiB of
-- WAL per bucket, and 16-20k rows/s at 3M buckets. A run is one stream
-- transaction's states in (part, key) order under a new run number, so it
-- is appended at the right edge of bucket_runs' B-tree. Merging a
-- partition later writes each of its pages once for all the states staged
-- for it meanwhile.
--
-- Readers take a key's newest state (the highest seq) from either table;
-- buckets_live does that in SQL, for tools and tests.

-- +goose Up
CREATE TABLE bucket_runs (
    run        INTEGER NOT NULL,
    part       INTEGER NOT NULL,
    key        TEXT NOT NULL,
    tenant_id  TEXT NOT NULL,
    state      BLOB NOT NULL,
    full_at    INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (run, part, key)
) WITHOUT ROWID;

-- The runs that still hold rows: readers look a partition up in each.
CREATE TABLE bucket_run_ids (
    run INTEGER PRIMARY KEY
);

CREATE VIEW buckets_live AS
    SELECT part, key, tenant_id, state, full_at, max(seq) AS seq, updated_at FROM (
        SELECT part, key, tenant_id, state, full_at, seq, updated_at FROM buckets
        UNION ALL
        SELECT part, key, tenant_id, state, full_at, seq, updated_at FROM bucket_runs
    ) GROUP BY part, key;

-- +goose Down
DROP VIEW buckets_live;
INSERT INTO buckets (part, key, tenant_id, state, full_at, seq, updated_at)
    SELECT part, key, tenant_id, state, full_at, seq, updated_at FROM bucket_runs WHERE true ORDER BY part, key, seq
    ON CONFLICT (part, key) DO UPDATE SET tenant_id = excluded.tenant_id, state = excluded.state, full_at = excluded.full_at,
        seq = excluded.seq, updated_at = excluded.updated_at WHERE excluded.seq > buckets.seq;
DROP TABLE bucket_run_ids;
DROP TABLE bucket_runs;
