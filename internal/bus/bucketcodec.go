package bus

// A compact binary form of one bucket's limits and states, used where
// millions of buckets pass at once: the worker stores it in buckets.state,
// and hydration pages carry it, packed, from the worker's SQLite file to a
// server's hot cache without a JSON round trip per bucket.
//
//	state  = 0x01 uvarint(#limits) limit* uvarint(#states) st*
//	limit  = str(name) str(algorithm) varint(limit) varint(period ns) varint(burst)
//	st     = f64(tokens) f64(prev) varint(at) uvarint(#log) varint(log entry)*
//	str    = uvarint(len) bytes
//	f64    = 8 bytes, IEEE 754 bits, little endian
//
// The leading 0x01 is the format's version; rows written before it hold
// JSON ({"limits":…,"states":…}), which starts with '{', and are still read.
//
// A packed page is a sequence of records:
//
//	record = str(key) str(tenant id) varint(full_at ns) str(state)
//
// A packed state batch is a state stream message in the same records:
//
//	batch  = 0xB1 uvarint(wire version) str(node) record*
//
// and a fenced one carries each record's partition term after it:
//
//	batch  = 0xB2 uvarint(wire version) str(node) (record uvarint(term))*
//
// Their first byte is never JSON's '{', so a worker tells the forms apart
// by it. Servers publish one only to workers that name its format
// (PackedStateFormat, FencedStateFormat) in their version reply: an older
// worker would drop it.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice/internal/quota"
)

const stateFormatV1 = 0x01

// PackedStateFormat names the packed state batch in Version.StateFormats.
const PackedStateFormat = "packed1"

// FencedStateFormat names the packed state batch whose records carry their
// partition term (BucketRecord.Term) in Version.StateFormats.
const FencedStateFormat = "packed2"

const (
	packedBatchMagic = 0xB1
	fencedBatchMagic = 0xB2
)

var errShortState = errors.New("bucket state: truncated")

// PersistedJSON is the older, JSON form of a stored bucket state.
type PersistedJSON struct {
	Limits []LimitWire `json:"limits"`
	States []StateWire `json:"states"`
}

// AppendState appends the binary form of a bucket's limits and states.
func AppendState(dst []byte, limits []LimitWire, states []StateWire) []byte {
	dst = append(dst, stateFormatV1)
	dst = binary.AppendUvarint(dst, uint64(len(limits)))
	for _, l := range limits {
		dst = AppendBytes(dst, l.Name)
		dst = AppendBytes(dst, l.Algorithm)
		dst = binary.AppendVarint(dst, l.Limit)
		dst = binary.AppendVarint(dst, l.PeriodNS)
		dst = binary.AppendVarint(dst, l.Burst)
	}
	dst = binary.AppendUvarint(dst, uint64(len(states)))
	for _, s := range states {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.Tokens))
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.Prev))
		dst = binary.AppendVarint(dst, s.At)
		dst = binary.AppendUvarint(dst, uint64(len(s.Log)))
		for _, t := range s.Log {
			dst = binary.AppendVarint(dst, t)
		}
	}
	return dst
}

// DecodeState reads a stored bucket state in either form into wire values.
func DecodeState(b []byte) ([]LimitWire, []StateWire, error) {
	if len(b) > 0 && b[0] == '{' {
		var p PersistedJSON
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, nil, fmt.Errorf("bucket state: %w", err)
		}
		return p.Limits, p.States, nil
	}
	var limits []LimitWire
	var states []StateWire
	err := walkState(b, func(l LimitWire) error {
		limits = append(limits, l)
		return nil
	}, func(s StateWire) {
		states = append(states, s)
	})
	return limits, states, err
}

// BinaryState returns b in the binary form, converting a JSON one.
func BinaryState(dst, b []byte) ([]byte, error) {
	if len(b) > 0 && b[0] == '{' {
		l, s, err := DecodeState(b)
		if err != nil {
			return dst, err
		}
		return AppendState(dst, l, s), nil
	}
	if len(b) == 0 || b[0] != stateFormatV1 {
		return dst, errors.New("bucket state: unknown format")
	}
	return append(dst, b...), nil
}

// DecodeStateInto reads a binary state into quota values, reusing the
// capacity of limits and states (the hot cache copies what it keeps).
func DecodeStateInto(b []byte, limits []quota.Limit, states []quota.State) ([]quota.Limit, []quota.State, error) {
	limits, states = limits[:0], states[:0]
	err := walkState(b, func(l LimitWire) error {
		ql, err := decodeLimit(l)
		if err != nil {
			return err
		}
		limits = append(limits, ql)
		return nil
	}, func(s StateWire) {
		states = append(states, quota.State{Tokens: s.Tokens, Prev: s.Prev, At: s.At, Log: s.Log})
	})
	return limits, states, err
}

// walkState calls limit and state for each part of a binary state. Names
// and logs it passes are fresh (they may be kept).
func walkState(b []byte, limit func(LimitWire) error, state func(StateWire)) error {
	if len(b) == 0 || b[0] != stateFormatV1 {
		return errors.New("bucket state: unknown format")
	}
	r := newReader(b[1:])
	n := r.Uvarint()
	for i := uint64(0); i < n && !r.Bad; i++ {
		l := LimitWire{Name: r.str(), Algorithm: r.str(), Limit: r.Varint(), PeriodNS: r.Varint(), Burst: r.Varint()}
		if !r.Bad {
			if err := limit(l); err != nil {
				return err
			}
		}
	}
	n = r.Uvarint()
	for i := uint64(0); i < n && !r.Bad; i++ {
		s := StateWire{Tokens: r.f64(), Prev: r.f64(), At: r.Varint()}
		if k := r.Uvarint(); k > 0 && !r.Bad {
			if k > uint64(len(r.B)) {
				return errShortState
			}
			s.Log = make([]int64, k)
			for j := range s.Log {
				s.Log[j] = r.Varint()
			}
		}
		if !r.Bad {
			state(s)
		}
	}
	if r.Bad {
		return r.err()
	}
	if len(r.B) != 0 {
		return errors.New("bucket state: trailing bytes")
	}
	return nil
}

// AppendPacked appends one record of a packed hydration page.
func AppendPacked(dst []byte, key, tenantID string, fullAt int64, state []byte) []byte {
	dst = AppendBytes(dst, key)
	dst = AppendBytes(dst, tenantID)
	dst = binary.AppendVarint(dst, fullAt)
	dst = binary.AppendUvarint(dst, uint64(len(state)))
	return append(dst, state...)
}

// PackedRecord is one record of a packed page; its byte slices point into
// the page.
type PackedRecord struct {
	Key, TenantID []byte
	FullAt        int64
	State         []byte
}

// WalkPacked calls fn for each record of a packed page, stopping at the
// first error.
func WalkPacked(page []byte, fn func(PackedRecord) error) error {
	r := newReader(page)
	for len(r.B) > 0 {
		rec := PackedRecord{Key: r.bytes(), TenantID: r.bytes(), FullAt: r.Varint(), State: r.bytes()}
		if r.Bad {
			return fmt.Errorf("packed bucket page: %w", r.err())
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// reader reads the binary state forms; err is errShortState once a read
// failed.
type reader struct{ VarintReader }

func newReader(b []byte) reader { return reader{VarintReader{B: b}} }

func (r *reader) err() error {
	if r.Bad {
		return errShortState
	}
	return nil
}

func (r *reader) f64() float64 {
	if r.Bad || len(r.B) < 8 {
		r.Bad = true
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.B))
	r.B = r.B[8:]
	return v
}

func (r *reader) bytes() []byte { return r.Bytes(math.MaxUint64) }

func (r *reader) str() string { return string(r.bytes()) }

// AppendPackedStateBatch appends recs as one packed state batch from node;
// fenced adds each record's term (FencedStateFormat).
func AppendPackedStateBatch(dst []byte, node string, recs []BucketRecord, fenced bool) []byte {
	dst = slices.Grow(dst, 16+len(node)+len(recs)*160) // a typical record's size
	if fenced {
		dst = append(dst, fencedBatchMagic)
	} else {
		dst = append(dst, packedBatchMagic)
	}
	dst = binary.AppendUvarint(dst, WireVersion)
	dst = AppendBytes(dst, node)
	var state []byte
	for i := range recs {
		r := &recs[i]
		state = AppendState(state[:0], r.Limits, r.States)
		dst = AppendPacked(dst, r.Key, r.TenantID, r.FullAt, state)
		if fenced {
			dst = binary.AppendUvarint(dst, r.Term)
		}
	}
	return dst
}

// IsPackedStateBatch reports whether data is a packed state batch, fenced
// or not (else it is JSON, a StateBatch).
func IsPackedStateBatch(data []byte) bool {
	return len(data) > 0 && (data[0] == packedBatchMagic || data[0] == fencedBatchMagic)
}

// WalkPackedStateBatch calls fn for each record of a packed state batch,
// whose states are in the binary form (checked), with the record's term (0
// in a batch that is not fenced), and returns the node that sent it. The
// records' byte slices point into data.
func WalkPackedStateBatch(data []byte, fn func(rec PackedRecord, term uint64) error) (node string, err error) {
	if !IsPackedStateBatch(data) {
		return "", errors.New("packed state batch: wrong leading byte")
	}
	fenced := data[0] == fencedBatchMagic
	r := newReader(data[1:])
	if v := r.Uvarint(); !r.Bad && v != WireVersion {
		return "", fmt.Errorf("packed state batch: wire version %d", v)
	}
	node = string(r.bytes())
	if r.Bad {
		return "", fmt.Errorf("packed state batch: %w", r.err())
	}
	for len(r.B) > 0 {
		rec := PackedRecord{Key: r.bytes(), TenantID: r.bytes(), FullAt: r.Varint(), State: r.bytes()}
		var term uint64
		if fenced {
			term = r.Uvarint()
		}
		if r.Bad {
			return node, fmt.Errorf("packed state batch: %w", r.err())
		}
		if len(rec.State) == 0 || rec.State[0] != stateFormatV1 {
			return node, fmt.Errorf("packed state batch: bucket %q: unknown state format", rec.Key)
		}
		if err := fn(rec, term); err != nil {
			return node, err
		}
	}
	return node, nil
}
