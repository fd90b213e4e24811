package bus

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
