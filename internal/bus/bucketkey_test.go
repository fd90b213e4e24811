package bus

import "testing"

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
