-- A settle is recorded first and its difference applied to the buckets
-- after; applied says the second step is known to have landed. A settle
-- recorded but not applied (the apply failed) is applied by the caller's
-- retry, once: the bucket's owner remembers the settle's id. Settles
-- recorded before this column existed were applied or reopened.

-- +goose Up
ALTER TABLE reservations ADD COLUMN applied INTEGER NOT NULL DEFAULT 0;
UPDATE reservations SET applied = 1 WHERE state = 'settled';

-- +goose Down
ALTER TABLE reservations DROP COLUMN applied;
