-- A tenant the operator suspended: its service keys are refused with 403
-- and its users cannot sign in, while every row it owns is kept, so
-- resuming (setting suspended_at back to NULL) restores it as it was.
-- NULL: active.

-- +goose Up
ALTER TABLE tenants ADD COLUMN suspended_at INTEGER;

-- +goose Down
ALTER TABLE tenants DROP COLUMN suspended_at;
