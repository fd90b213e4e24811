package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/tenants"
	"github.com/sluicehq/sluice/sdk"
)

// jsonFields lists a struct's JSON field names, recursing into the element
// types of slices and maps (a tier's limits).
func jsonFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		out = append(out, jsonFields(f.Type, prefix+name+".")...)
	}
	slices.Sort(out)
	return out
}

// The SDK keeps its own copy of the policy a client writes; it must name
// the same fields as the API reads (tenants.PolicyBody), the id Sluice sets
// aside, and a policy must survive the trip from one to the other.
func TestSDKPolicyIsTheAPIs(t *testing.T) {
	api := jsonFields(reflect.TypeFor[tenants.PolicyBody](), "")
	client := slices.DeleteFunc(jsonFields(reflect.TypeFor[sdk.Policy](), ""), func(f string) bool { return f == "id" })
	if !slices.Equal(api, client) {
		t.Fatalf("fields the API reads:   %v\nfields the SDK writes: %v", api, client)
	}
	want := sdk.Policy{
		Name: "search", Method: "GET", Path: "/search/:q", Query: map[string]string{"format": "json"},
		Consistency: "local", Shadow: true, UnlistedTiers: "deny",
		Tiers: map[string]sdk.Limits{
			"free": {{Algorithm: "token_bucket", Limit: 10, Period: "1m", Burst: 20}},
			"pro":  {{Name: "minute", Algorithm: "sliding_window", Limit: 100, Period: "1m"}, {Name: "day", Algorithm: "fixed_window", Limit: 5000, Period: "1d"}},
		},
	}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var body tenants.PolicyBody
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(tenants.BodyOf(body.Policy()))
	if err != nil {
		t.Fatal(err)
	}
	var got sdk.Policy
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("through the API's shape:\n%+v\nwant\n%+v", got, want)
	}
}
