-- The dashboard lists a tenant's consumer keys a page at a time, sorted by
-- name (case-insensitively) unless asked otherwise, and the API lists them
-- oldest first. With these indexes the default page is read in order and
-- stops at its last row instead of sorting every key of the tenant.

-- +goose Up
CREATE INDEX consumer_keys_tenant_name ON consumer_keys(tenant_id, name COLLATE NOCASE, created_at, id);
CREATE INDEX consumer_keys_tenant_created ON consumer_keys(tenant_id, created_at, id);

-- +goose Down
DROP INDEX consumer_keys_tenant_created;
DROP INDEX consumer_keys_tenant_name;
