package pool

import (
	"crypto/sha256"
	"encoding/binary"
	"math"

	"github.com/x448/float16"

	"idlepool/job"
)

// appendCanonical appends what Canonical(withSig) returns to b, written
// by hand: the same bytes as ledgerEncMode's encoding of entryCBOR (or
// signedEntryCBOR), keys in core deterministic order (shorter keys
// first, then bytewise), integers, strings and floats in their shortest
// form (TestCanonicalByHandMatchesEncoder), without the encoder's
// reflection and allocations, which were the largest share of the
// scheduler's allocations (docs/benchmarks.md).
func (e *Entry) appendCanonical(b []byte, withSig bool) []byte {
	n := uint64(14)
	if e.Work != 0 {
		n++
	}
	if withSig {
		n++
	}
	b = AppendCBORHead(b, 5, n) // a map of n pairs
	b = AppendCBORText(b, "job")
	b = cborBytes(b, e.Job[:])
	b = AppendCBORText(b, "seq")
	b = AppendCBORHead(b, 0, e.Seq)
	if withSig {
		b = AppendCBORText(b, "sig")
		if e.Sig == nil {
			b = append(b, 0xf6) // null, as the encoder writes a nil slice
		} else {
			b = cborBytes(b, e.Sig)
		}
	}
	b = AppendCBORText(b, "cost")
	b = cborFloat(b, e.Cost)
	b = AppendCBORText(b, "kind")
	b = AppendCBORText(b, e.Kind)
	b = AppendCBORText(b, "peer")
	b = AppendCBORText(b, e.Peer)
	b = AppendCBORText(b, "pool")
	b = AppendCBORText(b, e.Pool)
	b = AppendCBORText(b, "prev")
	b = cborBytes(b, e.Prev[:])
	b = AppendCBORText(b, "task")
	b = AppendCBORInt(b, e.Task)
	b = AppendCBORText(b, "time")
	b = AppendCBORInt(b, e.Time)
	b = AppendCBORText(b, "type")
	b = AppendCBORText(b, ledgerDomain)
	if e.Work != 0 {
		b = AppendCBORText(b, "work")
		b = AppendCBORHead(b, 0, e.Work)
	}
	b = AppendCBORText(b, "lease")
	b = AppendCBORText(b, e.Lease)
	b = AppendCBORText(b, "owner")
	b = AppendCBORText(b, e.Owner)
	b = AppendCBORText(b, "digest")
	b = cborBytes(b, e.Digest[:])
	b = AppendCBORText(b, "reason")
	b = AppendCBORText(b, e.Reason)
	return b
}

// leafHash is LeafHash without allocating for entries of usual size:
// SHA-256 of 0x00 and Canonical(false), written into a buffer on the
// stack.
func (e *Entry) leafHash() job.Digest {
	var buf [512]byte
	b := e.appendCanonical(append(buf[:0], 0x00), false)
	return sha256.Sum256(b)
}

// hashChildren is RFC 9162's interior node hash, SHA-256 of 0x01, left
// and right, without allocating.
func hashChildren(left, right []byte) job.Digest {
	var buf [1 + 2*sha256.Size]byte
	buf[0] = 0x01
	copy(buf[1:], left)
	copy(buf[1+sha256.Size:], right)
	return sha256.Sum256(buf[:])
}

// AppendCBORHead appends the head of a CBOR data item of major type major
// (0 to 7) and argument v, in its shortest form (RFC 8949, sections 3
// and 4.2.1). With AppendCBORInt and AppendCBORText it writes the
// compact forms of the API by hand (AppendEntriesCBOR here, the answer
// of POST /v1/work in package coord/api).
func AppendCBORHead(b []byte, major byte, v uint64) []byte {
	m := major << 5
	switch {
	case v < 24:
		return append(b, m|byte(v))
	case v <= math.MaxUint8:
		return append(b, m|24, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), v)
}

// AppendCBORInt appends v as a CBOR integer: major type 0, or 1 with
// argument -1 - v when v is negative.
func AppendCBORInt(b []byte, v int64) []byte {
	if v < 0 {
		return AppendCBORHead(b, 1, uint64(-1-v))
	}
	return AppendCBORHead(b, 0, uint64(v))
}

// AppendCBORText appends s as a CBOR text string (major type 3); s is
// written as it is, so the caller sees that it is UTF-8.
func AppendCBORText(b []byte, s string) []byte {
	return append(AppendCBORHead(b, 3, uint64(len(s))), s...)
}

func cborBytes(b, s []byte) []byte { return append(AppendCBORHead(b, 2, uint64(len(s))), s...) }

// cborFloat appends f as the core deterministic encoder does: NaN as
// half-precision 0x7e00, infinities as half precision, any other value
// in the shortest of half, single and double precision that holds it
// exactly.
func cborFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, 0xf9, 0x7e, 0x00)
	case math.IsInf(f, 1):
		return append(b, 0xf9, 0x7c, 0x00)
	case math.IsInf(f, -1):
		return append(b, 0xf9, 0xfc, 0x00)
	}
	f32 := float32(f)
	if float64(f32) != f {
		return binary.BigEndian.AppendUint64(append(b, 0xfb), math.Float64bits(f))
	}
	p := float16.PrecisionFromfloat32(f32)
	f16 := float16.Fromfloat32(f32)
	if p == float16.PrecisionUnknown && f16.Float32() == f32 {
		p = float16.PrecisionExact
	}
	if p == float16.PrecisionExact {
		return binary.BigEndian.AppendUint16(append(b, 0xf9), uint16(f16))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xfa), math.Float32bits(f32))
}
