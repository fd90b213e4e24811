-- JWT issuers: the identity providers whose tokens a tenant's checks may
-- carry instead of a consumer key. One "iss" per tenant at most; list
-- columns and the inline key set are JSON.

-- +goose Up
CREATE TABLE jwt_issuers (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    issuer     TEXT NOT NULL,
    audiences  TEXT NOT NULL,           -- JSON list
    jwks_url   TEXT NOT NULL DEFAULT '',
    jwks       TEXT NOT NULL DEFAULT '', -- an inline JSON Web Key Set, '' with jwks_url
    algorithms TEXT NOT NULL,           -- JSON list
    claims     TEXT NOT NULL,           -- JSON object
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (tenant_id, issuer)
);
CREATE INDEX jwt_issuers_tenant ON jwt_issuers (tenant_id, created_at);

-- +goose Down
DROP TABLE jwt_issuers;
