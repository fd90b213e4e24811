-- Reservations: a check that reserved an estimate ("reserve": n) and is
-- settled later with the actual amount (POST /v1/settle). The estimate was
-- taken from the caller's buckets when the check was decided; a settle
-- gives back or charges the difference. A reservation not settled by
-- expires_at stands at its estimate. Settled and expired rows are kept a
-- while, so that a repeated settle answers as the first did, then pruned.

-- +goose Up
CREATE TABLE reservations (
    tenant_id     TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    id            TEXT NOT NULL,
    bucket_key    TEXT NOT NULL,
    policy_id     TEXT NOT NULL,
    policy        TEXT NOT NULL,
    tier          TEXT NOT NULL,
    key_id        TEXT NOT NULL,  -- the key whose own limits decided ('' for a tier's)
    identity_kind TEXT NOT NULL,
    identity_id   TEXT NOT NULL,
    reserved      INTEGER NOT NULL,
    cap           INTEGER NOT NULL,
    created_at    INTEGER NOT NULL, -- unix ms
    expires_at    INTEGER NOT NULL, -- unix ms
    state         TEXT NOT NULL DEFAULT 'open', -- open, settled, expired
    actual        INTEGER,
    settled_at    INTEGER,          -- unix ms, when settled or expired
    PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
CREATE INDEX reservations_open ON reservations(expires_at) WHERE state = 'open';
CREATE INDEX reservations_closed ON reservations(settled_at) WHERE state <> 'open';

-- Open reservations per tenant, kept in the writing transaction, so that
-- the cap on them is one row's read.
CREATE TABLE reservation_counts (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    open      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- +goose Down
DROP TABLE reservation_counts;
DROP TABLE reservations;
