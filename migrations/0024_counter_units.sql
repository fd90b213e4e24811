-- The units decisions consumed (usage), per minute in counters and per
-- period in counter_rollups, beside the decisions: analytics' time series
-- show them per step. Daily usage (usage_daily) stays the record to bill
-- from; these follow the analytics' retention and folding (an identity
-- folded into "others" takes its units with it, so totals per policy stay
-- exact).

-- +goose Up
ALTER TABLE counters ADD COLUMN units INTEGER NOT NULL DEFAULT 0;
ALTER TABLE counter_rollups ADD COLUMN units INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE counter_rollups DROP COLUMN units;
ALTER TABLE counters DROP COLUMN units;
