-- What a policy does with a caller whose tier it does not list (and that
-- no default tier covers): 'allow' (no limit, as before) or 'deny'.

-- +goose Up
ALTER TABLE policies ADD COLUMN unlisted_tiers TEXT NOT NULL DEFAULT 'allow' CHECK (unlisted_tiers IN ('allow', 'deny'));

-- +goose Down
ALTER TABLE policies DROP COLUMN unlisted_tiers;
