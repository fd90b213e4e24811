package bus

import "strings"

// Bucket keys.
//
// A bucket key names one caller's bucket under one policy of one tenant:
// "<tenant id>/<policy id>/<kind>:<id>", the kind "ip", "key" or "jwt" (a
// verified token's subject). Tenant and policy ids hold no '/'
// (a descriptor domain's override view is the exception the parsers
// tolerate: its id only ever meets them for its tenant and its policy's
// consistency, and no override view is "local"); the kind holds no ':'; the
// id may hold anything (an IPv6 address holds ':', a descriptor's counter
// '/' and ':'). The key decides the bucket's partition (Partition) and so
// its owner, names its row in the worker's database and its entry in the
// hot cache: every process must build it the same way, here.

// AppendBucketKey appends to dst the key of caller kind:id's bucket under
// policy policyID of tenant tenantID.
func AppendBucketKey(dst []byte, tenantID, policyID, kind, id string) []byte {
	dst = append(dst, tenantID...)
	dst = append(dst, '/')
	dst = append(dst, policyID...)
	dst = append(dst, '/')
	dst = append(dst, kind...)
	dst = append(dst, ':')
	return append(dst, id...)
}

// BucketKey is AppendBucketKey's key as a string.
func BucketKey(tenantID, policyID, kind, id string) string {
	return tenantID + "/" + policyID + "/" + kind + ":" + id
}

// SplitBucketKey returns a bucket key's tenant id, policy id and caller
// ("kind:id"); ok is false when key does not have the three parts.
func SplitBucketKey(key string) (tenantID, policyID, caller string, ok bool) {
	tenantID, rest, ok1 := strings.Cut(key, "/")
	policyID, caller, ok2 := strings.Cut(rest, "/")
	return tenantID, policyID, caller, ok1 && ok2
}

// SplitCaller splits a bucket key's caller part into its kind and id.
func SplitCaller(caller string) (kind, id string, ok bool) {
	return strings.Cut(caller, ":")
}
