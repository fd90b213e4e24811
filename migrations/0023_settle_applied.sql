-- A settle is recorded first (the caller's actual amount), then applied to
-- its buckets by the bucket's owner, which marks it applied here first, in
-- its own write, fenced by the partition's term: applied_by names that
-- owner (node and term), so the owner's own retry of the mark is answered
-- yes and any other's no, and a settle's difference is applied once. A
-- settle recorded but not applied (the apply failed) is applied by the
-- caller's retry. Settles recorded before these columns existed were
-- applied or reopened.

-- +goose Up
ALTER TABLE reservations ADD COLUMN applied INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN applied_by TEXT NOT NULL DEFAULT '';
UPDATE reservations SET applied = 1 WHERE state = 'settled';

-- +goose Down
ALTER TABLE reservations DROP COLUMN applied_by;
ALTER TABLE reservations DROP COLUMN applied;
