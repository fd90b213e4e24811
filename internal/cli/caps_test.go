package cli

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/tenants"
)

// sluice apply past a tenant cap stops at the refused change and says
// which cap refused it and its value.
func TestApplyStopsAtATenantCap(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", t.TempDir(), "clicaps", opToken
	cfg.Caps = tenants.Caps{Policies: 1}
	m := app.NewMain(cfg, slog.New(slog.DiscardHandler))
	m.Out = io.Discard
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	for deadline := time.Now().Add(30 * time.Second); !m.Engine().Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("server not ready")
		}
	}
	base := "http://" + m.Addr()
	r := sluice(t, map[string]string{"SLUICE_URL": base, "SLUICE_OPERATOR_TOKEN": opToken, "SLUICE_OWNER_PASSWORD": "a long passphrase"}, "",
		"tenants", "create", "--name", "capped", "--owner-email", "owner@capped.test")
	if r.code != 0 {
		t.Fatalf("tenants create: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	env := map[string]string{"SLUICE_URL": base, "SLUICE_SERVICE_KEY": strings.TrimSpace(r.stdout)}
	r = sluice(t, env, "", "apply", "-f", write(t, "limits.yaml", limitsYAML))
	if r.code != ExitError || !has(r.stdout, "Stopped after 1 of 2 changes.") ||
		!has(r.stderr, `409 conflict: tenant cap "policies" reached: a tenant may hold at most 1 policies.`) {
		t.Fatalf("apply past the cap: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
