package ui

import (
	"testing"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// The identity analytics count unknown keys under reads as such in the
// offenders tables; a key of the tenant keeps its name.
func TestOffendersLabelUnknownKeys(t *testing.T) {
	rows := offenders([]service.TopEntry{
		{Identity: tenants.Identity{Kind: tenants.IdentityKey, ID: engine.InvalidKeyIdentity}, Denied: 9},
		{Identity: tenants.Identity{Kind: tenants.IdentityKey, ID: "key_1"}, Denied: 3},
		{Identity: tenants.Identity{Kind: tenants.IdentityIP, ID: engine.InvalidKeyIdentity}, Denied: 1},
	}, map[string]string{"key_1": "mobile app"}, true)
	if rows[0].Label != "unknown keys" || rows[0].ID != engine.InvalidKeyIdentity {
		t.Fatalf("invalid keys row: %+v", rows[0])
	}
	if rows[1].Label != "mobile app" || rows[2].Label != "" {
		t.Fatalf("other rows: %+v", rows[1:])
	}
}
