package bus

import "encoding/binary"

// VarintReader reads the binary forms built of varints and length-prefixed
// bytes: packed bucket states and batches here, the cluster's forwarding
// frames. The first read that fails sticks (Bad) and every later read
// returns a zero value, so a decoder reads a whole record and checks once.
// The zero value reads nothing; set B.
type VarintReader struct {
	B   []byte // what is left to read
	Bad bool
}

// Uvarint reads an unsigned varint.
func (r *VarintReader) Uvarint() uint64 {
	if r.Bad {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.Bad = true
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *VarintReader) Varint() int64 {
	if r.Bad {
		return 0
	}
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.Bad = true
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Bytes reads a uvarint length and that many bytes, at most max; the
// slice points into B, with no room to append into what follows.
func (r *VarintReader) Bytes(max uint64) []byte {
	n := r.Uvarint()
	if r.Bad || n > max || n > uint64(len(r.B)) {
		r.Bad = true
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// AppendBytes appends s as VarintReader.Bytes reads it: its length as an
// unsigned varint, then its bytes.
func AppendBytes(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
