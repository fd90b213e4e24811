package worker

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/internal/worker/configsvc"
)

// Operator is the operator's bootstrap: the worker applies it to its own
// store when it starts, so no NATS client can set the operator token or
// login (servers' NATS permissions deny those subjects).
type Operator struct {
	// Token is SLUICE_OPERATOR_TOKEN; empty means "generate one on a first
	// start and print it once to Out".
	Token string
	// Email and Password are SLUICE_OPERATOR_EMAIL and
	// SLUICE_OPERATOR_PASSWORD: the operator's dashboard login, both or neither.
	Email, Password string
	// Out receives the one-time announcement of a generated token.
	Out io.Writer
}

// ValidateOperatorToken checks SLUICE_OPERATOR_TOKEN as given (empty: one
// is generated), so that a process refuses to start with a token it would
// not apply instead of running with the operator API closed.
func ValidateOperatorToken(token string) error {
	if token == "" {
		return nil
	}
	if err := tenants.ValidateOperatorToken(token); err != nil {
		return fmt.Errorf("SLUICE_OPERATOR_TOKEN: %w (or leave it unset to have one generated)", err)
	}
	return nil
}

// bootstrapOperator makes sure an operator token exists: the configured
// one, or on a first start a generated one printed once (only its hash is
// stored). A rejected token is logged and leaves the operator API closed,
// as it was before; the worker keeps serving.
func (w *Worker) bootstrapOperator(ctx context.Context) {
	op := w.cfg.Operator
	token, generated := op.Token, false
	if token == "" {
		token, generated = "op_"+rand.Text(), true
	} else if err := tenants.ValidateOperatorToken(token); err != nil {
		w.log.Error("SLUICE_OPERATOR_TOKEN rejected; operator API disabled until it is fixed", "err", err)
		token = ""
	}
	if token != "" {
		res, err := configsvc.Write(w.config, func() (bool, []tenants.Change, error) {
			set, c, err := w.store.Operator().SetTokenHash(ctx, tenants.HashToken(token), generated, w.cfg.Now())
			if err != nil || !set {
				return set, nil, err
			}
			return true, []tenants.Change{c}, nil
		})
		switch {
		case err != nil:
			w.log.Error("operator bootstrap failed", "err", err)
		case generated && res.Result && op.Out != nil:
			fmt.Fprintf(op.Out, "\nSluice operator token (shown once, store it now): %s\n\n", token)
		}
	}
	if op.Email != "" {
		// Announced: a retired operator login or a new password ends the
		// sessions it had on every server. Operator().Ensure may hash while
		// the writer is held; this runs before any request is served, so
		// no config write waits on it.
		if _, err := configsvc.Write(w.config, func() (tenants.User, []tenants.Change, error) {
			return w.store.Operator().Ensure(ctx, op.Email, op.Password, w.cfg.Now())
		}); err != nil {
			w.log.Error("operator login bootstrap failed", "err", err)
		}
	}
}
