package bus

import (
	"bytes"
	"strings"
)

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
//
// Customer placement. A customer's buckets live in one partition, derived
// from the tenant and the customer alone, so that one owner decides every
// level of a check together: the customer-level bucket
// "<tenant>/<policy>/customer:<customer id>" (AppendCustomerBucketKey) and
// a customer's caller's own bucket, whose kind carries its customer:
// "<tenant>/<policy>/<kind>@<customer id>:<id>" (AppendPlacedBucketKey).
// A kind holds no '@'; a customer id holds no '/', ':' or '@'. Partition
// places both forms by CustomerPartition; a key whose policy id holds ':'
// (a descriptor domain's override view) is never read as either form.
// SplitCaller answers a placed caller's plain kind, CallerCustomer its
// customer.

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

// SplitCaller splits a bucket key's caller part into its kind and id; a
// placed caller's kind is answered without its customer (CallerCustomer).
func SplitCaller(caller string) (kind, id string, ok bool) {
	kind, id, ok = strings.Cut(caller, ":")
	if k, _, placed := strings.Cut(kind, "@"); placed {
		kind = k
	}
	return kind, id, ok
}

// KindCustomer is the caller kind of a customer-level bucket: one bucket
// shared by all of a customer's callers.
const KindCustomer = "customer"

// AppendCustomerBucketKey appends to dst the key of customer customerID's
// customer-level bucket under policy policyID of tenant tenantID.
func AppendCustomerBucketKey(dst []byte, tenantID, policyID, customerID string) []byte {
	return AppendBucketKey(dst, tenantID, policyID, KindCustomer, customerID)
}

// AppendPlacedBucketKey appends to dst the key of caller kind:id's own
// bucket under policy policyID of tenant tenantID, placed in its customer
// customerID's partition.
func AppendPlacedBucketKey(dst []byte, tenantID, policyID, kind, customerID, id string) []byte {
	dst = append(dst, tenantID...)
	dst = append(dst, '/')
	dst = append(dst, policyID...)
	dst = append(dst, '/')
	dst = append(dst, kind...)
	dst = append(dst, '@')
	dst = append(dst, customerID...)
	dst = append(dst, ':')
	return append(dst, id...)
}

// ValidCustomerID reports whether id can name a customer in a bucket key:
// not empty, at most 64 bytes, none of '/', ':' or '@'.
func ValidCustomerID(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsAny(id, "/:@")
}

// CallerCustomer returns the customer a bucket key's caller part is placed
// with ("" for a caller that is not): a customer-level bucket's customer,
// or a placed caller's.
func CallerCustomer(caller string) string {
	kind, id, ok := strings.Cut(caller, ":")
	if !ok {
		return ""
	}
	if kind == KindCustomer {
		return id
	}
	if _, cus, ok := strings.Cut(kind, "@"); ok {
		return cus
	}
	return ""
}

// KeyCustomer returns the customer a bucket key is placed with, "" for a
// key in neither customer form (Partition's reading).
func KeyCustomer(key []byte) string {
	if _, customer, ok := customerPlacement(key); ok {
		return string(customer)
	}
	return ""
}

// customerPlacement returns the tenant and customer whose partition key is
// placed in, if it is in either customer form.
func customerPlacement(key []byte) (tenant, customer []byte, ok bool) {
	i := bytes.IndexByte(key, '/')
	if i < 0 {
		return nil, nil, false
	}
	rest := key[i+1:]
	j := bytes.IndexByte(rest, '/')
	if j < 0 || bytes.IndexByte(rest[:j], ':') >= 0 {
		return nil, nil, false
	}
	caller := rest[j+1:]
	c := bytes.IndexByte(caller, ':')
	if c < 0 {
		return nil, nil, false
	}
	kind := caller[:c]
	if string(kind) == KindCustomer {
		return key[:i], caller[c+1:], true
	}
	if a := bytes.IndexByte(kind, '@'); a >= 0 && bytes.IndexByte(kind, '/') < 0 {
		return key[:i], kind[a+1:], true
	}
	return nil, nil, false
}
