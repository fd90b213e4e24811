-- Denials by a concurrency limit (reason concurrency_limited) get a column of
-- their own beside rate_limited, invalid_key and blocked, per minute in
-- counters and per period in counter_rollups. Rows from before count them in
-- denied only.

-- +goose Up
ALTER TABLE counters ADD COLUMN concurrency_limited INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counter_rollups ADD COLUMN concurrency_limited INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE counter_rollups DROP COLUMN concurrency_limited;
ALTER TABLE counters DROP COLUMN concurrency_limited;
