package bus

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// BucketsRequest asks the worker (on BucketsSubject) for one page of
// persisted buckets after a key: a server hydrating its hot cache, loading
// a partition it takes over, or loading the buckets its checks touch
// before its hydration reaches them. Servers send it and the worker reads
// it, so it is defined once here.
//
// The tags are what servers and workers have sent and read since the
// request was defined twice: a server leaves After out when it is empty,
// and always sets Packed, so both omitempty choices decode the same.
type BucketsRequest struct {
	After string `json:"after,omitempty"`
	Limit int    `json:"limit"`
	// Partition, when set, limits the page to one cluster partition.
	Partition *int `json:"partition,omitempty"`
	// Keys, when set, asks for these buckets only; After and Partition
	// are ignored. The worker refuses more than 1000.
	Keys []string `json:"keys,omitempty"`
	// Packed asks for the page in the packed form (WalkPacked) instead of
	// a list of BucketRecord.
	Packed bool `json:"packed,omitempty"`
	// Order is OrderPartitionKey from servers that page in the table's
	// order; older servers leave it empty and are answered in key order,
	// which costs the worker a sort of the table per page (logged).
	Order string `json:"order,omitempty"`
	// Acquire, on the first page of a Partition, raises the partition's
	// term (the worker's fencing token for it) once the backlog is
	// committed, before the page is read, for the lease write Lease; the
	// page answers the new term.
	Acquire bool    `json:"acquire,omitempty"`
	Lease   LeaseID `json:"lease,omitzero"`
}

// BucketsPage is one page of persisted buckets, the worker's answer to a
// BucketsRequest; Next is empty on the last.
// A packed page has its buckets in Packed (WalkPacked), not Buckets.
type BucketsPage struct {
	Buckets []BucketRecord `json:"buckets"`
	Packed  []byte         `json:"packed,omitempty"`
	Next    string         `json:"next,omitempty"`
	// Order is the page's order (OrderPartitionKey, or empty for key
	// order).
	Order string `json:"order,omitempty"`
	// Term is the partition's new term, on a page that acquired it.
	Term uint64 `json:"term,omitempty"`
}

// RawReply sends a packed page raw, its Next in a header (RawReply).
func (p BucketsPage) RawReply() ([]byte, nats.Header, bool) {
	if len(p.Packed) == 0 {
		return nil, nil, false
	}
	h := nats.Header{PageNextHeader: []string{p.Next}}
	if p.Order != "" {
		h.Set(PageOrderHeader, p.Order)
	}
	if p.Term != 0 {
		h.Set(PageTermHeader, strconv.FormatUint(p.Term, 10))
	}
	return p.Packed, h, true
}

// SetRaw takes a packed page sent raw (RawReceiver).
func (p *BucketsPage) SetRaw(data []byte, h nats.Header) error {
	p.Packed, p.Next, p.Order = data, h.Get(PageNextHeader), h.Get(PageOrderHeader)
	return ParsePageTerm(h, &p.Term)
}
