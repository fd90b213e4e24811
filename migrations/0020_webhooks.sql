-- Webhooks: a tenant's HTTPS endpoints and the outbox of their
-- deliveries. A delivery is written in the same transaction as the change
-- that caused it (a key created, an audit entry, a quota crossing), so an
-- event is never lost and never sent for a change that rolled back.
--
-- webhook_queues has one row per endpoint and ordering key with
-- deliveries pending, due at next_at: the delivery loop reads the due
-- queues instead of every pending delivery, so an endpoint that is down
-- with a long backlog costs one row per key, not one per delivery.

-- +goose Up
CREATE TABLE webhooks (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    url              TEXT NOT NULL,
    description      TEXT NOT NULL DEFAULT '',
    events           TEXT NOT NULL,        -- JSON list of event types
    thresholds       TEXT NOT NULL,        -- JSON list of percents
    secret           BLOB NOT NULL,        -- sealed (AES-GCM under the worker's webhook.key)
    secret_prefix    TEXT NOT NULL,
    old_secret       BLOB,                 -- the secret before the last rotation, sealed
    old_secret_until INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at);

CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY,
    msg_id          TEXT NOT NULL UNIQUE,  -- the webhook-id header
    webhook_id      TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    tenant_id       TEXT NOT NULL,
    event           TEXT NOT NULL,
    order_key       TEXT NOT NULL,
    dedupe          TEXT,                  -- unique per endpoint when set
    payload         BLOB NOT NULL,
    created_at      INTEGER NOT NULL,
    available_at    INTEGER NOT NULL,      -- not sent before (a quota reset: the period's end)
    next_at         INTEGER NOT NULL,      -- the next attempt
    status          TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    step            INTEGER NOT NULL DEFAULT 0, -- attempts in the current retry schedule
    last_attempt_at INTEGER NOT NULL DEFAULT 0,
    response_code   INTEGER NOT NULL DEFAULT 0,
    latency_ms      INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    done_at         INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX webhook_deliveries_dedupe ON webhook_deliveries (webhook_id, dedupe) WHERE dedupe IS NOT NULL;
CREATE INDEX webhook_deliveries_head ON webhook_deliveries (webhook_id, order_key, available_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_done ON webhook_deliveries (done_at) WHERE status <> 'pending';

CREATE TABLE webhook_queues (
    webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    order_key  TEXT NOT NULL,
    next_at    INTEGER NOT NULL,
    PRIMARY KEY (webhook_id, order_key)
);
CREATE INDEX webhook_queues_due ON webhook_queues (next_at, webhook_id, order_key);

-- When a caller was last announced as a top offender, so it is announced
-- at most once a day.
CREATE TABLE webhook_offenders (
    tenant_id   TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    identity    TEXT NOT NULL,
    notified_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, identity)
);

-- +goose Down
DROP TABLE webhook_offenders;
DROP TABLE webhook_queues;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
