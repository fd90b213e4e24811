package worker

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/tenants"
)

var printedToken = regexp.MustCompile(`shown once, store it now\): (op_\S+)`)

// The worker applies the operator bootstrap to its own store: a generated
// token is printed once and kept on later starts; a configured token
// replaces it; the first snapshot a server loads already has it.
func TestOperatorBootstrap(t *testing.T) {
	var out bytes.Buffer
	e := newEnv(t, Config{Operator: Operator{Out: &out}})
	ctx := context.Background()
	hash := func() string {
		h, err := e.w.store.Operator().TokenHash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	e.w.bootstrapOperator(ctx)
	m := printedToken.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no generated token printed: %q", out.String())
	}
	if hash() != tenants.HashToken(m[1]) {
		t.Fatal("the stored hash is not the printed token's")
	}
	out.Reset()
	e.w.bootstrapOperator(ctx) // a second start
	if out.Len() != 0 || hash() != tenants.HashToken(m[1]) {
		t.Fatalf("a second start changed or printed the token: %q", out.String())
	}

	const configured = "op_configured_operator_token_0123456789"
	e.w.cfg.Operator.Token = configured
	e.run(t) // Run bootstraps before it serves
	var snap tenants.Snapshot
	eventually(t, 10*time.Second, "the worker serves", func() bool {
		return bus.Request(ctx, e.nc, bus.OpSnapshot.Subject(), nil, &snap) == nil
	})
	if snap.OperatorTokenHash != tenants.HashToken(configured) {
		t.Fatal("the first snapshot does not carry the configured token")
	}
	if out.Len() != 0 {
		t.Fatalf("a configured token was printed: %q", out.String())
	}
}
