-- Customers: a tenant's own customers (organisations), each holding any
-- number of the tenant's consumer keys. external_id is the tenant's id for
-- the customer, unique within the tenant. A key belongs to at most one
-- customer (consumer_keys.customer_id); a customer with keys is not
-- deleted (the store refuses it), and ON DELETE SET NULL only matters when
-- the whole tenant goes. tenant_usage counts customers for their cap.

-- +goose Up
CREATE TABLE customers (
    id             TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    external_id    TEXT NOT NULL,
    name           TEXT NOT NULL DEFAULT '',
    tier           TEXT NOT NULL,
    billing_anchor INTEGER NOT NULL DEFAULT 0,
    overrides      TEXT NOT NULL DEFAULT '{}', -- JSON object, as consumer_keys.overrides
    metadata       TEXT NOT NULL DEFAULT '{}', -- JSON object of strings
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    UNIQUE (tenant_id, external_id)
);
CREATE INDEX customers_tenant_created ON customers(tenant_id, created_at, id);

ALTER TABLE consumer_keys ADD COLUMN customer_id TEXT REFERENCES customers(id) ON DELETE SET NULL;
CREATE INDEX consumer_keys_customer ON consumer_keys(customer_id) WHERE customer_id IS NOT NULL;

ALTER TABLE tenant_usage ADD COLUMN customers INTEGER NOT NULL DEFAULT 0;

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_customer_in AFTER INSERT ON customers BEGIN
    UPDATE tenant_usage SET customers = customers + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_customer_out AFTER DELETE ON customers BEGIN
    UPDATE tenant_usage SET customers = customers - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose Down
-- SQLite cannot drop a column that holds a foreign key: consumer_keys keeps
-- customer_id, emptied.
DROP TRIGGER tenant_usage_customer_out;
DROP TRIGGER tenant_usage_customer_in;
DROP INDEX consumer_keys_customer;
UPDATE consumer_keys SET customer_id = NULL WHERE customer_id IS NOT NULL;
ALTER TABLE tenant_usage DROP COLUMN customers;
DROP TABLE customers;
