package bus

import (
	"strings"
	"testing"
)

// A bucket key is built the same way as a string and appended, and splits
// back into its parts, whatever its id holds.
func TestBucketKeyRoundTrip(t *testing.T) {
	for _, c := range []struct{ tenant, policy, kind, id string }{
		{"ten_a", "pol_1", "ip", "203.0.113.7"},
		{"ten_a", "pol_1", "ip", "2001:db8::1"},
		{"ten_b", "pol_2", "key", "key_abc"},
		{"ten_c", "pol_3", "d", "edge_path_/api/v1:x_"},
		{"ten_d", "pol_4", "anon", ""},
	} {
		s := BucketKey(c.tenant, c.policy, c.kind, c.id)
		if b := string(AppendBucketKey([]byte("x"), c.tenant, c.policy, c.kind, c.id)); b != "x"+s {
			t.Fatalf("appended %q, string %q", b, s)
		}
		tenant, policy, caller, ok := SplitBucketKey(s)
		if !ok || tenant != c.tenant || policy != c.policy {
			t.Fatalf("SplitBucketKey(%q) = %q, %q, %q, %v", s, tenant, policy, caller, ok)
		}
		kind, id, ok := SplitCaller(caller)
		if !ok || kind != c.kind || id != c.id {
			t.Fatalf("SplitCaller(%q) = %q, %q, %v", caller, kind, id, ok)
		}
	}
	for _, bad := range []string{"", "ten_a", "ten_a/pol_1"} {
		if _, _, _, ok := SplitBucketKey(bad); ok {
			t.Fatalf("SplitBucketKey(%q) ok", bad)
		}
	}
}

// A customer's buckets, its customer-level bucket and its callers' own
// placed buckets under any policy, share the customer's partition; another
// customer of the same id in another tenant is placed by its own tenant.
func TestCustomerPlacement(t *testing.T) {
	cus := "cus_4f2Qx"
	want := CustomerPartition("ten_a", cus)
	keys := []string{
		string(AppendCustomerBucketKey(nil, "ten_a", "pol_1", cus)),
		string(AppendCustomerBucketKey(nil, "ten_a", "pol_2", cus)),
		string(AppendPlacedBucketKey(nil, "ten_a", "pol_1", "key", cus, "key_1")),
		string(AppendPlacedBucketKey(nil, "ten_a", "pol_1", "key", cus, "key_2")),
		string(AppendPlacedBucketKey(nil, "ten_a", "pol_9", "jwt", cus, "alice@example.com")),
	}
	for _, k := range keys {
		if p := Partition([]byte(k)); p != want {
			t.Fatalf("Partition(%q) = %d, customer's %d", k, p, want)
		}
		_, _, caller, ok := SplitBucketKey(k)
		if KeyCustomer([]byte(k)) != cus {
			t.Fatalf("KeyCustomer(%q) = %q", k, KeyCustomer([]byte(k)))
		}
		if !ok || CallerCustomer(caller) != cus {
			t.Fatalf("CallerCustomer of %q = %q", k, CallerCustomer(caller))
		}
	}
	k := string(AppendPlacedBucketKey([]byte("x"), "ten_a", "pol_1", "key", cus, "key_1"))
	if k != "xten_a/pol_1/key@cus_4f2Qx:key_1" {
		t.Fatalf("placed key %q", k)
	}
	_, _, caller, _ := SplitBucketKey(k[1:])
	if kind, id, ok := SplitCaller(caller); !ok || kind != "key" || id != "key_1" {
		t.Fatalf("SplitCaller(%q) = %q, %q, %v", caller, kind, id, ok)
	}
	// Over many customers, the partitions spread, and the tenant counts.
	seen, differ := map[int]bool{}, 0
	for i := range 1000 {
		c := "cus_" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		seen[CustomerPartition("ten_a", c)] = true
		if CustomerPartition("ten_a", c) != CustomerPartition("ten_b", c) {
			differ++
		}
	}
	if len(seen) != Partitions || differ < 900 {
		t.Fatalf("%d partitions of %d seen, %d of 1000 differ across tenants", len(seen), Partitions, differ)
	}
}

// Keys that are in neither customer form keep the partition of all their
// bytes, whatever their ids hold: plain callers, a customer's name inside
// an id, an override view's policy id (which holds ':').
func TestPlainKeysKeepTheirPartition(t *testing.T) {
	for _, k := range []string{
		"ten_a/pol_1/key:key_1",
		"ten_a/pol_1/ip:2001:db8::1",
		"ten_a/pol_1/jwt:alice@example.com",
		"ten_a/pol_1/descriptor:a/customer:b",
		"ten_a/pol_1/descriptor:x@y:z",
		"ten_a/rls-override:a/customer:cus_1/descriptor:k",
		"ten_a/rls-override:a/key@cus_1:k",
		"ten_a/pol_1",
		"customer:cus_1",
		"",
	} {
		if p, plain := Partition([]byte(k)), int(fnv1a(2166136261, []byte(k))%Partitions); p != plain {
			t.Fatalf("Partition(%q) = %d, its bytes' %d", k, p, plain)
		}
		if c := KeyCustomer([]byte(k)); c != "" {
			t.Fatalf("KeyCustomer(%q) = %q", k, c)
		}
	}
}

func TestValidCustomerID(t *testing.T) {
	for id, want := range map[string]bool{"cus_abc": true, "": false, "cus/a": false, "cus:a": false, "cus@a": false, strings.Repeat("c", 65): false} {
		if ValidCustomerID(id) != want {
			t.Fatalf("ValidCustomerID(%q) = %v", id, !want)
		}
	}
}
