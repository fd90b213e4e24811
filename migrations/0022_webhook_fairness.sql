-- Webhooks shared fairly between tenants (docs/GUARANTEES.md, "Webhooks").
--
-- webhooks.next_due is the earliest next_at of the endpoint's queues (NULL
-- with none), kept by triggers on webhook_queues: the delivery loop reads
-- the endpoints due, then a few queues of each by (webhook_id, next_at),
-- so a poll costs what it claims, not an endpoint's whole backlog.
--
-- webhooks.deleted_at marks an endpoint deleted: it is gone for the tenant
-- and the loop at once, and its deliveries are removed afterwards in
-- batches, each in its own transaction. created_by is the dashboard user
-- who added it (empty for a service key, the operator, or unknown);
-- paused says why its deliveries are held ('' when active).
--
-- webhook_outbox counts each tenant's deliveries kept, and those pending,
-- in rows and payload bytes, kept by triggers on webhook_deliveries, so
-- that the per-tenant bounds are checked at each enqueue by one lookup.
-- dropped counts pending deliveries dropped past the bound (a dropped
-- delivery is failed, with dropped = 1 and its payload cleared); the
-- max_* columns are the tenant's bounds, 0 for the defaults.

-- +goose Up
ALTER TABLE webhooks ADD COLUMN next_due INTEGER;
ALTER TABLE webhooks ADD COLUMN deleted_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhooks ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE webhooks ADD COLUMN paused TEXT NOT NULL DEFAULT '';
UPDATE webhooks SET next_due = (SELECT MIN(next_at) FROM webhook_queues q WHERE q.webhook_id = webhooks.id);
UPDATE webhooks SET created_by = COALESCE((
    SELECT a.actor_id FROM audit_log a
    WHERE a.tenant_id = webhooks.tenant_id AND a.object_type = 'webhook' AND a.object_id = webhooks.id
      AND a.action = 'created' AND a.actor_kind = 'user'
    ORDER BY a.id LIMIT 1), '');
CREATE INDEX webhooks_due ON webhooks (next_due) WHERE next_due IS NOT NULL AND deleted_at = 0 AND paused = '';
CREATE INDEX webhooks_deleted ON webhooks (deleted_at) WHERE deleted_at > 0;
CREATE INDEX webhooks_created_by ON webhooks (tenant_id, created_by);

DROP INDEX webhook_queues_due;
CREATE INDEX webhook_queues_endpoint ON webhook_queues (webhook_id, next_at, order_key);

-- +goose StatementBegin
CREATE TRIGGER webhook_queue_in AFTER INSERT ON webhook_queues BEGIN
    UPDATE webhooks SET next_due = (SELECT MIN(next_at) FROM webhook_queues WHERE webhook_id = NEW.webhook_id) WHERE id = NEW.webhook_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER webhook_queue_set AFTER UPDATE OF next_at ON webhook_queues BEGIN
    UPDATE webhooks SET next_due = (SELECT MIN(next_at) FROM webhook_queues WHERE webhook_id = NEW.webhook_id) WHERE id = NEW.webhook_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER webhook_queue_out AFTER DELETE ON webhook_queues BEGIN
    UPDATE webhooks SET next_due = (SELECT MIN(next_at) FROM webhook_queues WHERE webhook_id = OLD.webhook_id) WHERE id = OLD.webhook_id;
END;
-- +goose StatementEnd

ALTER TABLE webhook_deliveries ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;
CREATE INDEX webhook_deliveries_tenant_pending ON webhook_deliveries (tenant_id, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_tenant_done ON webhook_deliveries (tenant_id, id) WHERE status <> 'pending';

CREATE TABLE webhook_outbox (
    tenant_id     TEXT PRIMARY KEY,
    rows          INTEGER NOT NULL DEFAULT 0,
    bytes         INTEGER NOT NULL DEFAULT 0,
    pending_rows  INTEGER NOT NULL DEFAULT 0,
    pending_bytes INTEGER NOT NULL DEFAULT 0,
    dropped       INTEGER NOT NULL DEFAULT 0,
    -- the tenant's bounds; 0 takes the default (tenants.DefaultOutboxLimits)
    max_rows          INTEGER NOT NULL DEFAULT 0,
    max_bytes         INTEGER NOT NULL DEFAULT 0,
    max_pending_rows  INTEGER NOT NULL DEFAULT 0,
    max_pending_bytes INTEGER NOT NULL DEFAULT 0
);
INSERT INTO webhook_outbox (tenant_id, rows, bytes, pending_rows, pending_bytes)
SELECT tenant_id, COUNT(*), SUM(length(payload)), SUM(status = 'pending'), SUM(CASE WHEN status = 'pending' THEN length(payload) ELSE 0 END)
FROM webhook_deliveries GROUP BY tenant_id;

-- +goose StatementBegin
CREATE TRIGGER webhook_outbox_in AFTER INSERT ON webhook_deliveries BEGIN
    INSERT INTO webhook_outbox (tenant_id, rows, bytes, pending_rows, pending_bytes)
    VALUES (NEW.tenant_id, 1, length(NEW.payload), NEW.status = 'pending', CASE WHEN NEW.status = 'pending' THEN length(NEW.payload) ELSE 0 END)
    ON CONFLICT (tenant_id) DO UPDATE SET rows = rows + 1, bytes = bytes + excluded.bytes,
        pending_rows = pending_rows + excluded.pending_rows, pending_bytes = pending_bytes + excluded.pending_bytes;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER webhook_outbox_set AFTER UPDATE OF status, payload ON webhook_deliveries BEGIN
    UPDATE webhook_outbox SET bytes = bytes - length(OLD.payload) + length(NEW.payload),
        pending_rows = pending_rows - (OLD.status = 'pending') + (NEW.status = 'pending'),
        pending_bytes = pending_bytes - CASE WHEN OLD.status = 'pending' THEN length(OLD.payload) ELSE 0 END
                                      + CASE WHEN NEW.status = 'pending' THEN length(NEW.payload) ELSE 0 END
    WHERE tenant_id = NEW.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER webhook_outbox_out AFTER DELETE ON webhook_deliveries BEGIN
    UPDATE webhook_outbox SET rows = rows - 1, bytes = bytes - length(OLD.payload),
        pending_rows = pending_rows - (OLD.status = 'pending'),
        pending_bytes = pending_bytes - CASE WHEN OLD.status = 'pending' THEN length(OLD.payload) ELSE 0 END
    WHERE tenant_id = OLD.tenant_id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER webhook_outbox_tenant_out AFTER DELETE ON tenants BEGIN
    DELETE FROM webhook_outbox WHERE tenant_id = OLD.id;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER webhook_outbox_tenant_out;
DROP TRIGGER webhook_outbox_out;
DROP TRIGGER webhook_outbox_set;
DROP TRIGGER webhook_outbox_in;
DROP TABLE webhook_outbox;
DROP INDEX webhook_deliveries_tenant_done;
DROP INDEX webhook_deliveries_tenant_pending;
ALTER TABLE webhook_deliveries DROP COLUMN dropped;
DROP TRIGGER webhook_queue_out;
DROP TRIGGER webhook_queue_set;
DROP TRIGGER webhook_queue_in;
DROP INDEX webhook_queues_endpoint;
CREATE INDEX webhook_queues_due ON webhook_queues (next_at, webhook_id, order_key);
DROP INDEX webhooks_created_by;
DROP INDEX webhooks_deleted;
DROP INDEX webhooks_due;
ALTER TABLE webhooks DROP COLUMN paused;
ALTER TABLE webhooks DROP COLUMN created_by;
ALTER TABLE webhooks DROP COLUMN deleted_at;
ALTER TABLE webhooks DROP COLUMN next_due;
