-- Calendar quotas: a limit may reset at the start of each day, week,
-- month or year in its tenant's time zone (an IANA name), or on a
-- consumer key's billing anchor day (1-31; 0 = the 1st).

-- +goose Up
ALTER TABLE tenants ADD COLUMN time_zone TEXT NOT NULL DEFAULT 'UTC';
ALTER TABLE consumer_keys ADD COLUMN billing_anchor INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE consumer_keys DROP COLUMN billing_anchor;
ALTER TABLE tenants DROP COLUMN time_zone;
