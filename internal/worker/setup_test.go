package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// The first-run setup link, through the worker's own request handlers: a
// token works once; a wrong, reused or replaced one does not; no link is
// offered, or works, once an operator login exists.
func TestSetupLink(t *testing.T) {
	ctx := context.Background()
	const email, password = "first@operator.test", "first operator passphrase"

	offer := func(t *testing.T, e *env, token string) bool {
		t.Helper()
		var res bus.SetupOffered
		if err := bus.Request(ctx, e.nc, bus.OpSetupOffer.Subject(), bus.SetupOffer{V: bus.WireVersion, TokenHash: tenants.HashToken(token)}, &res); err != nil {
			t.Fatal(err)
		}
		return res.Open
	}
	claim := func(e *env, r bus.SetupClaim) (service.Written[service.UserRecord], error) {
		r.V = bus.WireVersion
		var res service.Written[service.UserRecord]
		err := bus.Request(ctx, e.nc, bus.OpSetupClaim.Subject(), r, &res)
		return res, err
	}
	serving := func(t *testing.T, cfg Config) *env {
		t.Helper()
		e := newEnv(t, cfg)
		e.run(t)
		// The worker subscribes its operations one after another: wait for
		// the two this test asks, not only for the version.
		eventually(t, 10*time.Second, "the worker serves the setup link", func() bool {
			var res bus.SetupOffered
			if bus.Request(ctx, e.nc, bus.OpSetupOffer.Subject(), bus.SetupOffer{V: bus.WireVersion, TokenHash: tenants.HashToken("st_probe")}, &res) != nil {
				return false
			}
			_, err := claim(e, bus.SetupClaim{Token: "st_unknown", CheckOnly: true})
			return errs.Is(err, errs.Unauthenticated)
		})
		return e
	}
	dead := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errs.Is(err, errs.Unauthenticated) {
			t.Fatalf("%s: %v, want the dead link's Unauthenticated", what, err)
		}
	}

	t.Run("works once", func(t *testing.T) {
		e := serving(t, Config{})
		if !offer(t, e, "st_first") {
			t.Fatal("no operator login, yet the offer was refused")
		}
		_, err := claim(e, bus.SetupClaim{Token: "st_wrong", Email: email, Password: password})
		dead(t, "wrong token", err)
		_, err = claim(e, bus.SetupClaim{Token: "st_wrong", CheckOnly: true})
		dead(t, "wrong token, checked only", err)
		if _, err := claim(e, bus.SetupClaim{Token: "st_first", CheckOnly: true}); err != nil {
			t.Fatalf("live link, checked only: %v", err)
		}
		// A bad password is refused and leaves the link working.
		if _, err := claim(e, bus.SetupClaim{Token: "st_first", Email: email, Password: "short"}); !errs.Is(err, errs.Invalid) {
			t.Fatalf("short password: %v", err)
		}
		res, err := claim(e, bus.SetupClaim{Token: "st_first", Email: email, Password: password})
		if err != nil {
			t.Fatal(err)
		}
		if res.Result.User.Role != tenants.RoleOperator || res.Result.User.Email != email || res.Version == 0 {
			t.Fatalf("claim answered %+v", res)
		}
		// The login works; the password hash never left the worker.
		var rec service.UserRecord
		if err := bus.Request(ctx, e.nc, bus.OpUserSignIn.Subject(), bus.SignIn{Email: email, Password: password}, &rec); err != nil {
			t.Fatalf("sign in with the chosen login: %v", err)
		}
		if rec.User.PasswordHash != "" {
			t.Fatal("the worker answered a password hash")
		}
		_, err = claim(e, bus.SetupClaim{Token: "st_first", Email: "second@operator.test", Password: password})
		dead(t, "reused token", err)
		_, err = claim(e, bus.SetupClaim{Token: "st_first", CheckOnly: true})
		dead(t, "reused token, checked only", err)
		// With an operator login, a new start offers no link.
		if offer(t, e, "st_after") {
			t.Fatal("an offer was stored although an operator login exists")
		}
		_, err = claim(e, bus.SetupClaim{Token: "st_after", Email: "second@operator.test", Password: password})
		dead(t, "token offered after the operator exists", err)
	})

	t.Run("newer offer replaces older", func(t *testing.T) {
		e := serving(t, Config{})
		offer(t, e, "st_old")
		offer(t, e, "st_new")
		_, err := claim(e, bus.SetupClaim{Token: "st_old", Email: email, Password: password})
		dead(t, "replaced token", err)
		if _, err := claim(e, bus.SetupClaim{Token: "st_new", Email: email, Password: password}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("concurrent claims, one wins", func(t *testing.T) {
		e := serving(t, Config{})
		offer(t, e, "st_race")
		var wg sync.WaitGroup
		errc := make(chan error, 4)
		for i := range 4 {
			wg.Go(func() {
				_, err := claim(e, bus.SetupClaim{Token: "st_race", Email: string(rune('a'+i)) + "@operator.test", Password: password})
				errc <- err
			})
		}
		wg.Wait()
		close(errc)
		won := 0
		for err := range errc {
			if err == nil {
				won++
			} else {
				dead(t, "losing claim", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d claims won, want 1", won)
		}
	})

	t.Run("operator configured", func(t *testing.T) {
		e := serving(t, Config{Operator: Operator{Email: "env@operator.test", Password: password}})
		if offer(t, e, "st_env") {
			t.Fatal("SLUICE_OPERATOR_EMAIL is set, yet the offer was stored")
		}
		_, err := claim(e, bus.SetupClaim{Token: "st_env", Email: email, Password: password})
		dead(t, "token with a configured operator", err)
	})

	t.Run("malformed", func(t *testing.T) {
		e := serving(t, Config{})
		var res bus.SetupOffered
		err := bus.Request(ctx, e.nc, bus.OpSetupOffer.Subject(), bus.SetupOffer{V: bus.WireVersion, TokenHash: "short"}, &res)
		if !errs.Is(err, errs.Invalid) {
			t.Fatalf("offer of a non-hash: %v", err)
		}
		_, err = claim(e, bus.SetupClaim{Token: string(make([]byte, 10000)), Email: email, Password: password})
		dead(t, "oversized token", err)
	})
}
