-- A policy can be a rule of Envoy's rate limit service: one node of a
-- descriptor tree of the reference server's configuration (docs/ENVOY.md),
-- held as JSON. Empty: an HTTP endpoint policy, matched by method and path.

-- +goose Up
ALTER TABLE policies ADD COLUMN descriptor TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE policies DROP COLUMN descriptor;
