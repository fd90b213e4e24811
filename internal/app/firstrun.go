package app

// What a server prints for the person who started it, once it can: the
// banner (where the API, the dashboard and the data are), the first-run
// setup link while no operator login exists, and with --demo the demo
// tenant's sign-in.
//
// The setup link carries a random token; only its hash goes to the worker
// (bus.OpSetupOffer), which keeps it while no operator login exists, the
// newest offer replacing older ones. An offer refused because an operator
// login exists tells this server the link is dead for good: its setup page
// then answers so without asking the worker. The token appears on this process's
// standard output only, never in its logs: the banner is the terminal of
// whoever started the server, and whoever reads it could sign in as the
// operator anyway (it shows where the data directory is).

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/demo"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/tenants"
)

// bannerWait is how long the banner waits for the worker to answer the
// setup offer before it is printed without the link (which follows once
// the worker answers).
const bannerWait = 5 * time.Second

// announce offers a setup link to the worker and prints the banner, with
// the link when the worker took the offer.
func (m *Main) announce(ctx context.Context, client *bus.Client, base string) {
	out := m.Out
	if out == nil {
		out = io.Discard
	}
	token := "st_" + rand.Text()
	offer := bus.SetupOffer{V: bus.WireVersion, TokenHash: tenants.HashToken(token)}
	deadline := time.Now().Add(bannerWait)
	printed := false
	for {
		res, err := bus.Call(ctx, client, bus.OpSetupOffer, offer)
		if err == nil {
			m.setupClosed.Store(!res.Open)
			link := ""
			if res.Open {
				link = base + "/ui/setup?token=" + token
				m.Log.Info("no operator login yet: the setup link is on the start-up banner (standard output)")
			}
			if printed {
				writeSetupLink(out, link)
			} else {
				writeBanner(out, m.Config, base)
				writeSetupLink(out, link)
			}
			return
		}
		if !printed && time.Now().After(deadline) {
			writeBanner(out, m.Config, base)
			printed = true
			m.Log.Warn("the worker does not answer yet; a setup link, if one is needed, is printed once it does", "err", err)
		}
		select {
		case <-ctx.Done():
			if !printed {
				writeBanner(out, m.Config, base)
			}
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// writeSetupLink prints the setup link under the banner ("" prints nothing).
func writeSetupLink(w io.Writer, link string) {
	if link == "" {
		return
	}
	fmt.Fprintf(w, "  No operator login yet. Choose one at this one-time link:\n  %s\n\n", link)
}

// seedDemo makes the demo tenant once the engine is ready and prints its
// sign-in. A failure is logged; the server keeps serving.
func (m *Main) seedDemo(ctx context.Context, client *bus.Client, eng *engine.Engine, base string) {
	for !eng.Healthy() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	res, err := demo.Seed(ctx, client, eng, time.Now())
	if err != nil {
		if ctx.Err() == nil {
			m.Log.Error("demo not made", "err", err)
		}
		return
	}
	m.Log.Info("demo tenant made", "tenant", res.TenantID, "policies", res.Policies, "keys", res.Keys, "checks", res.Checks, "denied", res.Denied, "replaced", res.Replaced)
	if m.Out != nil {
		fmt.Fprintf(m.Out, "  Demo       %s/ui/login as %s, password %s\n             (tenant %q: %d policies, %d keys, %d checks over the last %s; the operator's tenant page removes it)\n\n",
			base, res.Email, res.Password, demo.TenantName, res.Policies, res.Keys, res.Checks, res.Traffic)
	}
}
