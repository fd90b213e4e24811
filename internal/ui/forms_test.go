package ui

import (
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/errs"
	"github.com/sluicehq/sluice/internal/ui/views"
)

func TestPolicyFormRoundTrip(t *testing.T) {
	form := url.Values{
		"name": {" heavy "}, "method": {"get"}, "path": {"/api/x"}, "query": {"mode = heavy\n\n b=2 "},
		"consistency": {"local"}, "shadow": {"on"}, "tiers": {"4"},
		"tier.0.name": {"anonymous"}, "tier.0.limits": {"2"},
		"tier.0.limit.0.algorithm": {"token_bucket"}, "tier.0.limit.0.limit": {"10"}, "tier.0.limit.0.period": {"60s"}, "tier.0.limit.0.burst": {"20"},
		"tier.0.limit.1.algorithm": {"token_bucket"},                                                           // blank: dropped
		"tier.1.name":              {""}, "tier.1.limits": {"1"}, "tier.1.limit.0.algorithm": {"fixed_window"}, // blank tier: dropped
		"tier.2.name": {"pro"}, "tier.2.limits": {"2"},
		"tier.2.limit.0.name": {"burst"}, "tier.2.limit.0.algorithm": {"sliding_window"}, "tier.2.limit.0.limit": {"100"}, "tier.2.limit.0.period": {"1m"},
		"tier.2.limit.1.name": {"daily"}, "tier.2.limit.1.algorithm": {"evil"}, "tier.2.limit.1.limit": {"1_000"}, "tier.2.limit.1.period": {"1d"},
		"tier.3.name": {"free"}, "tier.3.limits": {"99"},
	}
	f := readPolicyForm(form)
	if len(f.Tiers) != 4 || len(f.Tiers[3].Limits) != 10 {
		t.Fatalf("counts are bounded: %d tiers, %d limits", len(f.Tiers), len(f.Tiers[3].Limits))
	}
	if f.Tiers[2].Limits[1].Algorithm != "token_bucket" {
		t.Errorf("an unknown algorithm is read as the default, got %q", f.Tiers[2].Limits[1].Algorithm)
	}
	f.Tiers = f.Tiers[:3]
	p, groups, fe := policyOfForm(f)
	if len(fe) > 0 {
		t.Fatalf("errors: %v", fe)
	}
	if p.Name != "heavy" || p.Method != "GET" || p.Query["mode"] != "heavy" || p.Query["b"] != "2" || !p.Shadow || p.Consistency != "local" {
		t.Errorf("policy %+v", p)
	}
	if len(p.Tiers) != 2 || len(p.Tiers["anonymous"]) != 1 || p.Tiers["anonymous"][0].Burst != 20 || len(p.Tiers["pro"]) != 2 || p.Tiers["pro"][1].Limit != 1000 {
		t.Errorf("tiers %+v", p.Tiers)
	}
	if g := groups["pro"]; g.key != "tier.2" || len(g.limits) != 2 || g.limits[1] != "tier.2.limit.1" {
		t.Errorf("groups %+v", groups)
	}
	back := formOfPolicy(p)
	if back.Tiers[0].Name != "anonymous" || back.Tiers[1].Name != "pro" || back.Query != "b=2\nmode=heavy" {
		t.Errorf("form of policy: %+v", back)
	}
}

// The period input takes a calendar word for a quota that resets on the
// calendar, and shows a stored calendar limit's unit there again.
func TestPolicyFormCalendar(t *testing.T) {
	f := views.PolicyForm{Name: "plans", Path: "/api/*", Tiers: []views.TierRow{
		{Name: "pro", Limits: []views.LimitRow{
			{Name: "burst", Algorithm: "token_bucket", Limit: "10", Period: "1s"},
			{Name: "monthly", Algorithm: "fixed_window", Limit: "10_000", Period: " Month "},
		}},
	}}
	p, _, fe := policyOfForm(f)
	if len(fe) > 0 {
		t.Fatalf("errors: %v", fe)
	}
	if m := p.Tiers["pro"][1]; m.Calendar != "month" || m.Period != "" || m.Limit != 10000 {
		t.Fatalf("calendar limit %+v", m)
	}
	if b := p.Tiers["pro"][0]; b.Calendar != "" || b.Period != "1s" {
		t.Fatalf("periodic limit %+v", b)
	}
	if len(p.Problems()) != 0 {
		t.Fatalf("problems: %v", p.Problems())
	}
	if back := formOfPolicy(p); back.Tiers[0].Limits[1].Period != "month" {
		t.Fatalf("form of policy: %+v", back.Tiers[0].Limits)
	}
	// A calendar on a token bucket is refused by the domain, on the input.
	f.Tiers[0].Limits[1].Algorithm = "token_bucket"
	p, groups, fe := policyOfForm(f)
	if policyProblems(p, groups, fe); fe["tier.0.limit.1.algorithm"] == "" {
		t.Fatalf("a calendar token bucket: %v", fe)
	}
}

func TestPolicyFormErrors(t *testing.T) {
	f := views.PolicyForm{Name: "x", Path: "/x", Query: "novalue\nk=v\nk=w", Tiers: []views.TierRow{
		{Name: "", Limits: []views.LimitRow{{Limit: "5", Period: "1s"}}},
		{Name: "pro", Limits: []views.LimitRow{{Limit: "ten", Period: "1s", Burst: "x"}}},
		{Name: "pro", Limits: []views.LimitRow{{Limit: "1", Period: "1s"}}},
		{Name: "free", Limits: []views.LimitRow{{Period: "1s"}}},
	}}
	_, _, fe := policyOfForm(f)
	want := map[string]string{
		"query":                "line 1: write name=value, such as mode=heavy",
		"tier.0.name":          "required: anonymous, default, or the tier your keys carry",
		"tier.1.limit.0.limit": "must be a whole number such as 100",
		"tier.1.limit.0.burst": "must be a whole number, or empty",
		"tier.2.name":          "is used by another tier above",
		"tier.3.limit.0.limit": "required",
	}
	for k, v := range want {
		if fe[k] != v {
			t.Errorf("%s: %q, want %q", k, fe[k], v)
		}
	}
	if len(fe) != len(want) {
		t.Errorf("errors %v", fe)
	}
}

func TestWorkerErrorsFindTheirInput(t *testing.T) {
	groups := map[string]limitGroup{
		"pro":  {key: "tier.3", limits: []string{"tier.3.limit.0", "tier.3.limit.2"}},
		"free": {key: "tier.1", limits: []string{"tier.1.limit.1"}},
	}
	for msg, want := range map[string]string{
		`tiers.pro[1].period: must be a duration such as "60s" or "1m"`: "tier.3.limit.2.period",
		`tiers.pro[0].name: "a" is used twice`:                          "tier.3.limit.0.name",
		`tiers.free.limit: must be at least 1`:                          "tier.1.limit.1.limit",
		`tiers.free: must hold at least one limit`:                      "tier.1",
		`tiers: tier name "Pro" must be 1 to 32 characters`:             "tiers",
		`path: must start with "/"`:                                     "path",
		`query.mode: must not be empty`:                                 "query",
		`tiers.pro[1].calendar: must be one of day, week, month, year`:  "tier.3.limit.2.period",
	} {
		fe, formErr := policyErrors(errs.Errorf(errs.Invalid, "%s", msg), groups)
		if _, ok := fe[want]; !ok || formErr != "" {
			t.Errorf("%s: errors %v, form error %q; want input %s", msg, fe, formErr, want)
		}
	}
	if fe, formErr := policyErrors(errs.Errorf(errs.Invalid, "something else entirely"), groups); len(fe) != 0 || formErr == "" {
		t.Errorf("unmapped message: %v %q", fe, formErr)
	}
	if fe, _ := policyErrors(errs.Errorf(errs.Conflict, "a policy named x exists"), groups); fe["name"] == "" {
		t.Errorf("conflict: %v", fe)
	}
	// A concurrency limit refused while a server cannot read it: by its
	// algorithm, not the name.
	const older = "tiers.pro[1].algorithm: concurrency limits need every server of the cluster upgraded"
	if fe, formErr := policyErrors(errs.Errorf(errs.Conflict, "%s", older), groups); fe["tier.3.limit.2.algorithm"] == "" || fe["name"] != "" || formErr != "" {
		t.Errorf("conflict naming a limit: %v %q", fe, formErr)
	}
	// Policy names may hold dots: the longest name that fits wins.
	og := map[string]limitGroup{"api": {key: "override.0.policy", limits: []string{"override.0"}}, "api.v1": {key: "override.1.policy", limits: []string{"override.1", "override.2"}}}
	if got, _ := mapGroupPath("api.v1[1].period", og); got != "override.2.period" {
		t.Errorf("dotted policy name: %q", got)
	}
	if got, _ := mapGroupPath("api.period", og); got != "override.0.period" {
		t.Errorf("short policy name: %q", got)
	}
}

func TestEditTiers(t *testing.T) {
	f := views.PolicyForm{Tiers: []views.TierRow{{Name: "a", Limits: []views.LimitRow{{Limit: "1"}}}}}
	editTiers(&f, "add-tier", nil)
	editTiers(&f, "add-limit", []int{0})
	editTiers(&f, "remove-limit", []int{0, 0})
	editTiers(&f, "remove-tier", []int{7}) // out of range: ignored
	if len(f.Tiers) != 2 || len(f.Tiers[0].Limits) != 1 || f.Tiers[0].Limits[0].Limit != "" || len(f.Tiers[1].Limits) != 1 {
		t.Fatalf("%+v", f.Tiers)
	}
	editTiers(&f, "remove-tier", []int{0})
	if len(f.Tiers) != 1 {
		t.Fatalf("%+v", f.Tiers)
	}
	if act, args := action(url.Values{"do": {"remove-limit:2:x"}}); act != "save" || args != nil {
		t.Errorf("malformed action read as %q %v", act, args)
	}
}

func TestWindowAndSteps(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 7, 30, 0, time.UTC)
	from, to := window(time.Hour, 15*time.Minute, now)
	if !to.Equal(time.Date(2026, 3, 1, 12, 15, 0, 0, time.UTC)) || to.Sub(from) != time.Hour {
		t.Errorf("window %s – %s", from, to)
	}
	if stepParam(24*time.Hour) != "1440m" {
		t.Errorf("step %q", stepParam(24*time.Hour))
	}
	if d, ok := pickStep("6h", time.Minute); !ok || d != 6*time.Hour {
		t.Errorf("6h: %s %v", d, ok)
	}
	if _, ok := pickStep("7m", time.Minute); ok {
		t.Error("an unlisted step was accepted")
	}
}

// The form takes a concurrency limit, with no period, beside a rate
// limit; a period on it is refused on its input.
func TestPolicyFormConcurrency(t *testing.T) {
	form := url.Values{
		"name": {"export"}, "path": {"/export"}, "tiers": {"1"},
		"tier.0.name": {"anonymous"}, "tier.0.limits": {"2"},
		"tier.0.limit.0.name": {"rate"}, "tier.0.limit.0.algorithm": {"token_bucket"}, "tier.0.limit.0.limit": {"10"}, "tier.0.limit.0.period": {"1s"},
		"tier.0.limit.1.name": {"slots"}, "tier.0.limit.1.algorithm": {"concurrency"}, "tier.0.limit.1.limit": {"3"},
	}
	f := readPolicyForm(form)
	if f.Tiers[0].Limits[1].Algorithm != "concurrency" {
		t.Fatalf("algorithm read as %q", f.Tiers[0].Limits[1].Algorithm)
	}
	p, groups, fe := policyOfForm(f)
	if policyProblems(p, groups, fe); len(fe) > 0 {
		t.Fatalf("errors: %v", fe)
	}
	if c := p.Tiers["anonymous"][1]; c.Algorithm != "concurrency" || c.Limit != 3 || c.Period != "" {
		t.Fatalf("concurrency limit %+v", c)
	}
	if got := describeLimits(p.Tiers["anonymous"]); got != "rate: 10 per 1s; slots: 3 at once, concurrency" {
		t.Fatalf("described as %q", got)
	}
	f.Tiers[0].Limits[1].Period = "1m"
	p, groups, fe = policyOfForm(f)
	if policyProblems(p, groups, fe); fe["tier.0.limit.1.period"] == "" {
		t.Fatalf("a concurrency limit with a period: %v", fe)
	}
}

// A limit's per travels through the form both ways: "key" (the select's
// default) is stored as none, "customer" as itself, and a per-customer
// limit refused by the domain finds its select.
func TestPolicyFormPer(t *testing.T) {
	f := views.PolicyForm{Name: "plans", Path: "/api/*", Tiers: []views.TierRow{
		{Name: "pro", Limits: []views.LimitRow{
			{Name: "rate", Algorithm: "token_bucket", Limit: "20", Period: "1s", Per: "key"},
			{Name: "month", Algorithm: "fixed_window", Limit: "100000", Period: "month", Per: "customer"},
		}},
	}}
	p, _, fe := policyOfForm(f)
	if len(fe) > 0 || len(p.Problems()) != 0 {
		t.Fatalf("errors: %v %v", fe, p.Problems())
	}
	if ls := p.Tiers["pro"]; ls[0].Per != "" || ls[1].Per != "customer" {
		t.Fatalf("limits %+v", ls)
	}
	if back := formOfPolicy(p); back.Tiers[0].Limits[1].Per != "customer" || back.Tiers[0].Limits[0].Per != "" {
		t.Fatalf("form of policy: %+v", back.Tiers[0].Limits)
	}
	f.Tiers[0].Name = "anonymous"
	p, groups, fe := policyOfForm(f)
	if policyProblems(p, groups, fe); fe["tier.0.limit.1.per"] == "" {
		t.Fatalf("a per-customer limit for the anonymous: %v", fe)
	}
}
