-- A tenant made by `cmd/server --demo`: its policies, keys and traffic are
-- generated, so the operator's pages mark it and a later --demo replaces
-- it. 0: a real tenant.

-- +goose Up
ALTER TABLE tenants ADD COLUMN demo INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE tenants DROP COLUMN demo;
