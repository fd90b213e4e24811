package rlsconf

import (
	"reflect"
	"strings"
	"testing"
)

func compileText(t testing.TB, texts ...string) *Config {
	t.Helper()
	files := make([]*File, len(texts))
	for i, text := range texts {
		files[i] = mustParse(t, text)
	}
	c, err := Compile(files...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// req makes a request descriptor of key, value pairs.
func req(kv ...string) RequestDescriptor {
	var d RequestDescriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, Entry{kv[i], kv[i+1]})
	}
	return d
}

// match is what a lookup should find; a zero match means none.
type match struct {
	rpu   uint32
	unit  Unit
	stats string
	// counter is the CounterKey, checked when not empty.
	counter   string
	name      string
	unlimited bool
	shadow    bool
	quota     bool
}

type lookupCase struct {
	name   string
	domain string
	d      RequestDescriptor
	want   match
}

func runLookups(t *testing.T, c *Config, cases []lookupCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			domain := tc.domain
			if domain == "" {
				domain = "shop"
			}
			l := c.Lookup(domain, tc.d)
			if tc.want == (match{}) {
				if l != nil {
					t.Fatalf("found %+v, want none", *l)
				}
				return
			}
			if l == nil {
				t.Fatal("found none")
			}
			got := match{rpu: l.RequestsPerUnit, unit: l.Unit, stats: l.StatsKey, name: l.Name,
				unlimited: l.Unlimited, shadow: l.ShadowMode, quota: l.QuotaMode}
			if tc.want.counter != "" {
				got.counter = l.CounterKey(tc.d.Entries)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The reference's basic_config and TestBasicConfig: the most specific
// node wins, a limit applies only at the request's depth, and a node with
// no limit exempts what it matches.
const basicConfig = `domain: shop
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: second, requests_per_unit: 4}
      - key: route
        value: checkout
        rate_limit: {unit: second, requests_per_unit: 9}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: client
    value: partner
    rate_limit: {unit: minute, requests_per_unit: 31}
  - key: client
    value: internal
  - key: region
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: plan
    rate_limit: {name: plan_daily, unit: day, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: day, requests_per_unit: 16}
    descriptors:
      - key: action
        value: export
        rate_limit: {unit: day, requests_per_unit: 26}
  - key: health
    rate_limit: {unlimited: true}
  - key: sku
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 71}
`

func TestLookupBasic(t *testing.T) {
	c := compileText(t, basicConfig)
	runLookups(t, c, []lookupCase{
		{"unknown domain", "elsewhere", req(), match{}},
		{"no entries", "", req(), match{}},
		{"no node for the value and no default", "", req("tenant", "other"), match{}},
		{"node without a limit", "", req("tenant", "acme"), match{}},
		{"deeper than the tree", "", req("client", "partner", "route", "x"), match{}},
		{"no match below a node with children", "", req("user", "vip", "action", "import"), match{}},
		{"default at the second level", "", req("tenant", "acme", "route", "search"),
			match{rpu: 4, unit: Second, stats: "shop.tenant_acme.route", counter: "shop_tenant_acme_route_search_"}},
		{"value at the second level", "", req("tenant", "acme", "route", "checkout"),
			match{rpu: 9, unit: Second, stats: "shop.tenant_acme.route_checkout"}},
		{"default at the top", "", req("client", "someone"), match{rpu: 21, unit: Minute, stats: "shop.client"}},
		{"value at the top wins", "", req("client", "partner"), match{rpu: 31, unit: Minute, stats: "shop.client_partner"}},
		{"value without a limit exempts", "", req("client", "internal"), match{}},
		{"hour", "", req("region", "eu"), match{rpu: 2, unit: Hour, stats: "shop.region"}},
		{"named", "", req("plan", "free"), match{rpu: 3, unit: Day, stats: "shop.plan", name: "plan_daily"}},
		{"parent of a deeper rule", "", req("user", "vip"), match{rpu: 16, unit: Day, stats: "shop.user_vip"}},
		{"deeper rule", "", req("user", "vip", "action", "export"), match{rpu: 26, unit: Day, stats: "shop.user_vip.action_export"}},
		{"unlimited", "", req("health", "probe"), match{stats: "shop.health", unlimited: true}},
		{"detailed_metric names the value", "", req("sku", "a-1"), match{rpu: 71, unit: Minute, stats: "shop.sku_a-1"}},
		{"detailed_metric, another value", "", req("sku", "b-2"), match{rpu: 71, unit: Minute, stats: "shop.sku_b-2"}},
	})
}

// The reference's TestConfigLimitOverride: an override wins, keeps the
// request's own key, and never is in shadow mode.
func TestLookupOverride(t *testing.T) {
	c := compileText(t, basicConfig, `domain: shadowed
descriptors:
  - {key: route, shadow_mode: true, quota_mode: true, rate_limit: {unit: second, requests_per_unit: 1}}
`)
	with := func(d RequestDescriptor, rpu uint32, u Unit) RequestDescriptor {
		d.Limit = &Override{RequestsPerUnit: rpu, Unit: u}
		return d
	}
	runLookups(t, c, []lookupCase{
		{"unknown domain", "elsewhere", with(req("tenant", "acme"), 10, Day), match{}},
		{"override", "", with(req("tenant", "acme", "route", "search"), 10, Day),
			match{rpu: 10, unit: Day, stats: "shop.tenant_acme.route_search", counter: "shop_tenant_acme_route_search_"}},
		{"another override, the same key", "", with(req("tenant", "acme", "route", "search"), 42, Hour),
			match{rpu: 42, unit: Hour, stats: "shop.tenant_acme.route_search"}},
		{"another value, another key", "", with(req("tenant", "acme", "route", "search_else"), 42, Hour),
			match{rpu: 42, unit: Hour, stats: "shop.tenant_acme.route_search_else"}},
		{"where no rule matches", "", with(req("nothing", ""), 5, Second), match{rpu: 5, unit: Second, stats: "shop.nothing"}},
		{"no entries", "", with(req(), 5, Second), match{rpu: 5, unit: Second, stats: "shop."}},
		{"never shadow or quota", "shadowed", with(req("route", "x"), 7, Minute), match{rpu: 7, unit: Minute, stats: "shadowed.route_x"}},
		{"the rule is", "shadowed", req("route", "x"), match{rpu: 1, unit: Second, stats: "shadowed.route", shadow: true, quota: true}},
	})
	if l := c.Lookup("shop", with(req("a", "b"), 1, Day)); l.Rule != nil || len(l.Specs()) != 1 {
		t.Errorf("override rule %v specs %v", l.Rule, l.Specs())
	}
}

// The reference's shadowmode_config and TestShadowModeConfig.
func TestLookupShadowMode(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - {key: route, rate_limit: {unit: second, requests_per_unit: 4}}
      - {key: route, value: checkout, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 9}}
  - {key: client, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 21}}
  - {key: client, value: partner, rate_limit: {unit: minute, requests_per_unit: 31}}
`)
	runLookups(t, c, []lookupCase{
		{"default not in shadow", "", req("tenant", "acme", "route", "x"), match{rpu: 4, unit: Second, stats: "shop.tenant_acme.route"}},
		{"value in shadow", "", req("tenant", "acme", "route", "checkout"), match{rpu: 9, unit: Second, stats: "shop.tenant_acme.route_checkout", shadow: true}},
		{"default in shadow", "", req("client", "x"), match{rpu: 21, unit: Minute, stats: "shop.client", shadow: true}},
		{"value not in shadow", "", req("client", "partner"), match{rpu: 31, unit: Minute, stats: "shop.client_partner"}},
	})
}

// The reference's wildcard.yaml and TestWildcardConfig.
func TestLookupWildcards(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - {key: path, value: img*, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: exact, value: img, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: any, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: mid, value: v*z, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: multi, value: a*b*c, rate_limit: {unit: minute, requests_per_unit: 10}}
  - key: host
    value: api
    descriptors:
      - {key: path, value: doc*, rate_limit: {unit: minute, requests_per_unit: 20}}
`)
	runLookups(t, c, []lookupCase{
		{"no value: one key for all", "", req("any", "1"), match{rpu: 20, unit: Minute, stats: "shop.any"}},
		{"trailing", "", req("path", "img1"), match{rpu: 20, unit: Minute, stats: "shop.path_img*", counter: "shop_path_img1_"}},
		{"trailing, another value, another counter", "", req("path", "img2"), match{rpu: 20, unit: Minute, stats: "shop.path_img*", counter: "shop_path_img2_"}},
		{"trailing matches the prefix alone", "", req("path", "img"), match{rpu: 20, unit: Minute, stats: "shop.path_img*"}},
		{"nested", "", req("host", "api", "path", "docs"), match{rpu: 20, unit: Minute, stats: "shop.host_api.path_doc*"}},
		{"no match", "", req("path", "css"), match{}},
		{"no wildcard, no prefix match", "", req("exact", "img1"), match{}},
		{"middle", "", req("mid", "vaz"), match{rpu: 20, unit: Minute, stats: "shop.mid_v*z"}},
		{"middle, longer", "", req("mid", "v123z"), match{rpu: 20, unit: Minute, stats: "shop.mid_v*z"}},
		{"middle, empty", "", req("mid", "vz"), match{rpu: 20, unit: Minute, stats: "shop.mid_v*z"}},
		{"middle, no suffix", "", req("mid", "va"), match{}},
		{"middle, no prefix", "", req("mid", "xvz"), match{}},
		{"prefix and suffix do not overlap", "", req("mid", "v"), match{}},
		{"multiple", "", req("multi", "a1b2c"), match{rpu: 10, unit: Minute, stats: "shop.multi_a*b*c"}},
		{"multiple, empty", "", req("multi", "abc"), match{rpu: 10, unit: Minute, stats: "shop.multi_a*b*c"}},
		{"multiple, a part missing", "", req("multi", "a1c"), match{}},
		{"multiple, out of order", "", req("multi", "acb"), match{}},
		{"multiple, no prefix", "", req("multi", "b1c"), match{}},
	})
	// Values matching a rule by its key alone get the very same Limit.
	if a, b := c.Lookup("shop", req("any", "1")), c.Lookup("shop", req("any", "2")); a != b {
		t.Error("two values of a default rule get two Limits")
	}
}

// Quirks of matching on composite strings, which the reference has and
// Sluice keeps.
func TestLookupCompositeKeyQuirks(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - {key: a, value: b, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k_, rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: w*, rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: first, value: x*, rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: first, value: xy*, rate_limit: {unit: second, requests_per_unit: 5}}
`)
	runLookups(t, c, []lookupCase{
		// The request's a_b with no value is looked up as "a_b_", then as
		// its bare key "a_b": the key_value a_b of the file.
		{"a bare key matches a key_value", "", req("a_b", ""), match{rpu: 1, unit: Second, stats: "shop.a_b"}},
		// k with an empty value is "k_", the file's key k_; the metric key
		// writes no empty value.
		{"an empty value matches a key ending in _", "", req("k", ""), match{rpu: 2, unit: Second, stats: "shop.k"}},
		// A '*' in the key is a wildcard over the whole key_value.
		{"a wildcard key", "", req("web", "x"), match{rpu: 3, unit: Second, stats: "shop.web_w*"}},
		// The first pattern in file order wins, not the longest.
		{"patterns in file order", "", req("first", "xyz"), match{rpu: 4, unit: Second, stats: "shop.first_x*"}},
	})
}

// The reference's TestDetailedMetric.
func TestLookupDetailedMetric(t *testing.T) {
	nested := func(detailed1, detailed2 bool) string {
		return `domain: nested
descriptors:
  - key: k-1
    detailed_metric: ` + map[bool]string{true: "true", false: "false"}[detailed1] + `
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: k-2
        detailed_metric: ` + map[bool]string{true: "true", false: "false"}[detailed2] + `
        rate_limit: {unit: minute, requests_per_unit: 5}
`
	}
	realistic := `domain: nested
descriptors:
  - {key: k_1, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 500}}
  - {key: k_1, value: listed, rate_limit: {unit: minute, requests_per_unit: 500}}
  - key: k_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - {key: k_3, detailed_metric: true}
      - {key: k_3, value: wanted, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 5}}
  - key: k_2
    value: special
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - {key: k_3, detailed_metric: true}
      - {key: k_3, value: wanted, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 100}}
`
	cases := []struct {
		name, config string
		d            RequestDescriptor
		stats        string
	}{
		{"top of a tree, detailed", nested(true, false), req("k-1", "v-1"), "nested.k-1_v-1"},
		{"top of a tree, not detailed", nested(false, false), req("k-1", "v-1"), "nested.k-1"},
		{"both levels, detailed", nested(true, true), req("k-1", "v-1", "k-2", "v-2"), "nested.k-1_v-1.k-2_v-2"},
		{"both levels, not detailed", nested(false, false), req("k-1", "v-1", "k-2", "v-2"), "nested.k-1.k-2"},
		{"realistic, top", realistic, req("k_1", "some"), "nested.k_1_some"},
		{"realistic, parent of a tree", realistic, req("k_2", "x"), "nested.k_2_x"},
		{"realistic, nested", realistic, req("k_2", "x", "k_3", "wanted"), "nested.k_2_x.k_3_wanted"},
		{"realistic, nested under a value", realistic, req("k_2", "special", "k_3", "wanted"), "nested.k_2_special.k_3_wanted"},
		{"an empty value keeps its _", nested(true, true), req("k-1", "", "k-2", "v"), "nested.k-1_.k-2_v"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := compileText(t, tc.config).Lookup("nested", tc.d)
			if l == nil {
				t.Fatal("found none")
			}
			if l.StatsKey != tc.stats {
				t.Errorf("stats key %q, want %q", l.StatsKey, tc.stats)
			}
		})
	}
}

// The reference's TestValueToMetric_* tests.
func TestLookupValueToMetric(t *testing.T) {
	chain := `domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - {key: subject, rate_limit: {unit: minute, requests_per_unit: 60}}
`
	cases := []struct {
		name, config string
		d            RequestDescriptor
		stats        string
		rpu          uint32
	}{
		{"runtime values of flagged levels", chain, req("route", "draw", "method", "GET", "subject", "123"), "d.route_draw.method_GET.subject", 60},
		{"empty values write no _", chain, req("route", "", "method", "GET", "subject", "123"), "d.route.method_GET.subject", 60},
		{"empty values write no _, middle", chain, req("route", "draw", "method", "", "subject", "123"), "d.route_draw.method.subject", 60},
		{"empty values write no _, both", chain, req("route", "", "method", "", "subject", "123"), "d.route.method.subject", 60},
		{"a default key takes its level's value", `domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors: [{key: k2, rate_limit: {unit: second, requests_per_unit: 1}}]
`, req("k1", "A", "k2", "foo"), "d.k1_A.k2", 1},
		{"only the flagged middle level", `domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors: [{key: k3, rate_limit: {unit: second, requests_per_unit: 1}}]
`, req("k1", "X", "k2", "Y", "k3", "Z"), "d.k1.k2_Y.k3", 1},
		{"no flag, no change", `domain: d
descriptors:
  - key: k1
    descriptors: [{key: k2, rate_limit: {unit: second, requests_per_unit: 1}}]
`, req("k1", "X", "k2", "Y"), "d.k1.k2", 1},
		{"detailed_metric wins", `domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors: [{key: subject, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 60}}]
`, req("route", "draw", "method", "GET", "subject", "123"), "d.route_draw.method_GET.subject_123", 60},
		{"configured values are written", `domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value: GET
        value_to_metric: true
        descriptors: [{key: subject, rate_limit: {unit: minute, requests_per_unit: 60}}]
      - key: method
        value: POST
        value_to_metric: true
        descriptors: [{key: subject, rate_limit: {unit: minute, requests_per_unit: 30}}]
`, req("route", "api", "method", "POST", "subject", "u1"), "d.route_api.method_POST.subject", 30},
		{"a wildcard's whole runtime value", `domain: d
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors: [{key: resource, rate_limit: {unit: minute, requests_per_unit: 100}}]
`, req("user", "alice", "action", "readfile", "resource", "docs"), "d.user_alice.action_readfile.resource", 100},
		{"no flags anywhere", `domain: d
descriptors:
  - key: route
    descriptors:
      - key: method
        descriptors: [{key: subject, rate_limit: {unit: minute, requests_per_unit: 60}}]
`, req("route", "api", "method", "GET", "subject", "u"), "d.route.method.subject", 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := compileText(t, tc.config).Lookup("d", tc.d)
			if l == nil {
				t.Fatal("found none")
			}
			if l.StatsKey != tc.stats || l.RequestsPerUnit != tc.rpu {
				t.Errorf("stats key %q rpu %d, want %q %d", l.StatsKey, l.RequestsPerUnit, tc.stats, tc.rpu)
			}
		})
	}
}

// The reference's share_threshold.yaml, TestShareThreshold,
// TestWildcardStatsBehavior and base_limiter's cache key tests.
const shareConfig = `domain: shop
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - key: nested
    value: parent
    descriptors:
      - {key: files, value: nested/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 200}}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - {key: files, value: nested/*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 300}}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors: [{key: method, rate_limit: {unit: minute, requests_per_unit: 60}}]
  - key: service
    value: svc/*
    share_threshold: true
    descriptors: [{key: endpoint, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 80}}]
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors: [{key: type, rate_limit: {unit: minute, requests_per_unit: 120}}]
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors: [{key: action, rate_limit: {unit: minute, requests_per_unit: 150}}]
  - {key: file, value: test1, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: file, value: test*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: midpath, value: /api*v1, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: multiroute, value: svc*ep*rpc, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: midroute, value: /api*v2, share_threshold: true, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 80}}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors: [{key: resource, value: res*v2, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 60}}]
  - {key: noshare, value: n/*, rate_limit: {unit: minute, requests_per_unit: 10}}
`

func TestLookupShareThreshold(t *testing.T) {
	c := compileText(t, shareConfig)
	runLookups(t, c, []lookupCase{
		{"basic a", "", req("files", "files/a.pdf"), match{rpu: 100, unit: Minute, stats: "shop.files_files/*", counter: "shop_files_files/*_"}},
		{"basic b", "", req("files", "files/b.csv"), match{rpu: 100, unit: Minute, stats: "shop.files_files/*", counter: "shop_files_files/*_"}},
		{"deeper path", "", req("files", "files/sub/c.txt"), match{rpu: 100, unit: Minute, stats: "shop.files_files/*", counter: "shop_files_files/*_"}},
		// README: value_to_metric with share_threshold writes the wildcard
		// prefix and the method's value (route_api.method_GET); the code
		// writes the whole pattern and no value for method.
		{"with value_to_metric", "", req("route", "api/v1", "method", "GET"),
			match{rpu: 60, unit: Minute, stats: "shop.route_api/*.method", counter: "shop_route_api/*_method_GET_"}},
		{"with detailed_metric", "", req("service", "svc/user", "endpoint", "get"),
			match{rpu: 80, unit: Minute, stats: "shop.service_svc/*.endpoint_get", counter: "shop_service_svc/*_endpoint_get_"}},
		{"nested", "", req("nested", "parent", "files", "nested/f1.txt"),
			match{rpu: 200, unit: Minute, stats: "shop.nested_parent.files_nested/*", counter: "shop_nested_parent_files_nested/*_"}},
		{"the same key at two levels", "", req("files", "top/f1.txt", "files", "nested/f1.txt"),
			match{rpu: 300, unit: Minute, stats: "shop.files_top/*.files_nested/*", counter: "shop_files_top/*_files_nested/*_"}},
		{"parent shares, child does not", "", req("path", "path/foo", "file", "file/doc1", "type", "pdf"),
			match{rpu: 120, unit: Minute, stats: "shop.path_path/*.file_file/*.type", counter: "shop_path_path/*_file_file/doc1_type_pdf_"}},
		{"parent and child share", "", req("user", "user/alice", "resource", "res/file1", "action", "read"),
			match{rpu: 150, unit: Minute, stats: "shop.user_user/*.resource_res/*.action", counter: "shop_user_user/*_resource_res/*_action_read_"}},
		{"an exact value wins and counts alone", "", req("file", "test1"),
			match{rpu: 50, unit: Minute, stats: "shop.file_test1", counter: "shop_file_test1_"}},
		{"the others share", "", req("file", "test2"), match{rpu: 100, unit: Minute, stats: "shop.file_test*", counter: "shop_file_test*_"}},
		{"the others share, longer", "", req("file", "test123"), match{rpu: 100, unit: Minute, stats: "shop.file_test*", counter: "shop_file_test*_"}},
		{"middle", "", req("midpath", "/api/v1"), match{rpu: 100, unit: Minute, stats: "shop.midpath_/api*v1", counter: "shop_midpath_/api*v1_"}},
		{"middle, another", "", req("midpath", "/apiXYZv1"), match{rpu: 100, unit: Minute, stats: "shop.midpath_/api*v1", counter: "shop_midpath_/api*v1_"}},
		{"middle, no match", "", req("midpath", "/api/v2"), match{}},
		{"multiple", "", req("multiroute", "svcAepBrpc"), match{rpu: 50, unit: Minute, stats: "shop.multiroute_svc*ep*rpc", counter: "shop_multiroute_svc*ep*rpc_"}},
		{"multiple, empty", "", req("multiroute", "svceprpc"), match{rpu: 50, unit: Minute, stats: "shop.multiroute_svc*ep*rpc"}},
		{"multiple, no match", "", req("multiroute", "svcABCrpc"), match{}},
		{"share wins over value_to_metric", "", req("midroute", "/api-beta-v2"), match{rpu: 80, unit: Minute, stats: "shop.midroute_/api*v2", counter: "shop_midroute_/api*v2_"}},
		{"nested middles", "", req("tenant", "t99prod", "resource", "resBBBv2"),
			match{rpu: 60, unit: Minute, stats: "shop.tenant_t*prod.resource_res*v2", counter: "shop_tenant_t*prod_resource_res*v2_"}},
		{"without share_threshold each value counts alone", "", req("noshare", "n/a"), match{rpu: 10, unit: Minute, stats: "shop.noshare_n/*", counter: "shop_noshare_n/a_"}},
	})
	l := c.Lookup("shop", req("path", "path/foo", "file", "file/doc1", "type", "pdf"))
	if p, ok := l.SharePattern(0); !ok || p != "path/*" {
		t.Errorf("pattern 0 %q %v", p, ok)
	}
	if _, ok := l.SharePattern(1); ok {
		t.Error("pattern 1 set without share_threshold")
	}
	if l := c.Lookup("shop", req("file", "test1")); l.share != nil {
		t.Error("an exact match has share patterns")
	}
}

// The reference's TestWildcardStatsBehavior: trailing and middle patterns
// behave the same under each flag.
func TestLookupWildcardStatsFlags(t *testing.T) {
	cases := []struct {
		name, rule string
		d          RequestDescriptor
		stats      string
	}{
		{"no flags", "{key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo1"), "d.wild_foo*"},
		{"value_to_metric", "{key: wild, value: foo*, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo1"), "d.wild_foo1"},
		{"share_threshold", "{key: wild, value: foo*, share_threshold: true, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo1"), "d.wild_foo*"},
		{"both", "{key: wild, value: foo*, share_threshold: true, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo1"), "d.wild_foo*"},
		{"value_to_metric elsewhere", "{key: wild, value: foo*, descriptors: [{key: other, value_to_metric: true, descriptors: [{key: limit, rate_limit: {unit: minute, requests_per_unit: 20}}]}]}",
			req("wild", "foo1", "other", "bar", "limit", "X"), "d.wild_foo*.other_bar.limit"},
		{"middle and trailing, no flags", "{key: wild, value: foo*bar*, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo123bar456"), "d.wild_foo*bar*"},
		{"middle and trailing, value_to_metric", "{key: wild, value: foo*bar*, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 20}}", req("wild", "foo123bar456"), "d.wild_foo123bar456"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := compileText(t, "domain: d\ndescriptors:\n  - "+tc.rule+"\n").Lookup("d", tc.d)
			if l == nil || l.StatsKey != tc.stats {
				t.Fatalf("got %+v, want stats key %q", l, tc.stats)
			}
		})
	}
}

// The reference's metadata.yaml and TestMetadata: a limit carries its
// rule's metadata.
func TestLookupMetadata(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - {key: route, metadata: {name: service_1}, rate_limit: {unit: second, requests_per_unit: 5}}
      - {key: route, value: checkout, rate_limit: {unit: second, requests_per_unit: 10}}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata: {service_with_quota: {name: service_2}}
`)
	l := c.Lookup("shop", req("tenant", "acme", "route", "x"))
	if l == nil || !reflect.DeepEqual(l.Rule.Metadata, map[string]any{"name": "service_1"}) {
		t.Errorf("metadata %+v", l)
	}
	l = c.Lookup("shop", req("tenant", "acme", "route", "checkout"))
	if l == nil || l.Rule.Metadata != nil {
		t.Errorf("metadata %+v", l)
	}
	l = c.Lookup("shop", req("client", "x"))
	if want := map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}; l == nil || !reflect.DeepEqual(l.Rule.Metadata, want) {
		t.Errorf("metadata %+v", l)
	}
	if got := l.Rule.Path; !reflect.DeepEqual(got, []Entry{{"client", ""}}) {
		t.Errorf("rule path %v", got)
	}
}

func TestLookupExtras(t *testing.T) {
	c := compileText(t, `domain: shop
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10, name: burst}
    sluice:
      algorithm: token_bucket
      burst: 40
      limits: [{name: daily, requests_per_unit: 10000, unit: day}]
  - key: only
    sluice: {limits: [{name: a, requests_per_unit: 5, unit: minute}, {name: b, requests_per_unit: 50, unit: hour, algorithm: sliding_window}]}
  - {key: plain, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: free, rate_limit: {unlimited: true}}
`)
	cases := []struct {
		key   string
		rl    RateLimit
		specs []Spec
	}{
		{"api_key", RateLimit{Name: "burst", RequestsPerUnit: 10, Unit: Second}, []Spec{
			{Name: "burst", RequestsPerUnit: 10, Unit: Second, Algorithm: TokenBucket, Burst: 40},
			{Name: "daily", RequestsPerUnit: 10000, Unit: Day},
		}},
		{"only", RateLimit{RequestsPerUnit: 5, Unit: Minute}, []Spec{
			{Name: "a", RequestsPerUnit: 5, Unit: Minute},
			{Name: "b", RequestsPerUnit: 50, Unit: Hour, Algorithm: SlidingWindow},
		}},
		{"plain", RateLimit{RequestsPerUnit: 1, Unit: Second}, []Spec{{RequestsPerUnit: 1, Unit: Second}}},
		{"free", RateLimit{Unlimited: true}, nil},
	}
	for _, tc := range cases {
		l := c.Lookup("shop", req(tc.key, "v"))
		if l == nil {
			t.Fatalf("%s: none", tc.key)
		}
		if !reflect.DeepEqual(l.RateLimit, tc.rl) || !reflect.DeepEqual(l.Specs(), tc.specs) {
			t.Errorf("%s: rate limit %+v specs %+v\nwant %+v %+v", tc.key, l.RateLimit, l.Specs(), tc.rl, tc.specs)
		}
	}
}

// The reference's TestDuplicateDomain and TestDomainMerge: Sluice refuses
// two files of one domain, the reference's default (it can merge them).
func TestCompileRefusesADomainTwice(t *testing.T) {
	a, _ := Parse("a.yaml", []byte("domain: shop\ndescriptors: [{key: a, rate_limit: {unit: minute, requests_per_unit: 10}}]\n"))
	b, _ := Parse("b.yaml", []byte("domain: shop\n"))
	other, _ := Parse("c.yaml", []byte("domain: other\ndescriptors: [{key: a, rate_limit: {unit: minute, requests_per_unit: 20}}]\n"))
	if _, err := Compile(a, b); err == nil || err.Error() != "b.yaml: duplicate domain 'shop' in config file" {
		t.Errorf("error %v", err)
	}
	c, err := Compile(a, other)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lookup("shop", req("a", "x")).RequestsPerUnit != 10 || c.Lookup("other", req("a", "x")).RequestsPerUnit != 20 {
		t.Error("domains mixed")
	}
	if _, err := Compile(&File{Name: "x.yaml", Domain: ""}); err == nil || !strings.Contains(err.Error(), "empty domain") {
		t.Errorf("an invalid file compiled: %v", err)
	}
}

// A lookup whose stats key is the rule's own allocates nothing; one with
// a key of its own allocates the Limit and the key.
func TestLookupAllocations(t *testing.T) {
	c := compileText(t, basicConfig, strings.Replace(shareConfig, "domain: shop", "domain: shopx", 1))
	for _, tc := range []struct {
		domain string
		d      RequestDescriptor
		max    float64
	}{
		{"shop", req("tenant", "acme", "route", "search"), 0},
		{"shop", req("client", "partner"), 0},
		{"shop", req("nothing", "here"), 0},
		{"shop", req("sku", "a-1"), 2},
		{"shopx", req("files", "files/a.pdf"), 2},
		{"shopx", req("user", "user/alice", "resource", "res/file1", "action", "read"), 2},
	} {
		if n := testing.AllocsPerRun(100, func() { c.Lookup(tc.domain, tc.d) }); n > tc.max {
			t.Errorf("%v: %v allocations, want at most %v", tc.d.Entries, n, tc.max)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	c := compileText(b, basicConfig, strings.Replace(shareConfig, "domain: shop", "domain: share", 1))
	cases := []struct {
		name, domain string
		d            RequestDescriptor
	}{
		{"exact", "shop", req("tenant", "acme", "route", "checkout")},
		{"default", "shop", req("tenant", "acme", "route", "search")},
		{"miss", "shop", req("tenant", "nobody")},
		{"detailed", "shop", req("sku", "a-1")},
		{"wildcards", "share", req("multiroute", "svcAepBrpc")},
		{"share_nested", "share", req("user", "user/alice", "resource", "res/file1", "action", "read")},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.Lookup(tc.domain, tc.d) == nil && tc.name != "miss" {
					b.Fatal("no match")
				}
			}
		})
	}
}
