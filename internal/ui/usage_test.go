package ui_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// The usage page shows the current month in the tenant's zone by default:
// the units per key and policy and per policy, their total, and a link
// that downloads, through the session, the very CSV the API answers. A
// month picked in the form shows that month.
func TestUsagePage(t *testing.T) {
	s := bootSite(t)
	tn := s.tenant("billed")
	s.api("PATCH", "/v1/tenant", tn.key, map[string]any{"time_zone": "Asia/Kathmandu"})
	a := s.agent()
	a.signIn(tn.email, tn.password)
	s.api("POST", "/v1/policies", tn.key, map[string]any{"name": "plan", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 10, "calendar": "month"}}})
	keyID, secret := a.createKey("customer", "pro")
	waitFor(t, 2*time.Second, "the policy on the server", func() bool {
		return s.check(tn, map[string]any{"api_key": secret, "path": "/api/x", "peek": true})["policy"] == "plan"
	})
	var used int64
	for _, cost := range []int64{3, 4, 5, 2} { // the 5 is denied: 7 used of 10
		if r := s.check(tn, map[string]any{"api_key": secret, "path": "/api/x", "cost": cost}); r["allowed"] == true {
			used += cost
		}
	}
	s.check(tn, map[string]any{"ip": "192.0.2.1", "path": "/api/x", "cost": 2}) // anonymous: no limit, 2 units
	if used != 9 {
		t.Fatalf("the checks used %d, want 9", used)
	}
	ktm, _ := time.LoadLocation("Asia/Kathmandu")
	month := time.Now().In(ktm).Format("2006-01")
	first, _ := time.Parse("2006-01", month)
	from, to := first.Format(time.DateOnly), first.AddDate(0, 1, -1).Format(time.DateOnly)
	waitFor(t, 10*time.Second, "the usage applied", func() bool {
		return s.api("GET", "/v1/usage?from="+from+"&to="+to, tn.key, nil)["total"] == 11.0
	})

	p := want(t, a.get("/ui/usage"), http.StatusOK, "usage page")
	if v := attrOf(p.testID("usage-month")[0], "value"); v != month {
		t.Errorf("month picker %q, want %s (now in Kathmandu)", v, month)
	}
	if got := p.text("usage-total"); got != "11" {
		t.Errorf("total %q, want 11", got)
	}
	if !strings.Contains(p.text("usage-period"), "Asia/Kathmandu") {
		t.Errorf("period %q", p.text("usage-period"))
	}
	rows := p.testID("usage-key-row")
	if len(rows) != 2 || attrOf(rows[0], "data-key-id") != keyID || attrOf(rows[1], "data-key-id") != "" {
		t.Fatalf("key rows: %d\n%s", len(rows), p.body)
	}
	if u := p.testID("usage-key-units"); textOf(u[0]) != "9" || textOf(u[1]) != "2" {
		t.Errorf("units per key %q and %q, want 9 and 2", textOf(u[0]), textOf(u[1]))
	}
	if u := p.testID("usage-policy-units"); len(u) != 1 || textOf(u[0]) != "11" {
		t.Errorf("units per policy: %d rows", len(u))
	}

	// The download is the API's CSV, byte for byte.
	href := p.attr("usage-csv", "href")
	resp, err := a.c.Get(s.base + href)
	if err != nil {
		t.Fatal(err)
	}
	csv, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req, _ := http.NewRequest("GET", s.base+"/v1/usage?format=csv&from="+from+"&to="+to, nil)
	req.Header.Set("Authorization", "Bearer "+tn.key)
	apiResp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	apiCSV, _ := io.ReadAll(apiResp.Body)
	apiResp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") ||
		resp.Header.Get("Content-Disposition") != apiResp.Header.Get("Content-Disposition") || string(csv) != string(apiCSV) {
		t.Fatalf("dashboard CSV %d %v\n%s\nAPI CSV %v\n%s", resp.StatusCode, resp.Header, csv, apiResp.Header, apiCSV)
	}
	if !strings.HasPrefix(string(csv), "day,key_id,key_name,key_prefix,policy,units\n") || !strings.Contains(string(csv), ","+keyID+",customer,") {
		t.Errorf("CSV:\n%s", csv)
	}
	// Without a session, no download.
	if p := s.agent().get(href); p.status != http.StatusSeeOther || strings.Contains(p.body, keyID) {
		t.Fatalf("CSV without a session: %d %q", p.status, p.body)
	}

	// Another month: nothing used.
	p = want(t, a.get("/ui/usage?month=2020-02"), http.StatusOK, "an older month")
	if !p.has("usage-empty") || p.text("usage-total") != "0" || !strings.Contains(p.text("usage-period"), "2020-02-29") {
		t.Errorf("February 2020:\n%s", p.body)
	}
	p = want(t, a.get("/ui/usage?month=last"), http.StatusOK, "a month that is not one")
	if !strings.Contains(p.text("usage-error"), "month") || attrOf(p.testID("usage-month")[0], "value") != month {
		t.Errorf("a bad month: %q", p.text("usage-error"))
	}
}

// textOf is a node's text, its spaces collapsed.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}
