-- Blocks may name a JWT caller (identity_kind 'jwt', the token's subject).
-- SQLite cannot change a CHECK constraint in place, so the table is made
-- again with its index and the triggers that count it in tenant_usage.
-- DROP TABLE fires no trigger, so the counts stay as they are.

-- +goose Up
CREATE TABLE blocks_v2 (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    identity_kind TEXT NOT NULL CHECK (identity_kind IN ('ip', 'key', 'jwt')),
    identity_id   TEXT NOT NULL,
    reason        TEXT NOT NULL,
    expires_at    INTEGER,
    created_at    INTEGER NOT NULL
);
INSERT INTO blocks_v2 (id, tenant_id, identity_kind, identity_id, reason, expires_at, created_at)
    SELECT id, tenant_id, identity_kind, identity_id, reason, expires_at, created_at FROM blocks;
DROP TABLE blocks;
ALTER TABLE blocks_v2 RENAME TO blocks;
CREATE INDEX blocks_tenant ON blocks(tenant_id);

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_block_in AFTER INSERT ON blocks BEGIN
    UPDATE tenant_usage SET blocks = blocks + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_block_out AFTER DELETE ON blocks BEGIN
    UPDATE tenant_usage SET blocks = blocks - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose Down
DELETE FROM blocks WHERE identity_kind = 'jwt';
