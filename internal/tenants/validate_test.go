package tenants_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/tenants"
)

// wantInvalid checks that err is errs.Invalid with exactly message msg
// (or no error when msg is "").
func wantInvalid(t *testing.T, err error, msg string) {
	t.Helper()
	switch {
	case msg == "" && err != nil:
		t.Fatalf("unexpected error %v", err)
	case msg == "":
	case errs.Code(err) != errs.Invalid || errs.Message(err) != msg:
		t.Fatalf("err = %v\nwant invalid_request: %s", err, msg)
	}
}

func tb(limit int64, period string) tenants.LimitSpec {
	return tenants.LimitSpec{Algorithm: tenants.TokenBucket, Limit: limit, Period: period}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(p *tenants.Policy)
		msg    string
	}{
		{"valid", func(p *tenants.Policy) {}, ""},
		{"lower-case method", func(p *tenants.Policy) { p.Method = "get" }, ""},
		{"any method", func(p *tenants.Policy) { p.Method = "*" }, ""},
		{"local", func(p *tenants.Policy) { p.Consistency = "local" }, ""},
		{"no name", func(p *tenants.Policy) { p.Name = "" }, "name: required"},
		{"bad name", func(p *tenants.Policy) { p.Name = "heavy example" }, "name: must be 1 to 64 characters of A-Z, a-z, 0-9, ., _ and -"},
		{"long name", func(p *tenants.Policy) { p.Name = strings.Repeat("a", 65) }, "name: must be 1 to 64 characters of A-Z, a-z, 0-9, ., _ and -"},
		{"bad method", func(p *tenants.Policy) { p.Method = "FETCH" }, "method: must be * or one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"},
		{"no path", func(p *tenants.Policy) { p.Path = "" }, "path: required"},
		{"relative path", func(p *tenants.Policy) { p.Path = "api" }, `path: must start with "/"`},
		{"empty query key", func(p *tenants.Policy) { p.Query = map[string]string{"": "x"} }, "query: parameter names must not be empty"},
		{"empty query value", func(p *tenants.Policy) { p.Query = map[string]string{"mode": ""} }, "query.mode: must not be empty"},
		{"bad consistency", func(p *tenants.Policy) { p.Consistency = "eventual" }, "consistency: must be exact or local"},
		{"no tiers", func(p *tenants.Policy) { p.Tiers = nil }, "tiers: must hold at least one tier"},
		{"bad tier name", func(p *tenants.Policy) { p.Tiers["Pro"] = p.Tiers["pro"] }, `tiers: tier name "Pro" must be 1 to 32 characters of a-z, 0-9, _ and -`},
		{"empty tier", func(p *tenants.Policy) { p.Tiers["pro"] = tenants.Limits{} }, "tiers.pro: must hold at least one limit"},
		{"too many limits", func(p *tenants.Policy) {
			var ls tenants.Limits
			for i := range 11 {
				l := tb(1, "1s")
				l.Name = string(rune('a' + i))
				ls = append(ls, l)
			}
			p.Tiers["pro"] = ls
		}, "tiers.pro: must hold at most 10 limits"},
		{"unnamed among several", func(p *tenants.Policy) { p.Tiers["pro"][1].Name = "" }, "tiers.pro[1].name: required when a tier holds several limits"},
		{"duplicate limit name", func(p *tenants.Policy) { p.Tiers["pro"][1].Name = "burst" }, `tiers.pro[1].name: "burst" is used twice`},
		{"bad limit name", func(p *tenants.Policy) { p.Tiers["pro"][0].Name = "a.b" }, "tiers.pro[0].name: must be 1 to 32 characters of A-Z, a-z, 0-9, _ and -"},
		{"bad period", func(p *tenants.Policy) { p.Tiers["pro"][1].Period = "soon" }, `tiers.pro[1].period: must be a duration such as "60s" or "1m"`},
		{"no algorithm", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Algorithm = "" }, "tiers.anonymous.algorithm: required"},
		{"bad algorithm", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Algorithm = "leaky_bucket" },
			"tiers.anonymous.algorithm: must be one of token_bucket, sliding_window, sliding_log, fixed_window, concurrency"},
		{"zero limit", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Limit = 0 }, "tiers.anonymous.limit: must be at least 1"},
		{"huge limit", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Limit = 1 << 62 }, "tiers.anonymous.limit: must be at most 1000000000000"},
		{"sliding log over 1000", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.SlidingLog, Limit: 1001, Period: "1m"}}
		}, "tiers.anonymous.limit: must be at most 1000 for sliding_log"},
		{"sliding log at 1000", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.SlidingLog, Limit: 1000, Period: "1m"}}
		}, ""},
		{"concurrency", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10}}
		}, ""},
		{"concurrency beside a rate limit", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Name: "rate", Algorithm: tenants.TokenBucket, Limit: 10, Period: "1s"}, {Name: "slots", Algorithm: tenants.Concurrency, Limit: 1000}}
		}, ""},
		{"concurrency with a period", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10, Period: "1m"}}
		}, "tiers.anonymous.period: must be empty for algorithm concurrency: a slot is held until its lease is released or expires"},
		{"concurrency with a calendar", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10, Calendar: "day"}}
		}, "tiers.anonymous.calendar: must be empty for algorithm concurrency"},
		{"concurrency over 1000", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 1001}}
		}, "tiers.anonymous.limit: must be at most 1000 for concurrency"},
		{"concurrency in a local policy", func(p *tenants.Policy) {
			p.Consistency = tenants.ConsistencyLocal
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10}}
		}, "consistency: must be exact for a policy with a concurrency limit: one owner holds a bucket's slots"},
		{"no period", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Period = "" }, "tiers.anonymous.period: required (or calendar: day, week, month or year)"},
		{"calendar month", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.FixedWindow, Limit: 10000, Calendar: "month"}}
		}, ""},
		{"calendar and period", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.FixedWindow, Limit: 10000, Calendar: "week", Period: "7d"}}
		}, "tiers.anonymous.period: must be empty with calendar: the calendar says when the count resets"},
		{"calendar on a token bucket", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.TokenBucket, Limit: 10, Calendar: "day"}}
		}, "tiers.anonymous.algorithm: must be fixed_window for a calendar limit: a counter that resets at the start of each day"},
		{"unknown calendar", func(p *tenants.Policy) {
			p.Tiers["anonymous"] = tenants.Limits{{Algorithm: tenants.FixedWindow, Limit: 10, Calendar: "fortnight"}}
		}, "tiers.anonymous.calendar: must be one of day, week, month, year"},
		{"sub-ms period", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Period = "500us" }, "tiers.anonymous.period: must be at least 1ms"},
		{"zero period", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Period = "0s" }, "tiers.anonymous.period: must be at least 1ms"},
		{"period over a year", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Period = "367d" }, "tiers.anonymous.period: must be at most 366d"},
		{"period of 366d", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Period = "366d" }, ""},
		{"negative burst", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Burst = -1 }, "tiers.anonymous.burst: must not be negative"},
		{"burst on a window", func(p *tenants.Policy) { p.Tiers["pro"][0].Burst = 5 }, "tiers.pro[0].burst: only token_bucket takes a burst"},
		{"per key", func(p *tenants.Policy) { p.Tiers["pro"][0].Per = tenants.PerKey }, ""},
		{"per key and per customer", func(p *tenants.Policy) { p.Tiers["pro"][1].Per = tenants.PerCustomer }, ""},
		{"per customer alone", func(p *tenants.Policy) {
			p.Tiers["pro"] = tenants.Limits{{Algorithm: tenants.FixedWindow, Limit: 100000, Calendar: "month", Per: tenants.PerCustomer}}
		}, ""},
		{"per what", func(p *tenants.Policy) { p.Tiers["pro"][1].Per = "team" }, "tiers.pro[1].per: must be key or customer"},
		{"per customer in a local policy", func(p *tenants.Policy) {
			p.Consistency = tenants.ConsistencyLocal
			p.Tiers["pro"][1].Per = tenants.PerCustomer
		}, "tiers.pro[1].per: must be key for a local policy: a customer's limit is decided by one owner"},
		{"per customer for the anonymous", func(p *tenants.Policy) { p.Tiers["anonymous"][0].Per = tenants.PerCustomer },
			"tiers.anonymous.per: must be key for the anonymous tier: a caller known by its IP has no customer"},
		{"per customer concurrency", func(p *tenants.Policy) {
			p.Tiers["pro"] = tenants.Limits{{Algorithm: tenants.Concurrency, Limit: 10, Per: tenants.PerCustomer}}
		}, "tiers.pro.per: must be key for a concurrency limit: a slot is held per caller"},
		{"per customer beside concurrency", func(p *tenants.Policy) {
			p.Tiers["pro"] = tenants.Limits{{Name: "rate", Algorithm: tenants.TokenBucket, Limit: 10, Period: "1s", Per: tenants.PerCustomer}, {Name: "slots", Algorithm: tenants.Concurrency, Limit: 5}}
		}, "tiers.pro[0].per: must be key in a tier with a concurrency limit: its slots are held per caller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := samplePolicy("heavy")
			tt.modify(&p)
			wantInvalid(t, p.Validate(), tt.msg)
		})
	}
}

func TestPolicyNormalize(t *testing.T) {
	p := tenants.Policy{Method: "get", Query: map[string]string{}}
	p.Normalize()
	if p.Method != "GET" || p.Consistency != "exact" || p.Query != nil {
		t.Fatalf("normalized = %+v", p)
	}
	p = tenants.Policy{}
	p.Normalize()
	if p.Method != "*" {
		t.Fatalf("empty method normalized to %q", p.Method)
	}
}

func TestValidatePathPattern(t *testing.T) {
	tests := []struct {
		path string
		msg  string // after "path: "
	}{
		{"/", ""},
		{"/api/example", ""},
		{"/api/users/:id", ""},
		{"/api/:org/repos/:repo", ""},
		{"/api/*", ""},
		{"/*", ""},
		{"/v1/things:batchGet", ""},
		{"/files/report.pdf", ""},
		{"", "required"},
		{"api", `must start with "/"`},
		{"/api/", `must not hold empty segments or end with "/"`},
		{"/api//x", `must not hold empty segments or end with "/"`},
		{"/api/*/x", `"*" may only be the last segment`},
		{"/api/x*", `segment "x*" must not contain "*", "?", "#" or "%"`},
		{"/api?x=1", `segment "api?x=1" must not contain "*", "?", "#" or "%"`},
		{"/api/%2F", `segment "%2F" must not contain "*", "?", "#" or "%"`},
		{"/api/:", `parameter ":" must be : followed by a name of letters, digits and _`},
		{"/api/:1d", `parameter ":1d" must be : followed by a name of letters, digits and _`},
		{"/api/:id/x/:id", `parameter ":id" is used twice`},
		{"/api/../admin", "must not hold . or .. segments"},
		{"/api/./x", "must not hold . or .. segments"},
		{"/api/a b", `segment "a b" must not contain spaces or control characters`},
		{"/" + strings.Repeat("a", 1024), "must be at most 1024 bytes"},
	}
	for _, tt := range tests {
		msg := ""
		if tt.msg != "" {
			msg = "path: " + tt.msg
		}
		t.Run(tt.path, func(t *testing.T) { wantInvalid(t, tenants.ValidatePathPattern("path", tt.path), msg) })
	}
}

func TestConsumerKeyValidate(t *testing.T) {
	future, past := t0.Add(time.Hour), t0.Add(-time.Hour)
	tests := []struct {
		name string
		key  tenants.ConsumerKey
		msg  string
	}{
		{"valid", tenants.ConsumerKey{Name: "mobile app", Tier: "pro", ExpiresAt: &future}, ""},
		{"no name", tenants.ConsumerKey{Name: " ", Tier: "pro"}, "name: required"},
		{"long name", tenants.ConsumerKey{Name: strings.Repeat("é", 129), Tier: "pro"}, "name: must be at most 128 characters"},
		{"control in name", tenants.ConsumerKey{Name: "a\nb", Tier: "pro"}, "name: must not contain control characters"},
		{"no tier", tenants.ConsumerKey{Name: "k"}, "tier: required"},
		{"bad tier", tenants.ConsumerKey{Name: "k", Tier: "Pro"}, "tier: must be 1 to 32 characters of a-z, 0-9, _ and -"},
		{"expired", tenants.ConsumerKey{Name: "k", Tier: "pro", ExpiresAt: &past}, "expires_at: must be in the future"},
		{"expires now", tenants.ConsumerKey{Name: "k", Tier: "pro", ExpiresAt: &t0}, "expires_at: must be in the future"},
		{"override of a bad name", tenants.ConsumerKey{Name: "k", Tier: "pro",
			Overrides: map[string]tenants.Limits{"a b": {tb(1, "1s")}}}, `overrides: "a b" is not a policy name`},
		{"override with a bad limit", tenants.ConsumerKey{Name: "k", Tier: "pro",
			Overrides: map[string]tenants.Limits{"heavy": {tb(0, "1s")}}}, "overrides.heavy.limit: must be at least 1"},
		{"override list", tenants.ConsumerKey{Name: "k", Tier: "pro",
			Overrides: map[string]tenants.Limits{"heavy": {{Name: "a", Algorithm: "fixed_window", Limit: 1, Period: "1x"}, tb(1, "1s")}}},
			`overrides.heavy[0].period: must be a duration such as "60s" or "1m"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantInvalid(t, tt.key.Validate(t0), tt.msg) })
	}
}

func TestKeyPatchValidate(t *testing.T) {
	future, past := t0.Add(time.Hour), t0.Add(-time.Hour)
	empty, bad := "", "BAD"
	wantInvalid(t, tenants.KeyPatch{}.Validate(t0), "")
	wantInvalid(t, tenants.KeyPatch{ExpiresAt: &future}.Validate(t0), "")
	wantInvalid(t, tenants.KeyPatch{Name: &empty}.Validate(t0), "name: required")
	wantInvalid(t, tenants.KeyPatch{Tier: &bad}.Validate(t0), "tier: must be 1 to 32 characters of a-z, 0-9, _ and -")
	wantInvalid(t, tenants.KeyPatch{ExpiresAt: &past}.Validate(t0), "expires_at: must be in the future")
	wantInvalid(t, tenants.KeyPatch{ExpiresAt: &future, ClearExpiry: true}.Validate(t0), "expires_at: set a time or null, not both")
	ov := map[string]tenants.Limits{"heavy": {}}
	wantInvalid(t, tenants.KeyPatch{Overrides: &ov}.Validate(t0), "overrides.heavy: must hold at least one limit")
}

func TestBlockValidate(t *testing.T) {
	future, past := t0.Add(time.Hour), t0.Add(-time.Hour)
	ip := func(s string) tenants.Identity { return tenants.Identity{Kind: "ip", ID: s} }
	tests := []struct {
		name  string
		block tenants.Block
		msg   string
	}{
		{"ipv4", tenants.Block{TenantID: "ten_a", Identity: ip("203.0.113.7"), ExpiresAt: &future}, ""},
		{"ipv6", tenants.Block{TenantID: "ten_a", Identity: ip("2001:db8::1")}, ""},
		{"key", tenants.Block{TenantID: "ten_a", Identity: tenants.Identity{Kind: "key", ID: "ckey_x"}}, ""},
		{"no tenant", tenants.Block{Identity: ip("203.0.113.7")}, "tenant_id: required"},
		{"no kind", tenants.Block{TenantID: "ten_a", Identity: tenants.Identity{ID: "x"}}, "identity.kind: required"},
		{"bad kind", tenants.Block{TenantID: "ten_a", Identity: tenants.Identity{Kind: "user", ID: "x"}}, "identity.kind: must be ip, key or jwt"},
		{"no id", tenants.Block{TenantID: "ten_a", Identity: tenants.Identity{Kind: "key"}}, "identity.id: required"},
		{"bad ip", tenants.Block{TenantID: "ten_a", Identity: ip("203.0.113")}, "identity.id: must be an IPv4 or IPv6 address"},
		{"cidr", tenants.Block{TenantID: "ten_a", Identity: ip("203.0.113.0/24")}, "identity.id: must be an IPv4 or IPv6 address"},
		{"zone", tenants.Block{TenantID: "ten_a", Identity: ip("fe80::1%eth0")}, "identity.id: must be an IPv4 or IPv6 address"},
		{"long reason", tenants.Block{TenantID: "ten_a", Identity: ip("203.0.113.7"), Reason: strings.Repeat("x", 501)}, "reason: must be at most 500 characters"},
		{"expired", tenants.Block{TenantID: "ten_a", Identity: ip("203.0.113.7"), ExpiresAt: &past}, "expires_at: must be in the future"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantInvalid(t, tt.block.Validate(t0), tt.msg) })
	}
	for in, want := range map[string]string{"2001:DB8:0::1": "2001:db8::1", "::ffff:192.0.2.1": "192.0.2.1", "192.0.2.1": "192.0.2.1"} {
		if got := tenants.NormalizeIdentity(ip(in)).ID; got != want {
			t.Errorf("NormalizeIdentity(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestTenantFieldsValidate(t *testing.T) {
	tests := []struct {
		name, tenant, email, password, msg string
	}{
		{"valid", "acme corp.", "ada@example.com", "twelve chars", ""},
		{"snake", "acme_2-b", "ada@example.com", "twelve chars", ""},
		{"no name", "", "ada@example.com", "twelve chars", "name: required"},
		{"upper", "Acme", "ada@example.com", "twelve chars", "name: must be 1 to 64 characters of a-z, 0-9, -, _, . and space"},
		{"long", strings.Repeat("a", 65), "ada@example.com", "twelve chars", "name: must be 1 to 64 characters of a-z, 0-9, -, _, . and space"},
		{"space edge", " acme", "ada@example.com", "twelve chars", "name: must not start or end with a space"},
		{"no email", "acme", "", "twelve chars", "owner_email: required"},
		{"bad email", "acme", "ada", "twelve chars", "owner_email: must be an email address such as ada@example.com"},
		{"named email", "acme", "Ada <ada@example.com>", "twelve chars", "owner_email: must be an email address such as ada@example.com"},
		{"short password", "acme", "ada@example.com", "eleven char", "owner_password: must be at least 12 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantInvalid(t, tenants.ValidateNewTenant(tt.tenant, tt.email, tt.password), tt.msg)
		})
	}
	wantInvalid(t, tenants.ValidateEmail(" Ada@Example.COM "), "")
	wantInvalid(t, tenants.ValidatePassword("ünïcödé pässwörd"), "")
	wantInvalid(t, tenants.ValidatePassword("ünïcödé"), "password: must be at least 12 characters")
}

// Problems lists every invalid field at once, one problem a field, in the
// policy's order; Validate answers the first of them.
func TestPolicyProblemsListsEveryField(t *testing.T) {
	p := tenants.Policy{Name: "", Method: "FETCH", Path: "/ok", Tiers: map[string]tenants.Limits{
		"basic": {{Algorithm: "token_bucket", Limit: 0, Period: "forever"}},
		"pro": {
			{Name: "a", Algorithm: "fixed_window", Limit: 10, Period: "1m", Burst: 5},
			{Name: "a", Algorithm: "sliding_log", Limit: 5000, Period: "1s"},
		},
	}}
	var got []string
	for _, err := range p.Problems() {
		got = append(got, errs.Message(err))
	}
	want := []string{
		"name: required",
		"method: must be * or one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
		"tiers.basic.limit: must be at least 1",
		`tiers.basic.period: must be a duration such as "60s" or "1m"`,
		"tiers.pro[0].burst: only token_bucket takes a burst",
		`tiers.pro[1].name: "a" is used twice`,
		"tiers.pro[1].limit: must be at most 1000 for sliding_log",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := p.Validate(); errs.Message(err) != want[0] {
		t.Fatalf("Validate = %v, want the first problem", err)
	}
}

// A concurrency limit's field is named as validation names a limit's
// fields: tiers and overrides by name, an index when a tier holds several.
func TestConcurrencyField(t *testing.T) {
	slots := tenants.LimitSpec{Algorithm: tenants.Concurrency, Limit: 10}
	named := slots
	named.Name = "slots"
	rate := tb(10, "1s")
	rate.Name = "rate"
	for _, c := range []struct {
		name  string
		tiers map[string]tenants.Limits
		want  string
	}{
		{"none", map[string]tenants.Limits{"pro": {tb(10, "1s")}}, ""},
		{"alone", map[string]tenants.Limits{"pro": {slots}}, "tiers.pro.algorithm"},
		{"second of two", map[string]tenants.Limits{"pro": {rate, named}}, "tiers.pro[1].algorithm"},
		{"first tier by name", map[string]tenants.Limits{"zeta": {slots}, "beta": {rate, named}, "alpha": {tb(1, "1s")}}, "tiers.beta[1].algorithm"},
	} {
		if got := (tenants.Policy{Tiers: c.tiers}).ConcurrencyField(); got != c.want {
			t.Errorf("%s: policy field %q, want %q", c.name, got, c.want)
		}
		want := strings.Replace(c.want, "tiers.", "overrides.", 1)
		if got := tenants.OverridesConcurrencyField(c.tiers); got != want {
			t.Errorf("%s: overrides field %q, want %q", c.name, got, want)
		}
	}
}

// A descriptor policy and an override take no per-customer limit.
func TestPerCustomerRefused(t *testing.T) {
	p := descriptorPolicy(tenants.DescriptorEntry{Key: "k", Value: "v"})
	p.Tiers[tenants.TierDefault][0].Per = tenants.PerCustomer
	wantInvalid(t, p.Validate(), "tiers.default.per: must be key for a descriptor policy: a descriptor's caller has no customer")
	o := map[string]tenants.Limits{"heavy": {{Algorithm: tenants.TokenBucket, Limit: 5, Period: "1s", Per: tenants.PerCustomer}}}
	wantInvalid(t, tenants.ValidateOverrides(o), "overrides.heavy.per: must be key in an override: it replaces one caller's tier")
}
