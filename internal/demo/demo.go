// Package demo makes the tenant `cmd/server --demo` shows: an API shop
// with policies on four endpoints, consumer keys in four tiers, a blocked
// scraper, and fifteen minutes of generated traffic that includes a noisy
// abuser, so every chart, ranking and report of the dashboard has data.
//
// The traffic goes through the engine's own decision path (Engine.Check),
// so buckets, denials and analytics are what real checks would make. It is
// backdated: the checks are decided at instants spread over the fifteen
// minutes before now, in order, and the engine counts each in the minute
// of its instant (analytics are keyed by minute, see
// internal/engine/counters.go), so the charts show fifteen minutes of
// traffic the moment the counters are flushed, about a second later.
//
// A demo tenant is marked (tenants.Tenant.Demo). Seed deletes every
// earlier demo tenant before it makes a new one, so a second --demo
// neither duplicates nor fails, and prints a fresh password.
package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/service"
	"github.com/sluicehq/sluice/internal/tenants"
)

// The demo tenant's name and owner; the password is new at every Seed.
const (
	TenantName = "demo"
	OwnerEmail = "owner@demo.sluice.test"
)

// Callers whose traffic the demo shows: a noisy abuser hammering the
// sign-in endpoint, a second one scraping search, and a scraper blocked
// from the start.
const (
	AbuserIP   = "203.0.113.66"
	ScraperIP  = "203.0.113.90"
	BlockedIP  = "192.0.2.44"
	trafficLen = 15 * time.Minute
)

// Engine decides the generated checks.
type Engine interface {
	Check(ctx context.Context, tenantID string, req *engine.CheckRequest, now time.Time) (engine.Answer, error)
	WaitVersion(ctx context.Context, v int64)
}

// Result is what Seed made.
type Result struct {
	TenantID string
	Email    string
	Password string
	Policies int
	Keys     int
	Replaced int // earlier demo tenants deleted
	Checks   int
	Denied   int
	// Traffic is how far back the generated checks go.
	Traffic time.Duration
}

func limit(alg string, n int64, period string) tenants.Limits {
	return tenants.Limits{{Algorithm: alg, Limit: n, Period: period}}
}

// policies are the shop's endpoints and their tiers.
var policies = []tenants.Policy{
	{Name: "search", Method: "GET", Path: "/api/search", Tiers: map[string]tenants.Limits{
		"anonymous":  limit(tenants.TokenBucket, 30, "1m"),
		"free":       limit(tenants.TokenBucket, 60, "1m"),
		"pro":        limit(tenants.SlidingWindow, 600, "1m"),
		"enterprise": limit(tenants.SlidingWindow, 6000, "1m"),
	}},
	{Name: "sign-in", Method: "POST", Path: "/auth/login", Tiers: map[string]tenants.Limits{
		"anonymous": limit(tenants.FixedWindow, 5, "1m"),
	}},
	{Name: "uploads", Method: "POST", Path: "/api/uploads", Tiers: map[string]tenants.Limits{
		"free":       limit(tenants.FixedWindow, 10, "1h"),
		"pro":        limit(tenants.FixedWindow, 200, "1h"),
		"enterprise": limit(tenants.FixedWindow, 2000, "1h"),
	}, UnlistedTiers: tenants.UnlistedDeny},
	{Name: "reports", Method: "GET", Path: "/api/reports/*", Tiers: map[string]tenants.Limits{
		"pro":        limit(tenants.SlidingWindow, 120, "1m"),
		"enterprise": {{Algorithm: tenants.TokenBucket, Limit: 1200, Period: "1m", Burst: 200}},
	}, UnlistedTiers: tenants.UnlistedDeny},
}

// keys are the shop's customers, by name and tier.
var keys = []struct{ name, tier string }{
	{"mobile-app", "pro"},
	{"analytics-dashboard", "pro"},
	{"partner-etl", "enterprise"},
	{"free-trial-alice", "free"},
	{"free-trial-bob", "free"},
	{"free-trial-carol", "free"},
}

// Seed replaces any earlier demo tenant with a new one and its traffic,
// decided at instants before now. It waits until the engine has applied
// the demo's config before the first check.
func Seed(ctx context.Context, cfg *bus.Client, eng Engine, now time.Time) (Result, error) {
	var res Result
	var ts []tenants.TenantSummary
	if err := bus.CallInto(ctx, cfg, bus.OpTenantList, bus.None{}, &ts); err != nil {
		return res, fmt.Errorf("demo: list tenants: %w", err)
	}
	for _, t := range ts {
		switch {
		case t.Demo:
			var w service.Written[tenants.Tenant]
			if err := bus.CallInto(ctx, cfg, bus.OpTenantDelete, bus.TenantScoped{TenantID: t.ID}, &w); err != nil && !errs.Is(err, errs.NotFound) {
				return res, fmt.Errorf("demo: delete the earlier demo tenant: %w", err)
			}
			eng.WaitVersion(ctx, w.Version)
			res.Replaced++
		case t.Name == TenantName:
			return res, fmt.Errorf("demo: a tenant named %q exists and is no demo tenant; --demo leaves it alone", TenantName)
		}
	}

	res.Email, res.Password = OwnerEmail, "demo-"+rand.Text()[:16]
	var created service.Written[service.TenantCreated]
	if err := bus.CallInto(ctx, cfg, bus.OpTenantCreate, bus.TenantCreate{Name: TenantName, OwnerEmail: res.Email, OwnerPassword: res.Password, Demo: true}, &created); err != nil {
		return res, fmt.Errorf("demo: create the tenant: %w", err)
	}
	tid := created.Result.Tenant.ID
	res.TenantID = tid
	version := created.Version
	for _, p := range policies {
		var w service.Written[tenants.Policy]
		if err := bus.CallInto(ctx, cfg, bus.OpPolicyCreate, bus.PolicyWrite{TenantID: tid, Policy: p}, &w); err != nil {
			return res, fmt.Errorf("demo: policy %s: %w", p.Name, err)
		}
		version = max(version, w.Version)
		res.Policies++
	}
	secrets := map[string]string{}
	for _, k := range keys {
		var w service.Written[service.KeyCreated]
		if err := bus.CallInto(ctx, cfg, bus.OpKeyCreate, service.KeyCreate{TenantID: tid, Name: k.name, Tier: k.tier}, &w); err != nil {
			return res, fmt.Errorf("demo: key %s: %w", k.name, err)
		}
		version = max(version, w.Version)
		secrets[k.name] = w.Result.Secret
		res.Keys++
	}
	var block service.Written[tenants.Block]
	err := bus.CallInto(ctx, cfg, bus.OpBlockCreate, tenants.Block{TenantID: tid, Identity: tenants.Identity{Kind: tenants.IdentityIP, ID: BlockedIP}, Reason: "demo: a scraper blocked by hand"}, &block)
	if err != nil {
		return res, fmt.Errorf("demo: block: %w", err)
	}
	version = max(version, block.Version)
	eng.WaitVersion(ctx, version)

	unknownKey, _, _, err := tenants.GenerateKey(tenants.KindConsumerKey)
	if err != nil {
		return res, err
	}
	res.Checks, res.Denied, err = traffic(ctx, eng, tid, secrets, unknownKey, now)
	res.Traffic = trafficLen
	return res, err
}

// traffic decides the generated checks, second by second, over the
// trafficLen before now. It is the same traffic at every Seed.
func traffic(ctx context.Context, eng Engine, tid string, secrets map[string]string, unknownKey string, now time.Time) (checks, denied int, err error) {
	rng := mrand.New(mrand.NewPCG(26, 2026))
	start := now.Add(-trafficLen).Truncate(time.Second)
	seconds := int(trafficLen / time.Second)
	var visitors []string
	for i := range 40 {
		visitors = append(visitors, fmt.Sprintf("198.51.100.%d", 10+i))
	}
	type call struct {
		key, ip, method, path string
		every                 float64 // calls per second, on average
		from, to              int     // the seconds it calls in
	}
	calls := []call{
		{ip: "visitor", method: "GET", path: "/api/search?q=umbrella", every: 2, to: seconds},
		{ip: "visitor", method: "POST", path: "/auth/login", every: 0.2, to: seconds},
		{key: "mobile-app", method: "GET", path: "/api/search?q=rain", every: 3, to: seconds},
		{key: "mobile-app", method: "POST", path: "/api/uploads", every: 0.05, to: seconds},
		{key: "analytics-dashboard", method: "GET", path: "/api/reports/daily", every: 2.4, to: seconds},
		{key: "partner-etl", method: "GET", path: "/api/reports/export", every: 2, to: seconds},
		{key: "free-trial-alice", method: "POST", path: "/api/uploads", every: 0.2, to: seconds},
		{key: "free-trial-bob", method: "GET", path: "/api/search?q=sun", every: 0.5, to: seconds},
		{key: "free-trial-carol", method: "GET", path: "/api/reports/daily", every: 0.05, to: seconds},
		{key: "unknown", method: "GET", path: "/api/search?q=x", every: 0.2, to: seconds},
		// The noisy abuser guesses passwords for the last ten minutes; a
		// scraper floods search for five; the blocked one keeps trying.
		{ip: AbuserIP, method: "POST", path: "/auth/login", every: 5, from: seconds / 3, to: seconds},
		{ip: ScraperIP, method: "GET", path: "/api/search?q=everything", every: 3, from: seconds / 2, to: seconds * 5 / 6},
		{ip: BlockedIP, method: "GET", path: "/api/search?q=all", every: 1, to: seconds},
	}
	for s := range seconds {
		if err := ctx.Err(); err != nil {
			return checks, denied, err
		}
		for _, c := range calls {
			if s < c.from || s >= c.to {
				continue
			}
			// A whole number of calls this second, c.every on average.
			n := int(c.every)
			if rng.Float64() < c.every-float64(n) {
				n++
			}
			for i := range n {
				at := start.Add(time.Duration(s)*time.Second + time.Duration(i)*time.Second/time.Duration(n+1))
				req := engine.CheckRequest{Method: c.method, Path: c.path}
				switch {
				case c.key == "unknown":
					req.APIKey = unknownKey
				case c.key != "":
					req.APIKey = secrets[c.key]
				case c.ip == "visitor":
					req.IP = visitors[rng.IntN(len(visitors))]
				default:
					req.IP = c.ip
				}
				a, err := eng.Check(ctx, tid, &req, at)
				if err != nil {
					return checks, denied, fmt.Errorf("demo: check: %w", err)
				}
				checks++
				if !a.Allowed {
					denied++
				}
			}
		}
	}
	return checks, denied, nil
}
