-- How much of what its caps bound (tenants.Caps) each tenant holds. The
-- worker checks a cap in the transaction that would exceed it; these
-- counts, kept by triggers in that same transaction, let it read one row
-- instead of counting up to a million keys. service_keys counts active
-- keys only; consumer_keys counts revoked ones too (servers keep them).

-- +goose Up
CREATE TABLE tenant_usage (
    tenant_id     TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    policies      INTEGER NOT NULL DEFAULT 0,
    consumer_keys INTEGER NOT NULL DEFAULT 0,
    service_keys  INTEGER NOT NULL DEFAULT 0,
    blocks        INTEGER NOT NULL DEFAULT 0,
    users         INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

INSERT INTO tenant_usage (tenant_id, policies, consumer_keys, service_keys, blocks, users)
SELECT t.id,
    (SELECT COUNT(*) FROM policies x WHERE x.tenant_id = t.id),
    (SELECT COUNT(*) FROM consumer_keys x WHERE x.tenant_id = t.id),
    (SELECT COUNT(*) FROM service_keys x WHERE x.tenant_id = t.id AND x.revoked_at IS NULL),
    (SELECT COUNT(*) FROM blocks x WHERE x.tenant_id = t.id),
    (SELECT COUNT(*) FROM users x WHERE x.tenant_id = t.id)
FROM tenants t;

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_tenant AFTER INSERT ON tenants BEGIN
    INSERT INTO tenant_usage (tenant_id) VALUES (NEW.id);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_policy_in AFTER INSERT ON policies BEGIN
    UPDATE tenant_usage SET policies = policies + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_policy_out AFTER DELETE ON policies BEGIN
    UPDATE tenant_usage SET policies = policies - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_consumer_key_in AFTER INSERT ON consumer_keys BEGIN
    UPDATE tenant_usage SET consumer_keys = consumer_keys + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_consumer_key_out AFTER DELETE ON consumer_keys BEGIN
    UPDATE tenant_usage SET consumer_keys = consumer_keys - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_service_key_in AFTER INSERT ON service_keys WHEN NEW.revoked_at IS NULL BEGIN
    UPDATE tenant_usage SET service_keys = service_keys + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_service_key_revoked AFTER UPDATE OF revoked_at ON service_keys
WHEN (OLD.revoked_at IS NULL) <> (NEW.revoked_at IS NULL) BEGIN
    UPDATE tenant_usage SET service_keys = service_keys + (CASE WHEN NEW.revoked_at IS NULL THEN 1 ELSE -1 END)
    WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_service_key_out AFTER DELETE ON service_keys WHEN OLD.revoked_at IS NULL BEGIN
    UPDATE tenant_usage SET service_keys = service_keys - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

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

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_user_in AFTER INSERT ON users WHEN NEW.tenant_id IS NOT NULL BEGIN
    UPDATE tenant_usage SET users = users + 1 WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER tenant_usage_user_out AFTER DELETE ON users WHEN OLD.tenant_id IS NOT NULL BEGIN
    UPDATE tenant_usage SET users = users - 1 WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER tenant_usage_user_out;
DROP TRIGGER tenant_usage_user_in;
DROP TRIGGER tenant_usage_block_out;
DROP TRIGGER tenant_usage_block_in;
DROP TRIGGER tenant_usage_service_key_out;
DROP TRIGGER tenant_usage_service_key_revoked;
DROP TRIGGER tenant_usage_service_key_in;
DROP TRIGGER tenant_usage_consumer_key_out;
DROP TRIGGER tenant_usage_consumer_key_in;
DROP TRIGGER tenant_usage_policy_out;
DROP TRIGGER tenant_usage_policy_in;
DROP TRIGGER tenant_usage_tenant;
DROP TABLE tenant_usage;
