-- Credential lifecycle. users.session_version is carried in every session
-- token and bumped when the user's password, email or role changes, so
-- every session issued before is refused by every server; last_login_at is
-- the user's last dashboard sign-in. service_keys.last_used_at is the
-- minute a server last saw the key, reported in batches (NULL: never).

-- +goose Up
ALTER TABLE users ADD COLUMN session_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN last_login_at INTEGER;
ALTER TABLE service_keys ADD COLUMN last_used_at INTEGER;

-- +goose Down
ALTER TABLE service_keys DROP COLUMN last_used_at;
ALTER TABLE users DROP COLUMN last_login_at;
ALTER TABLE users DROP COLUMN session_version;
