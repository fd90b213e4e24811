package bus

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The requests servers send encode as they did when the engine and the
// worker each had their own definition, and decode into what the worker
// read then: a server and a worker of either side of that change agree.
func TestBucketsRequestWire(t *testing.T) {
	p := 3
	for _, tc := range []struct {
		name string
		req  BucketsRequest
		wire string // what the engine's own definition sent
	}{
		{"first page", BucketsRequest{Limit: 20000, Packed: true, Order: OrderPartitionKey},
			`{"limit":20000,"packed":true,"order":"part,key"}`},
		{"next page", BucketsRequest{After: "ten_a/pol_1/ip:192.0.2.1", Limit: 20000, Packed: true, Order: OrderPartitionKey},
			`{"after":"ten_a/pol_1/ip:192.0.2.1","limit":20000,"packed":true,"order":"part,key"}`},
		{"first touch", BucketsRequest{Keys: []string{"ten_a/pol_1/ip:192.0.2.1"}, Limit: 1, Packed: true},
			`{"limit":1,"keys":["ten_a/pol_1/ip:192.0.2.1"],"packed":true}`},
		{"partition taken over", BucketsRequest{Limit: 20000, Partition: &p, Packed: true, Acquire: true, Lease: LeaseID{Incarnation: 7, Revision: 42}},
			`{"limit":20000,"partition":3,"packed":true,"acquire":true,"lease":{"inc":7,"rev":42}}`},
	} {
		data, err := json.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != tc.wire {
			t.Errorf("%s: sent %s, want %s", tc.name, data, tc.wire)
		}
		var got BucketsRequest
		if err := json.Unmarshal([]byte(tc.wire), &got); err != nil || !reflect.DeepEqual(got, tc.req) {
			t.Errorf("%s: read %+v (%v), want %+v", tc.name, got, err, tc.req)
		}
	}
	// The worker's own definition wrote "after" and "packed" even when
	// empty; such a request reads the same.
	var got BucketsRequest
	if err := json.Unmarshal([]byte(`{"after":"","limit":5,"packed":false}`), &got); err != nil || !reflect.DeepEqual(got, BucketsRequest{Limit: 5}) {
		t.Errorf("empty fields written out: read %+v (%v)", got, err)
	}
}
