package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

// Every bad customer write and every bad attachment is refused with an
// error naming its field, and nothing is changed: the customer list, the
// key list and the key's customer stay as they were.
func TestCustomerRefusals(t *testing.T) {
	m := bootWith(t, nil)
	tn := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "shop", "owner_email": "o@shop.test", "owner_password": "a long passphrase"})
	sk := tn["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 5, "period": "1m"}}})
	cus := do(t, m, "POST", "/v1/customers", sk, map[string]any{"external_id": "org_42", "tier": "pro"})
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "app", "tier": "pro"})
	long := strings.Repeat("x", 129)
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"duplicate external_id", "POST", "/v1/customers", `{"external_id":"org_42","tier":"pro"}`, http.StatusConflict, "external_id"},
		{"missing external_id", "POST", "/v1/customers", `{"tier":"pro"}`, http.StatusBadRequest, "external_id"},
		{"oversized external_id", "POST", "/v1/customers", `{"external_id":"` + long + `","tier":"pro"}`, http.StatusBadRequest, "external_id"},
		{"control character", "POST", "/v1/customers", `{"external_id":"a\u0007b","tier":"pro"}`, http.StatusBadRequest, "external_id"},
		{"missing tier", "POST", "/v1/customers", `{"external_id":"org_43"}`, http.StatusBadRequest, "tier"},
		{"bad tier", "POST", "/v1/customers", `{"external_id":"org_43","tier":"Pro Plan"}`, http.StatusBadRequest, "tier"},
		{"oversized name", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","name":"` + long + `"}`, http.StatusBadRequest, "name"},
		{"anchor 0", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","billing_anchor":0}`, http.StatusBadRequest, "billing_anchor"},
		{"anchor 32", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","billing_anchor":32}`, http.StatusBadRequest, "billing_anchor"},
		{"override of no policy", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","overrides":{"nope":[{"algorithm":"fixed_window","limit":1,"period":"1m"}]}}`, http.StatusBadRequest, "overrides.nope"},
		{"bad override", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","overrides":{"api":[{"algorithm":"fixed_window","limit":0,"period":"1m"}]}}`, http.StatusBadRequest, "overrides.api"},
		{"metadata not strings", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","metadata":{"n":1}}`, http.StatusBadRequest, "metadata"},
		{"oversized metadata value", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","metadata":{"n":"` + strings.Repeat("v", 501) + `"}}`, http.StatusBadRequest, "metadata.n"},
		{"bad metadata key", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","metadata":{"a b":"c"}}`, http.StatusBadRequest, "metadata"},
		{"unknown field", "POST", "/v1/customers", `{"external_id":"org_43","tier":"pro","plan":"x"}`, http.StatusBadRequest, "unknown field"},
		{"patch to a taken external_id", "PATCH", "/v1/customers/" + cus["id"].(string), `{"external_id":"org_42"}`, http.StatusOK, ""},
		{"key of an unknown customer", "POST", "/v1/keys", `{"name":"lost","tier":"pro","customer_id":"cus_nope"}`, http.StatusNotFound, "customer_id"},
		{"empty customer_id", "POST", "/v1/keys", `{"name":"lost","tier":"pro","customer_id":""}`, http.StatusBadRequest, "customer_id"},
		{"key moved to an unknown customer", "PATCH", "/v1/keys/" + key["id"].(string), `{"customer_id":"cus_nope"}`, http.StatusNotFound, "customer_id"},
		{"customer_id not a string", "PATCH", "/v1/keys/" + key["id"].(string), `{"customer_id":7}`, http.StatusBadRequest, "customer_id"},
	} {
		status, out := call(t, m, c.method, c.path, sk, c.body)
		if c.field == "" {
			if status != c.status {
				t.Errorf("%s: %d %v", c.name, status, out)
			}
			continue
		}
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != c.status || !strings.HasPrefix(msg, c.field) {
			t.Errorf("%s: %d %v, want %d naming %s", c.name, status, out, c.status, c.field)
		}
		if strings.Contains(msg, "SELECT ") || strings.Contains(msg, "sqlite") || strings.Contains(msg, "goroutine") {
			t.Errorf("%s: the error shows internals: %q", c.name, msg)
		}
	}
	list := do(t, m, "GET", "/v1/customers", sk, nil)
	if n := len(list["customers"].([]any)); n != 1 || list["total"].(float64) != 1 {
		t.Fatalf("customers after the refusals: %v", list)
	}
	keys := do(t, m, "GET", "/v1/keys", sk, nil)["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["customer_id"] != nil {
		t.Fatalf("keys after the refusals: %v", keys)
	}
}

// A tenant cannot see, change, delete, list the keys of, or attach a key
// to another tenant's customer, and the answers are those of an unknown
// id: it does not learn that the customer exists.
func TestCustomersAreTenantsOwn(t *testing.T) {
	m := bootWith(t, nil)
	a := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "a", "owner_email": "o@a.test", "owner_password": "a long passphrase"})["service_key"].(string)
	b := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "b", "owner_email": "o@b.test", "owner_password": "a long passphrase"})["service_key"].(string)
	cus := do(t, m, "POST", "/v1/customers", a, map[string]any{"external_id": "org_1", "tier": "pro", "metadata": map[string]string{"secret": "s3"}})
	id := cus["id"].(string)
	bKey := do(t, m, "POST", "/v1/keys", b, map[string]any{"name": "b-app", "tier": "pro"})
	_, unknown := call(t, m, "GET", "/v1/customers/cus_unknown", b, "")
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/customers/" + id, ""},
		{"GET", "/v1/customers/" + id + "/keys", ""},
		{"PATCH", "/v1/customers/" + id, `{"name":"mine now"}`},
		{"DELETE", "/v1/customers/" + id, ""},
	} {
		status, out := call(t, m, c.method, c.path, b, c.body)
		if status != http.StatusNotFound || out["error"].(map[string]any)["message"] != unknown["error"].(map[string]any)["message"] {
			t.Errorf("tenant b %s %s: %d %v, want what an unknown id answers (%v)", c.method, c.path, status, out, unknown)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/keys", `{"name":"x","tier":"pro","customer_id":"` + id + `"}`},
		{"PATCH", "/v1/keys/" + bKey["id"].(string), `{"customer_id":"` + id + `"}`},
	} {
		status, out := call(t, m, c.method, c.path, b, c.body)
		_, unknownOut := call(t, m, c.method, c.path, b, strings.Replace(c.body, id, "cus_unknownunknownunkn", 1))
		want := strings.Replace(unknownOut["error"].(map[string]any)["message"].(string), "cus_unknownunknownunkn", id, 1)
		if status != http.StatusNotFound || out["error"].(map[string]any)["message"] != want {
			t.Errorf("tenant b attaches to a's customer, %s %s: %d %v", c.method, c.path, status, out)
		}
	}
	if l := do(t, m, "GET", "/v1/customers?search=org", b, nil); l["total"].(float64) != 0 || len(l["customers"].([]any)) != 0 {
		t.Errorf("tenant b lists: %v", l)
	}
	if got := do(t, m, "GET", "/v1/customers/"+id, a, nil); got["name"] != "" || got["metadata"].(map[string]any)["secret"] != "s3" {
		t.Errorf("a's customer after b's attempts: %v", got)
	}
	if k := do(t, m, "GET", "/v1/keys/"+bKey["id"].(string), b, nil); k["customer_id"] != nil {
		t.Errorf("b's key after the attempts: %v", k)
	}
}

// A check with a key of a customer names the customer, and follows the
// customer's changes (a new external id) and the key's (detached).
func TestCheckNamesTheCustomer(t *testing.T) {
	m := bootWith(t, nil)
	sk := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "shop", "owner_email": "o@shop.test", "owner_password": "a long passphrase"})["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"pro": map[string]any{"algorithm": "fixed_window", "limit": 100, "period": "1m"}}})
	cus := do(t, m, "POST", "/v1/customers", sk, map[string]any{"external_id": "org_42", "name": "Acme", "tier": "pro"})
	id := cus["id"].(string)
	key := do(t, m, "POST", "/v1/keys", sk, map[string]any{"name": "app", "tier": "pro", "customer_id": id})
	check := func() map[string]any {
		return do(t, m, "POST", "/v1/check", sk, map[string]any{"api_key": key["key"], "path": "/api/x"})
	}
	customer := func(a map[string]any) any { return a["customer"] }
	if c, _ := customer(check()).(map[string]any); c["id"] != id || c["external_id"] != "org_42" {
		t.Fatalf("check of a customer's key: %v", c)
	}
	do(t, m, "PATCH", "/v1/customers/"+id, sk, map[string]any{"external_id": "org_42b"})
	if c, _ := customer(check()).(map[string]any); c["external_id"] != "org_42b" {
		t.Fatalf("after the external id changed: %v", c)
	}
	keys := do(t, m, "GET", "/v1/customers/"+id+"/keys", sk, nil)
	if ks := keys["keys"].([]any); len(ks) != 1 || ks[0].(map[string]any)["id"] != key["id"] {
		t.Fatalf("the customer's keys: %v", keys)
	}
	do(t, m, "PATCH", "/v1/keys/"+key["id"].(string), sk, map[string]any{"customer_id": nil})
	if c := customer(check()); c != nil {
		t.Fatalf("a detached key's check names a customer: %v", c)
	}
	if status, _ := call(t, m, "DELETE", "/v1/customers/"+id, sk, ""); status != http.StatusNoContent {
		t.Fatalf("delete of a customer without keys: %d", status)
	}
}

// The Go SDK manages customers, attaches and detaches keys, and reads the
// customer a check names.
func TestSDKCustomers(t *testing.T) {
	m := boot(t)
	ctx := context.Background()
	c, _, _ := sdkTenant(t, m, "sdkcus", sdk.WithTimeout(2*time.Second))
	if _, err := c.CreatePolicy(ctx, sdk.Policy{Name: "api", Path: "/api/*", Tiers: map[string]sdk.Limits{"pro": {{Algorithm: "fixed_window", Limit: 10, Period: "1m"}}}}); err != nil {
		t.Fatal(err)
	}
	cu, err := c.CreateCustomer(ctx, sdk.NewCustomer{ExternalID: "org_42", Name: "Acme", Tier: "pro", BillingAnchor: 17, Metadata: map[string]string{"crm": "1"}})
	if err != nil || cu.ID == "" || cu.BillingAnchor != 17 {
		t.Fatalf("create: %+v %v", cu, err)
	}
	if _, err := c.CreateCustomer(ctx, sdk.NewCustomer{ExternalID: "org_42", Tier: "pro"}); !isStatus(err, http.StatusConflict) {
		t.Fatalf("a duplicate external id: %v", err)
	}
	k, err := c.CreateKey(ctx, sdk.NewKey{Name: "app", Tier: "pro", CustomerID: cu.ID})
	if err != nil || k.CustomerID != cu.ID {
		t.Fatalf("key with a customer: %+v %v", k, err)
	}
	d, err := c.Check(ctx, sdk.CheckRequest{APIKey: k.Secret, Path: "/api/x"})
	if err != nil || d.Customer != (sdk.CustomerRef{ID: cu.ID, ExternalID: "org_42"}) {
		t.Fatalf("check: %+v %v", d, err)
	}
	page, err := c.ListCustomers(ctx, sdk.CustomerQuery{Search: "ACME", Limit: 10})
	if err != nil || page.Matched != 1 || page.Customers[0].ID != cu.ID {
		t.Fatalf("list: %+v %v", page, err)
	}
	name := "Acme Inc."
	if up, err := c.UpdateCustomer(ctx, cu.ID, sdk.CustomerUpdate{Name: &name, Metadata: &map[string]string{}}); err != nil || up.Name != name || len(up.Metadata) != 0 {
		t.Fatalf("update: %+v %v", up, err)
	}
	if err := c.DeleteCustomer(ctx, cu.ID); !isStatus(err, http.StatusConflict) {
		t.Fatalf("delete with a key: %v", err)
	}
	none := ""
	if k2, err := c.UpdateKey(ctx, k.ID, sdk.KeyUpdate{CustomerID: &none}); err != nil || k2.CustomerID != "" {
		t.Fatalf("detach: %+v %v", k2, err)
	}
	if err := c.DeleteCustomer(ctx, cu.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetCustomer(ctx, cu.ID); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var e *sdk.Error
	return errors.As(err, &e) && e.Status == status
}

// A JWT issuer's customer claim names the caller's customer in the
// answer, by the customer's external id.
func TestJWTCallerNamesCustomer(t *testing.T) {
	m := bootWith(t, nil)
	sk := do(t, m, "POST", "/v1/admin/tenants", testToken, map[string]any{"name": "idp", "owner_email": "o@idp.test", "owner_password": "a long passphrase"})["service_key"].(string)
	do(t, m, "POST", "/v1/policies", sk, map[string]any{"name": "api", "path": "/api/*",
		"tiers": map[string]any{"default": map[string]any{"algorithm": "fixed_window", "limit": 10, "period": "1m"}}})
	key, set := ecJWKS(t, "k1")
	do(t, m, "POST", "/v1/jwt/issuers", sk, map[string]any{"issuer": "https://id.idp.test/", "jwks": json.RawMessage(set), "algorithms": []string{"ES256"},
		"claims": map[string]string{"customer": "org_id"}})
	cus := do(t, m, "POST", "/v1/customers", sk, map[string]any{"external_id": "org_42", "tier": "pro"})
	tok := signES256(t, key, "k1", map[string]any{"iss": "https://id.idp.test/", "sub": "alice", "org_id": "org_42", "exp": time.Now().Add(time.Hour).Unix()})
	a := do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": tok, "path": "/api/x"})
	if c, _ := a["customer"].(map[string]any); a["allowed"] != true || c["id"] != cus["id"] || c["external_id"] != "org_42" {
		t.Fatalf("a token naming org_42: %v", a)
	}
	other := signES256(t, key, "k1", map[string]any{"iss": "https://id.idp.test/", "sub": "bob", "org_id": "org_nope", "exp": time.Now().Add(time.Hour).Unix()})
	if a := do(t, m, "POST", "/v1/check", sk, map[string]any{"jwt": other, "path": "/api/x"}); a["allowed"] != true || a["customer"] != nil {
		t.Fatalf("a token naming no customer: %v", a)
	}
}
