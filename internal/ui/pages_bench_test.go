package ui_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/sqlitedb"
	"github.com/sluicehq/sluice/internal/tenants"
)

// Dashboard page timings for a large tenant: 10 000 consumer keys and
// 1 000 policies, seeded into SQLite before the server starts (as if they
// had been made over the API), then every page fetched over HTTP from the
// in-process server. ns/op is the server's time for the page plus a
// loopback round trip; allocs count the whole process, server included.
//
//	go test -run '^$' -bench BenchmarkDashboardPages -benchtime 20x ./internal/ui/

const (
	benchKeys     = 10_000
	benchPolicies = 1_000
	benchOwner    = "owner@large.test"
	benchPassword = "owner passphrase large"
)

var csrfInput = regexp.MustCompile(`name="_csrf" value="([^"]+)"`)

// seedLargeTenant writes the tenant, its policies and keys, and a day of
// analytics for some of its callers, into a new database in dir.
func seedLargeTenant(b *testing.B, dir string) (tenantID, policyID, keyID string) {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "sluice.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	st := tenants.NewStore(db)
	now := time.Now()
	tn, _, _, err := st.Tenants().Create(ctx, "large", benchOwner, benchPassword, now)
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchPolicies {
		p := tenants.Policy{
			Name: fmt.Sprintf("endpoint-%04d", i), Method: "GET", Path: fmt.Sprintf("/api/v1/resource-%04d/:id", i),
			Tiers: map[string]tenants.Limits{
				"anonymous": {{Algorithm: tenants.TokenBucket, Limit: 10, Period: "60s"}},
				"pro":       {{Algorithm: tenants.SlidingWindow, Limit: 1000, Period: "1m"}},
			},
		}
		created, _, err := st.Policies().Create(ctx, tn.ID, p, now)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			policyID = created.ID
		}
	}
	for i := range benchKeys {
		k, _, _, err := st.Keys().Create(ctx, tn.ID, fmt.Sprintf("customer %05d", i), []string{"pro", "free", "enterprise"}[i%3], nil, nil, now)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			keyID = k.ID
		}
	}
	// A day of per-minute counters: 200 callers, each counted once an hour.
	err = st.WriteTx(ctx, func(tx *sql.Tx) error {
		minute := now.Unix() / 60
		for h := range 24 {
			for c := range 200 {
				_, err := tx.ExecContext(ctx, `INSERT INTO counters (tenant_id, minute, policy, tier, identity_kind, identity_id, allowed, denied, rate_limited)
					VALUES (?, ?, 'endpoint-0000', 'anonymous', 'ip', ?, 50, ?, ?)`,
					tn.ID, minute-int64(h*60+c%60), fmt.Sprintf("198.51.%d.%d", c/250, c%250), c%7, c%7)
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tn.ID, policyID, keyID
}

// pageClient is a signed-in browser without the browser.
type pageClient struct {
	base string
	c    *http.Client
}

func (pc *pageClient) get(b *testing.B, path string) (int, string) {
	resp, err := pc.c.Get(pc.base + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func signedIn(b *testing.B, base, email, password string) *pageClient {
	jar, _ := cookiejar.New(nil)
	pc := &pageClient{base: base, c: &http.Client{Jar: jar, Timeout: 60 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	_, page := pc.get(b, "/ui/login")
	m := csrfInput.FindStringSubmatch(page)
	if m == nil {
		b.Fatal("no form token on the sign-in page")
	}
	resp, err := pc.c.PostForm(base+"/ui/login", url.Values{"email": {email}, "password": {password}, "_csrf": {m[1]}})
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		b.Fatalf("sign in as %s: %d", email, resp.StatusCode)
	}
	return pc
}

func BenchmarkDashboardPages(b *testing.B) {
	dir := b.TempDir()
	tenantID, policyID, keyID := seedLargeTenant(b, dir)
	cfg := app.DefaultConfig()
	cfg.Addr, cfg.Data, cfg.Node = "127.0.0.1:0", dir, "uibench"
	cfg.OperatorToken, cfg.OperatorEmail, cfg.OperatorPassword = opToken, opEmail, opPassword
	m := app.NewMain(cfg, slog.New(slog.DiscardHandler))
	m.Out = io.Discard
	if err := m.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	for deadline := time.Now().Add(60 * time.Second); !m.Engine().Ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("server not ready")
		}
	}
	base := "http://" + m.Addr()
	owner := signedIn(b, base, benchOwner, benchPassword)
	op := signedIn(b, base, opEmail, opPassword)
	pages := []struct {
		who  *pageClient
		path string
	}{
		{owner, "/ui/"},
		{owner, "/ui/policies"},
		{owner, "/ui/policies/new"},
		{owner, "/ui/policies/" + policyID},
		{owner, "/ui/keys"},
		{owner, "/ui/keys?revoked=1&q=customer+0"},
		{owner, "/ui/keys/" + keyID},
		{owner, "/ui/analytics?range=24h"},
		{owner, "/ui/callers?q=198.51.0.7"},
		{owner, "/ui/members"},
		{owner, "/ui/service-keys"},
		{owner, "/ui/account"},
		{op, "/ui/admin/tenants"},
		{op, "/ui/admin/tenants/" + tenantID},
		{op, "/ui/admin/abuse?range=24h"},
		{op, "/ui/admin/blocks"},
	}
	for _, p := range pages {
		name := strings.TrimPrefix(p.path, "/ui")
		if i := strings.IndexAny(name, "?"); i >= 0 {
			name = name[:i]
		}
		name = strings.NewReplacer(policyID, "{policy}", keyID, "{key}", tenantID, "{tenant}").Replace(name)
		b.Run(name, func(b *testing.B) {
			if st, body := p.who.get(b, p.path); st != http.StatusOK {
				b.Fatalf("GET %s: %d\n%.500s", p.path, st, body)
			}
			var bytes int
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, body := p.who.get(b, p.path)
				bytes = len(body)
			}
			b.ReportMetric(float64(bytes)/1024, "KiB/page")
		})
	}
}
