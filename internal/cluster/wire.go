package cluster

// The binary frames of direct forwarding (direct.go). A frame is a 4-byte
// big-endian body length, then the body:
//
//	request:  type(1) id(uvarint) count(uvarint) item*
//	item:     key tenant policy tier key_id (uvarint length + bytes each)
//	          cost(varint) flags(1) now(varint) [since(varint)]
//	flags:    bit 0 consume, bit 1 settle (since follows), bit 2 id,
//	          bit 3 ref, bit 4 units, bit 5 count, bit 6 lease (token and
//	          expiry follow, varint each), bit 7 release (of the lease);
//	          bits 6 and 7 only to listeners that announce leases
//	response: type(2) id(uvarint) count(uvarint) result*
//	result:   status(uvarint) allowed(1) report(varint) n(uvarint) outcome*n
//	          (status bit 8: the owner counted the item's units; set only
//	          for items that asked, which older senders never do)
//	outcome:  allowed(1) limit remaining reset retry_after (varint each)
//
// Decoding checks every length against what is left and against fixed
// bounds before it allocates, so a hostile or corrupt frame is an error,
// never a panic or a large allocation.

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/bus"
	"github.com/sluicehq/sluice/internal/quota"
)

const (
	frameRequest  = 1
	frameResponse = 2

	// maxFrame bounds a frame's body. A full batch of maxBatch items with
	// keys of a few hundred bytes stays far below it; a batch that would not
	// fit goes over NATS instead.
	maxFrame = 1 << 20
	// maxString bounds one string of an item (bucket keys, ids).
	maxString = 4096
	// maxOutcomes bounds a result's outcomes (the engine's MaxLimits is 10).
	maxOutcomes = 64
)

var errMalformed = errors.New("malformed frame")

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// appendRequest appends a whole request frame, length prefix included,
// with the items' ids.
func appendRequest(b []byte, id uint64, items []Item) []byte {
	return appendRequestTo(b, id, items, true, true)
}

// appendRequestFor appends a request frame; without ids, for an owner
// that does not read them, the items' ids are left out.
func appendRequestFor(b []byte, id uint64, items []Item, ids bool) []byte {
	return appendRequestTo(b, id, items, ids, ids)
}

// appendRequestTo appends a request frame for an owner that reads ids or
// leases or neither. Without leases, an item's lease and release are left
// out: such an owner has no concurrency limit to take them from.
func appendRequestTo(b []byte, id uint64, items []Item, ids, leases bool) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, frameRequest)
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for i := range items {
		it := &items[i]
		b = bus.AppendBytes(b, it.Key)
		b = bus.AppendBytes(b, it.Tenant)
		b = bus.AppendBytes(b, it.Policy)
		b = bus.AppendBytes(b, it.Tier)
		b = bus.AppendBytes(b, it.KeyID)
		b = binary.AppendVarint(b, it.Cost)
		var flags byte
		if it.Consume {
			flags |= flagConsume
		}
		if it.Settle {
			flags |= flagSettle
		}
		withID, withRef := ids && it.ID != 0, ids && it.Ref != ""
		if withID {
			flags |= flagID
		}
		if withRef {
			flags |= flagRef
		}
		if ids && it.Units {
			flags |= flagUnits
		}
		if ids && it.Count {
			flags |= flagCount
		}
		withLease := leases && it.Lease != 0
		if withLease {
			flags |= flagLease
			if it.Release {
				flags |= flagRelease
			}
		}
		b = append(b, flags)
		b = binary.AppendVarint(b, it.Now)
		if it.Settle {
			b = binary.AppendVarint(b, it.Since)
		}
		if withID {
			b = binary.AppendUvarint(b, it.ID)
		}
		if withRef {
			b = bus.AppendBytes(b, it.Ref)
		}
		if withLease {
			b = binary.AppendVarint(b, it.Lease)
			b = binary.AppendVarint(b, it.LeaseExp)
		}
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// appendResponse appends a whole response frame, length prefix included.
func appendResponse(b []byte, id uint64, res []Result) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0, frameResponse)
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, uint64(len(res)))
	for i := range res {
		r := &res[i]
		st := uint64(r.Status)
		if r.Counted {
			st |= statusCounted
		}
		b = binary.AppendUvarint(b, st)
		b = appendBool(b, r.Allowed)
		b = binary.AppendVarint(b, int64(r.Report))
		b = binary.AppendUvarint(b, uint64(len(r.Outcomes)))
		for _, o := range r.Outcomes {
			b = appendBool(b, o.Allowed)
			b = binary.AppendVarint(b, o.Limit)
			b = binary.AppendVarint(b, o.Remaining)
			b = binary.AppendVarint(b, int64(o.Reset))
			b = binary.AppendVarint(b, int64(o.RetryAfter))
		}
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

// decoder reads a frame body; the first error sticks and later reads
// return zero values.
type decoder struct{ bus.VarintReader }

// Item flags.
const (
	flagConsume = 1 << 0
	flagSettle  = 1 << 1
	flagID      = 1 << 2
	flagRef     = 1 << 3
	flagUnits   = 1 << 4
	flagCount   = 1 << 5
	flagLease   = 1 << 6
	flagRelease = 1 << 7

	// statusCounted marks a result's status: Result.Counted.
	statusCounted = 1 << 8
)

func (d *decoder) byte() byte {
	if d.Bad || len(d.B) == 0 {
		d.Bad = true
		return 0
	}
	v := d.B[0]
	d.B = d.B[1:]
	return v
}

func (d *decoder) bool() bool {
	if d.Bad || len(d.B) == 0 {
		d.Bad = true
		return false
	}
	v := d.B[0]
	d.B = d.B[1:]
	if v > 1 {
		d.Bad = true
	}
	return v == 1
}

func (d *decoder) string() string { return string(d.Bytes(maxString)) }

// count reads an element count, refusing one above limit or above what
// the rest of the body could hold at minSize bytes an element.
func (d *decoder) count(limit, minSize int) int {
	n := d.Uvarint()
	if d.Bad || n > uint64(limit) || n*uint64(minSize) > uint64(len(d.B)) {
		d.Bad = true
		return 0
	}
	return int(n)
}

func (d *decoder) header(typ byte) uint64 {
	if len(d.B) == 0 || d.B[0] != typ {
		d.Bad = true
		return 0
	}
	d.B = d.B[1:]
	return d.Uvarint()
}

// decodeRequest reads a request body (without its length prefix). The
// items own their strings: body may be reused at once.
func decodeRequest(body []byte) (uint64, []Item, error) {
	d := decoder{bus.VarintReader{B: body}}
	id := d.header(frameRequest)
	// An item takes at least 5 one-byte lengths, a cost, a flag and a time.
	n := d.count(maxBatch, 8)
	if d.Bad {
		return 0, nil, errMalformed
	}
	items := make([]Item, n)
	for i := range items {
		it := &items[i]
		it.Key = d.string()
		it.Tenant = d.string()
		it.Policy = d.string()
		it.Tier = d.string()
		it.KeyID = d.string()
		it.Cost = d.Varint()
		flags := d.byte()
		if flags&flagRelease != 0 && flags&flagLease == 0 {
			d.Bad = true
		}
		it.Consume, it.Settle, it.Units, it.Count = flags&flagConsume != 0, flags&flagSettle != 0, flags&flagUnits != 0, flags&flagCount != 0
		it.Now = d.Varint()
		if it.Settle {
			it.Since = d.Varint()
		}
		if flags&flagID != 0 {
			if it.ID = d.Uvarint(); it.ID == 0 {
				d.Bad = true
			}
		}
		if flags&flagRef != 0 {
			if it.Ref = d.string(); it.Ref == "" {
				d.Bad = true
			}
		}
		if flags&flagLease != 0 {
			it.Release = flags&flagRelease != 0
			if it.Lease, it.LeaseExp = d.Varint(), d.Varint(); it.Lease == 0 {
				d.Bad = true
			}
		}
	}
	if d.Bad || len(d.B) != 0 {
		return 0, nil, errMalformed
	}
	return id, items, nil
}

// decodeResponse reads a response body (without its length prefix).
func decodeResponse(body []byte) (uint64, []Result, error) {
	d := decoder{bus.VarintReader{B: body}}
	id := d.header(frameResponse)
	n := d.count(maxBatch, 4)
	if d.Bad {
		return 0, nil, errMalformed
	}
	res := make([]Result, n)
	for i := range res {
		r := &res[i]
		st := d.Uvarint()
		if st&^statusCounted > 255 {
			d.Bad = true
		}
		r.Status, r.Counted = int(st&^statusCounted), st&statusCounted != 0
		r.Allowed = d.bool()
		r.Report = int(d.Varint())
		if k := d.count(maxOutcomes, 5); k > 0 {
			r.Outcomes = make([]quota.Outcome, k)
			for j := range r.Outcomes {
				o := &r.Outcomes[j]
				o.Allowed = d.bool()
				o.Limit = d.Varint()
				o.Remaining = d.Varint()
				o.Reset = time.Duration(d.Varint())
				o.RetryAfter = time.Duration(d.Varint())
			}
		}
		if d.Bad {
			return 0, nil, errMalformed
		}
	}
	if d.Bad || len(d.B) != 0 {
		return 0, nil, errMalformed
	}
	return id, res, nil
}
