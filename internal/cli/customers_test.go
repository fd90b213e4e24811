package cli

import (
	"regexp"
	"strings"
	"testing"
)

// Customers are created, listed (searched) and deleted, a key joins one at
// creation, and a customer holding a key is not deleted.
func TestCustomersVerbs(t *testing.T) {
	env := tenant(t, "customersverbs")
	r := sluice(t, env, "", "customers", "create", "--external-id", "org_42", "--name", "Acme", "--tier", "pro")
	id := regexp.MustCompile(`cus_[A-Za-z0-9]+`).FindString(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("customers create: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	sluice(t, env, "", "customers", "create", "--external-id", "org_43", "--tier", "free")
	r = sluice(t, env, "", "customers", "--search", "ACME")
	if r.code != 0 || !has(r.stdout, id) || !has(r.stdout, "org_42") || strings.Contains(r.stdout, "org_43") {
		t.Fatalf("customers list --search: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = sluice(t, env, "", "customers", "create", "--external-id", "org_42", "--tier", "pro")
	if r.code != ExitError || !has(r.stderr, "409") || !has(r.stderr, "external_id") {
		t.Fatalf("a duplicate external id: %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, env, "", "keys", "create", "--name", "app", "--tier", "pro", "--customer", id)
	if r.code != 0 {
		t.Fatalf("keys create --customer: %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, env, "", "keys", "create", "--name", "app", "--tier", "pro", "--customer", "cus_nope")
	if r.code != ExitError || !has(r.stderr, "404") || !has(r.stderr, "customer_id") {
		t.Fatalf("keys create --customer of no customer: %d\n%s", r.code, r.stderr)
	}
	r = sluice(t, env, "", "customers", "delete", id)
	if r.code != ExitError || !has(r.stderr, "409") {
		t.Fatalf("delete of a customer with a key: %d\n%s", r.code, r.stderr)
	}
	if r = sluice(t, env, "", "customers", "create", "--tier", "pro"); r.code != ExitUsage {
		t.Fatalf("create without --external-id: %d", r.code)
	}
}

// A limits file attaches a key to a customer, and an export names it.
func TestApplyAttachesAKeyToACustomer(t *testing.T) {
	env := tenant(t, "customersfile")
	r := sluice(t, env, "", "customers", "create", "--external-id", "org_42", "--tier", "pro")
	cus := regexp.MustCompile(`cus_[A-Za-z0-9]+`).FindString(r.stdout)
	r = sluice(t, env, "", "keys", "create", "--name", "app", "--tier", "pro")
	key := regexp.MustCompile(`ckey_[A-Za-z0-9]+`).FindString(r.stderr)
	file := write(t, "limits.yaml", limitsYAML+"keys:\n  - {id: "+key+", customer: "+cus+"}\n")
	if r = sluice(t, env, "", "apply", "-f", file); r.code != 0 || !has(r.stdout, "customer") {
		t.Fatalf("apply: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sluice(t, env, "", "apply", "-f", file, "--exit-code"); r.code != 0 {
		t.Fatalf("apply again changes something: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = sluice(t, env, "", "export"); r.code != 0 || !has(r.stdout, "customer: "+cus) {
		t.Fatalf("export: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bad := write(t, "bad.yaml", limitsYAML+"keys:\n  - {id: "+key+", customer: cus_nope}\n")
	if r = sluice(t, env, "", "apply", "-f", bad); r.code != ExitError || !has(r.stderr, "customer_id") {
		t.Fatalf("apply with an unknown customer: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
