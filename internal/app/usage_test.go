package app

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A key's usage through the API: what each limit has used in its current
// period, and when that period resets: a month quota on the key's anchor
// day in the tenant's zone, a periodic window at its window's end.
func TestKeyUsage(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "billing", "owner_email": "o@billing.test", "owner_password": "a long passphrase", "time_zone": "Europe/Paris"})
	sk := tn["service_key"].(string)
	if tn["time_zone"] != "Europe/Paris" {
		t.Fatalf("tenant: %v", tn)
	}
	do(t, m, "POST", "/v1/policies", sk, map[string]any{
		"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": []any{
			map[string]any{"name": "minute", "algorithm": "fixed_window", "limit": 100, "period": "1m"},
			map[string]any{"name": "monthly", "algorithm": "fixed_window", "limit": 10000, "calendar": "month"},
		}},
	})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer", "tier": "pro", "billing_anchor": 17})
	if key["billing_anchor"] != 17.0 {
		t.Fatalf("key: %v", key)
	}
	secret := key["key"].(string)
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x", "peek": true})
		return r["policy"] == "api"
	})
	for i := 0; i < 3; i++ {
		if r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": secret, "path": "/api/x"}); r["allowed"] != true {
			t.Fatalf("check %d: %v", i, r)
		}
	}
	before := time.Now()
	u := do(t, m, "GET", "/v1/keys/"+key["id"].(string)+"/usage", sk, nil)
	usage := u["usage"].([]any)
	if len(usage) != 2 || u["key_status"] != "active" {
		t.Fatalf("usage: %v", u)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	now := before.In(paris)
	anchor := time.Date(now.Year(), now.Month(), 17, 0, 0, 0, 0, paris)
	if !anchor.After(now) {
		anchor = time.Date(now.Year(), now.Month()+1, 17, 0, 0, 0, 0, paris)
	}
	for _, e := range usage {
		e := e.(map[string]any)
		if e["used"] != 3.0 || e["policy"] != "api" {
			t.Errorf("limit %v: want 3 used of policy api", e)
		}
		at, err := time.Parse(time.RFC3339, e["resets_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		switch e["limit"] {
		case "monthly":
			if e["calendar"] != "month" || e["remaining"] != 9997.0 || !at.Equal(anchor) {
				t.Errorf("monthly: %v, want 9997 left, resetting at %s (the 17th, Paris)", e, anchor.UTC())
			}
		case "minute":
			if e["period"] != "1m0s" || at.Sub(before) > time.Minute+time.Second || at.Before(before) {
				t.Errorf("minute: %v, want a reset within the minute", e)
			}
		default:
			t.Errorf("unknown limit %v", e)
		}
	}
	if status, _ := call(t, m, "GET", "/v1/keys/ckey_missing/usage", sk, ""); status != 404 {
		t.Errorf("a missing key's usage: %d", status)
	}
}

// Bad calendar input answers 400 naming the field and changes nothing: an
// unknown time zone (tenant create, operator and tenant PATCH), an anchor
// day of 0 or 32 (key create and PATCH); null removes an anchor.
func TestCalendarBadInput(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "cal", "owner_email": "o@cal.test", "owner_password": "a long passphrase", "time_zone": "Asia/Kolkata"})
	sk, id := tn["service_key"].(string), tn["id"].(string)
	bad := func(method, path, token, body, field string) {
		t.Helper()
		status, out := call(t, m, method, path, token, body)
		if status != 400 || !strings.HasPrefix(errMessage(out), field+":") {
			t.Errorf("%s %s %s: %d %v, want 400 naming %s", method, path, body, status, out, field)
		}
	}
	bad("POST", "/v1/admin/tenants", testToken, `{"name":"mars","owner_email":"o@mars.test","owner_password":"a long passphrase","time_zone":"Mars/Olympus"}`, "time_zone")
	bad("PATCH", "/v1/admin/tenants/"+id, testToken, `{"time_zone":"Nowhere/Special"}`, "time_zone")
	bad("PATCH", "/v1/tenant", sk, `{"time_zone":"UTC+25"}`, "time_zone")
	if got := do(t, m, "GET", "/v1/tenant", sk, nil); got["time_zone"] != "Asia/Kolkata" {
		t.Errorf("the zone changed: %v", got)
	}
	for _, day := range []string{"0", "32", "-1", `"17"`} {
		bad("POST", "/v1/keys", sk, `{"name":"k","tier":"pro","billing_anchor":`+day+`}`, "billing_anchor")
	}
	if keys := do(t, m, "GET", "/v1/keys", sk, nil); len(keys["keys"].([]any)) != 0 {
		t.Errorf("a bad key was created: %v", keys)
	}
	k := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "k", "tier": "pro", "billing_anchor": 31})
	kid := k["id"].(string)
	for _, day := range []string{"0", "32"} {
		bad("PATCH", "/v1/keys/"+kid, sk, `{"billing_anchor":`+day+`}`, "billing_anchor")
	}
	if got := do(t, m, "GET", "/v1/keys/"+kid, sk, nil); got["billing_anchor"] != 31.0 {
		t.Errorf("the anchor changed: %v", got)
	}
	if got := do(t, m, "PATCH", "/v1/keys/"+kid, sk, map[string]any{"billing_anchor": nil}); got["billing_anchor"] != nil {
		t.Errorf("null did not remove the anchor: %v", got)
	}
}

// usageGet sends GET path with the service key and answers the status,
// the headers and the body.
func usageGet(t *testing.T, m *Main, path, token string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+m.Addr()+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// The heart of usage a tenant bills from: the days of a month add up, to
// the unit, to what the month quota counted. A tenant in Kolkata (+05:30,
// so its days start at 18:30 UTC) sells a month quota; its callers make
// checks of varying cost over the last two days of January, some denied
// once the quota is spent, the server and its worker are restarted on the
// same SQLite file and NATS store five minutes before midnight, and
// checks go on into February. The daily usage of January and of February
// each equal what GET /v1/keys/{id}/usage said was used of the month, and
// the allowed costs summed from the answers.
func TestDailyUsageAddsUpToTheMonthQuota(t *testing.T) {
	ist, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	set := func(at time.Time) { clock.Store(at.UnixNano()) }
	set(time.Date(2027, time.January, 30, 23, 0, 0, 0, ist))
	dir := t.TempDir()
	start := func() (*Main, func()) {
		cfg := DefaultConfig()
		cfg.Addr, cfg.Data, cfg.Node, cfg.OperatorToken = "127.0.0.1:0", dir, "usage", testToken
		return runMain(t, cfg, func(m *Main) { m.clock = func() time.Time { return time.Unix(0, clock.Load()) } })
	}
	m, closeM := start()
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "billing", "owner_email": "o@billing.test", "owner_password": "a long passphrase", "time_zone": "Asia/Kolkata"})
	sk := tn["service_key"].(string)
	const quota = 60
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": quota, "calendar": "month"}}})
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "search", "path": "/search/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "token_bucket", "limit": 1000, "period": "1m"}}})
	keyA := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer a", "tier": "pro"})
	keyB := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "customer b", "tier": "pro"})
	idA, idB := keyA["id"].(string), keyB["id"].(string)
	waitUntil(t, 2*time.Second, "the policies on the server", func() bool {
		r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": keyA["key"], "path": "/search/x", "peek": true})
		return r["policy"] == "search"
	})

	// want[month][key id + "/" + policy] sums the costs of allowed checks;
	// "" is the IP caller's key id.
	want := map[string]map[string]int64{"2027-01": {}, "2027-02": {}}
	day := map[string]int64{} // key A's api units per day in Kolkata
	denied := 0
	costs := []int64{1, 3, 7, 2, 5, 4, 6, 9}
	n := 0
	check := func(key map[string]any, path string) map[string]any {
		t.Helper()
		now := time.Unix(0, clock.Load()).In(ist)
		cost := costs[n%len(costs)]
		n++
		body := map[string]any{"path": path, "cost": cost}
		id := ""
		if key != nil {
			body["api_key"], id = key["key"], key["id"].(string)
		} else {
			body["ip"] = "203.0.113.9"
		}
		r := do(t, m, "POST", "/v1/check", sk, body)
		if r["allowed"] == true {
			policy := r["policy"].(string)
			want[now.Format("2006-01")][id+"/"+policy] += cost
			if id == idA && policy == "api" {
				day[now.Format(time.DateOnly)] += cost
			}
		} else {
			denied++
		}
		return r
	}
	used := func(id string) int64 {
		t.Helper()
		u := do(t, m, "GET", "/v1/keys/"+id+"/usage", sk, nil)
		for _, l := range u["usage"].([]any) {
			if l := l.(map[string]any); l["policy"] == "api" {
				return int64(l["used"].(float64))
			}
		}
		t.Fatalf("no api quota in %v", u)
		return 0
	}

	// January 30, 23:00 to January 31, 23:42 in Kolkata: 120 rounds of
	// checks, 11 minutes and 20 seconds apart.
	at := time.Date(2027, time.January, 30, 23, 0, 0, 0, ist)
	for i := range 120 {
		set(at.Add(time.Duration(i) * (11*time.Minute + 20*time.Second)))
		check(keyA, "/api/x")
		if i%3 == 0 {
			check(keyB, "/api/x")
			check(keyA, "/search/x")
		}
		if i%10 == 0 {
			check(nil, "/api/x")
		}
	}
	if denied == 0 || day["2027-01-30"] == 0 || day["2027-01-31"] == 0 {
		t.Fatalf("the setup should spend key A's quota over two Kolkata days: %d denied, days %v", denied, day)
	}
	set(time.Date(2027, time.January, 31, 23, 50, 0, 0, ist))
	if got := used(idA); got != want["2027-01"][idA+"/api"] {
		t.Fatalf("key A used %d of January before the restart, the answers allowed %d", got, want["2027-01"][idA+"/api"])
	}

	// A full restart five minutes before midnight.
	set(time.Date(2027, time.January, 31, 23, 55, 0, 0, ist))
	closeM()
	m, _ = start()
	set(time.Date(2027, time.January, 31, 23, 58, 0, 0, ist))
	r := check(keyA, "/api/x") // costs[n]: allowed only if what is left covers it
	left := quota - want["2027-01"][idA+"/api"]
	if int64(r["remaining"].(float64)) != left {
		t.Fatalf("after the restart: %v, want %d left of January", r, left)
	}
	check(keyB, "/api/x")
	set(time.Date(2027, time.January, 31, 23, 59, 59, 0, ist))
	janA, janB := used(idA), used(idB)
	if janA != want["2027-01"][idA+"/api"] || janB != want["2027-01"][idB+"/api"] {
		t.Fatalf("January used %d and %d, the answers allowed %v", janA, janB, want["2027-01"])
	}

	// February 1 and 2 in Kolkata.
	at = time.Date(2027, time.February, 1, 0, 0, 30, 0, ist)
	for i := range 40 {
		set(at.Add(time.Duration(i) * 67 * time.Minute))
		check(keyA, "/api/x")
		check(keyB, "/search/x")
		if i%5 == 0 {
			check(nil, "/api/x")
		}
	}
	febA := used(idA)
	if febA != want["2027-02"][idA+"/api"] || febA == 0 {
		t.Fatalf("February used %d, the answers allowed %d", febA, want["2027-02"][idA+"/api"])
	}

	// The daily usage, once the worker has applied every counter.
	sum := func(month string) (map[string]int64, map[string]int64, int64) {
		from, to := month+"-01", "2027-01-31"
		if month == "2027-02" {
			to = "2027-02-28"
		}
		var u struct {
			TimeZone string `json:"time_zone"`
			Total    int64  `json:"total"`
			Usage    []struct {
				Day    string `json:"day"`
				KeyID  string `json:"key_id"`
				Policy string `json:"policy"`
				Units  int64  `json:"units"`
			} `json:"usage"`
		}
		status, _, body := usageGet(t, m, "/v1/usage?from="+from+"&to="+to+"&group=key", sk)
		if status != 200 || json.Unmarshal(body, &u) != nil || u.TimeZone != "Asia/Kolkata" {
			t.Fatalf("usage of %s: %d %s", month, status, body)
		}
		got, days := map[string]int64{}, map[string]int64{}
		for _, r := range u.Usage {
			got[r.KeyID+"/"+r.Policy] += r.Units
			if r.KeyID == idA && r.Policy == "api" {
				days[r.Day] += r.Units
			}
		}
		return got, days, u.Total
	}
	waitUntil(t, 15*time.Second, "February's usage applied", func() bool {
		got, _, _ := sum("2027-02")
		return fmt.Sprint(got) == fmt.Sprint(want["2027-02"])
	})
	for _, month := range []string{"2027-01", "2027-02"} {
		got, days, total := sum(month)
		if fmt.Sprint(got) != fmt.Sprint(want[month]) {
			t.Errorf("%s: daily usage per key and policy %v, the answers allowed %v", month, got, want[month])
		}
		var all int64
		for _, v := range want[month] {
			all += v
		}
		if total != all {
			t.Errorf("%s: total %d, want %d", month, total, all)
		}
		for d, v := range days {
			if day[d] != v {
				t.Errorf("key A's api units on %s: %d, want %d", d, v, day[d])
			}
		}
	}
	if got, _, _ := sum("2027-01"); got[idA+"/api"] != janA {
		t.Errorf("January's days add up to %d, the month quota counted %d", got[idA+"/api"], janA)
	}
	if got, _, _ := sum("2027-02"); got[idA+"/api"] != febA {
		t.Errorf("February's days add up to %d, the month quota counted %d", got[idA+"/api"], febA)
	}

	// Per policy, and the CSV the dashboard downloads too.
	var byPolicy struct {
		Usage []struct {
			Policy string
			Units  int64
		} `json:"usage"`
	}
	status, _, body := usageGet(t, m, "/v1/usage?from=2027-01-01&to=2027-01-31&group=policy", sk)
	if status != 200 || json.Unmarshal(body, &byPolicy) != nil {
		t.Fatalf("by policy: %d %s", status, body)
	}
	perPolicy := map[string]int64{}
	for _, r := range byPolicy.Usage {
		perPolicy[r.Policy] += r.Units
	}
	wantPolicy := map[string]int64{}
	for k, v := range want["2027-01"] {
		_, p, _ := strings.Cut(k, "/")
		wantPolicy[p] += v
	}
	if fmt.Sprint(perPolicy) != fmt.Sprint(wantPolicy) {
		t.Errorf("January per policy %v, want %v", perPolicy, wantPolicy)
	}
	status, hdr, body := usageGet(t, m, "/v1/usage?from=2027-01-01T00:00:00%2B05:30&to=2027-01-31&format=csv", sk)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") ||
		hdr.Get("Content-Disposition") != `attachment; filename=usage-2027-01-01-to-2027-01-31-by-key.csv` {
		t.Fatalf("csv: %d %v", status, hdr)
	}
	recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
	if err != nil || len(recs) < 2 || strings.Join(recs[0], ",") != "day,key_id,key_name,key_prefix,policy,units" {
		t.Fatalf("csv: %v %q", err, body)
	}
	csvSum := map[string]int64{}
	for _, rec := range recs[1:] {
		u, _ := strconv.ParseInt(rec[5], 10, 64)
		csvSum[rec[1]+"/"+rec[4]] += u
	}
	if fmt.Sprint(csvSum) != fmt.Sprint(want["2027-01"]) {
		t.Errorf("January's CSV %v, want %v", csvSum, want["2027-01"])
	}
	for _, bad := range []string{"from=2027-01-40", "from=2027-01-01&to=2027-02-30", "from=2027-01-01&to=2027-01-31&group=tier",
		"from=2027-01-01&to=2027-01-31&format=xml", "from=2025-01-01&to=2027-01-31"} {
		if status, _, body := usageGet(t, m, "/v1/usage?"+bad, sk); status != 400 {
			t.Errorf("%s: %d %s, want 400", bad, status, body)
		}
	}
}

// The usage export through the API is paged and never drops its tail: a
// key whose day adds up to 0 units (a reservation settled at 0) has no
// row and takes no room in a page, pages of one row follow next_cursor
// to every other key's row, and CSV pages follow their Link header; every
// page's total is the range's.
func TestUsageExportPages(t *testing.T) {
	m := boot(t)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "pages", "owner_email": "o@pages.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 1000, "calendar": "month"}}})
	keys := map[string]string{} // key id → key
	for _, name := range []string{"a", "b", "c", "d"} {
		k := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": name, "tier": "pro"})
		keys[k["id"].(string)] = k["key"].(string)
	}
	waitUntil(t, 2*time.Second, "the policy on the server", func() bool {
		for _, ck := range keys {
			return do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": ck, "path": "/api/x", "peek": true})["policy"] == "api"
		}
		return false
	})
	want := map[string]int64{} // key id → units
	var zero string
	var total int64
	cost := int64(2)
	for id, ck := range keys {
		if zero == "" {
			// Reserve 5, settle 0: the day's units add up to 0.
			zero = id
			r := do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": ck, "path": "/api/x", "reserve": 5})
			if s := do(t, m, "POST", "/v1/settle", sk, map[string]any{"reservation": r["reservation"], "actual": 0}); s["difference"] != -5.0 {
				t.Fatalf("settle 0 of 5: %v", s)
			}
			continue
		}
		do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": ck, "path": "/api/x", "cost": cost})
		want[id], total = cost, total+cost
		cost++
	}
	day := time.Now().UTC().Format(time.DateOnly)
	q := "/v1/usage?from=" + day + "&to=" + day
	waitUntil(t, 5*time.Second, "the units in the daily usage", func() bool {
		return do(t, m, "GET", q, sk, nil)["total"] == float64(total)
	})
	got := map[string]int64{}
	cursor, pages := "", 0
	for {
		u := do(t, m, "GET", q+"&limit=1&cursor="+cursor, sk, nil)
		pages++
		rows := u["usage"].([]any)
		if u["total"] != float64(total) || len(rows) != 1 {
			t.Fatalf("page %d: %v, want one row and the range's total %d", pages, u, total)
		}
		r := rows[0].(map[string]any)
		got[r["key_id"].(string)] += int64(r["units"].(float64))
		next, ok := u["next_cursor"].(string)
		if !ok {
			break
		}
		cursor = next
	}
	if pages != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d pages of one row: %v, want %v without %s's 0", pages, got, want, zero)
	}

	csvGot := map[string]int64{}
	path, pages := q+"&format=csv&limit=2", 0
	for path != "" {
		status, hdr, body := usageGet(t, m, path, sk)
		pages++
		recs, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if status != 200 || err != nil || len(recs) < 2 || len(recs) > 3 {
			t.Fatalf("csv page %d: %d %v %q", pages, status, err, body)
		}
		for _, rec := range recs[1:] {
			u, _ := strconv.ParseInt(rec[5], 10, 64)
			csvGot[rec[1]] += u
		}
		path = ""
		if link := hdr.Get("Link"); link != "" {
			target, ok := strings.CutSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
			if !ok || !strings.Contains(target, "cursor="+hdr.Get("Sluice-Next-Cursor")) || hdr.Get("Sluice-Next-Cursor") == "" {
				t.Fatalf("csv page %d: Link %q, Sluice-Next-Cursor %q", pages, link, hdr.Get("Sluice-Next-Cursor"))
			}
			path = target
		}
	}
	if pages != 2 || fmt.Sprint(csvGot) != fmt.Sprint(want) {
		t.Fatalf("csv in %d pages of two rows: %v, want %v", pages, csvGot, want)
	}
}
