-- The audit log: one row per config change (who, when, what changed),
-- written by the worker in the same transaction as the change itself, so a
-- change never commits without its entry nor an entry without its change
-- (internal/tenants/audit.go).
--
-- id is assigned by the worker (the previous largest plus one, inside the
-- write transaction), so it follows commit order and replays identically on
-- a standby; pages are read newest first by id (keyset pagination).
-- tenant_id is '' for platform entries (the operator's own login and token).
-- changes is a JSON array of {"field", "before", "after"}; it never holds
-- key material or password hashes.
-- Rows older than the worker's --audit-retention are deleted by its
-- maintenance pass, oldest first, through the at index.

-- +goose Up
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    at          INTEGER NOT NULL, -- unix milliseconds
    actor_kind  TEXT NOT NULL,    -- user, operator, service_key, system, unknown
    actor_id    TEXT NOT NULL,
    actor_label TEXT NOT NULL,    -- an email, "sk_AbC12…", "operator"
    action      TEXT NOT NULL,
    object_type TEXT NOT NULL,
    object_id   TEXT NOT NULL,
    object_name TEXT NOT NULL,
    changes     TEXT NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
CREATE INDEX audit_log_tenant_type ON audit_log (tenant_id, object_type, id);
CREATE INDEX audit_log_tenant_actor ON audit_log (tenant_id, actor_label, id);
CREATE INDEX audit_log_type ON audit_log (object_type, id);
CREATE INDEX audit_log_actor ON audit_log (actor_label, id);
CREATE INDEX audit_log_at ON audit_log (at);

-- +goose Down
DROP TABLE audit_log;
