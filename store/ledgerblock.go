package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"idlepool/job"
	"idlepool/pool"
)

// A ledger block is a batch of ledger entries signed together and
// committed whole, stored as one row of ledger_blocks (migration 0010)
// instead of one row per entry: a group commit then writes one row for
// its ledger, not two per task (docs/benchmarks.md). Its entries value
// holds, per entry, only what the row does not imply; Seq, Prev, the
// signature and the inclusion proof are rebuilt when it is read.

// blockFormat is the first byte of a ledger_blocks.entries value.
const blockFormat = 1

// maxBlock is the most entries a block holds; a batch of more is stored
// as rows of ledger (a scheduler's batches are far smaller).
const maxBlock = 1 << 20

// errBlock is what a block whose bytes do not decode wraps (with
// ErrCorrupt).
var errBlock = errors.New("ledger block does not decode")

// appendBlock appends the entries value of a block of entries (one
// batch, in Seq order) to b: blockFormat, then per entry its kind, pool,
// job (32 bytes), task (varint), peer, owner, lease, digest (32 bytes),
// cost (the float's 8 bytes, little-endian), work (uvarint), time
// (varint) and reason, each string as a uvarint length and its bytes.
func appendBlock(b []byte, entries []pool.Entry) []byte {
	b = append(b, blockFormat)
	for i := range entries {
		e := &entries[i]
		b = appendString(b, e.Kind)
		b = appendString(b, e.Pool)
		b = append(b, e.Job[:]...)
		b = binary.AppendVarint(b, e.Task)
		b = appendString(b, e.Peer)
		b = appendString(b, e.Owner)
		b = appendString(b, e.Lease)
		b = append(b, e.Digest[:]...)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.Cost))
		b = binary.AppendUvarint(b, e.Work)
		b = binary.AppendVarint(b, e.Time)
		b = appendString(b, e.Reason)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// block is one row of ledger_blocks.
type block struct {
	first, last uint64
	prev, hash  []byte // the first entry's Prev, the last entry's Hash
	sig         []byte
	entries     []byte // appendBlock's encoding
}

// decode returns the block's entries, Seq first to last, each with its
// Prev (the row's prev, then the leaf hash of the entry before), the
// block's signature and its inclusion proof rebuilt from the leaf
// hashes (pool.SignBatch, given the row's signature). Bytes that do not
// decode into exactly last-first+1 entries, or a last entry whose hash
// is not the row's, are an error wrapping ErrCorrupt.
func (k *block) decode() ([]pool.Entry, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ledger block %d-%d: %s: %w: %w", k.first, k.last, fmt.Sprintf(format, args...), errBlock, ErrCorrupt)
	}
	if k.last < k.first || k.last-k.first >= maxBlock || len(k.prev) != len(job.Digest{}) || len(k.hash) != len(job.Digest{}) {
		return nil, bad("bad row")
	}
	if len(k.entries) == 0 || k.entries[0] != blockFormat {
		return nil, bad("unknown format")
	}
	d := blockReader{b: k.entries[1:]}
	n := int(k.last - k.first + 1)
	out := make([]pool.Entry, n)
	for i := range out {
		e := &out[i]
		e.Seq = k.first + uint64(i)
		e.Kind = d.string()
		e.Pool = d.string()
		e.Job = job.ID(d.digest())
		e.Task = d.varint()
		e.Peer = d.string()
		e.Owner = d.string()
		e.Lease = d.string()
		e.Digest = d.digest()
		e.Cost = math.Float64frombits(d.uint64())
		e.Work = d.uvarint()
		e.Time = d.varint()
		e.Reason = d.string()
		if d.err != nil {
			return nil, bad("entry %d: %v", e.Seq, d.err)
		}
	}
	if len(d.b) != 0 {
		return nil, bad("%d bytes after its %d entries", len(d.b), n)
	}
	// Chained and given their proofs as SignBatch did, with the
	// signature it made.
	last := pool.SignBatch(out, job.Digest(k.prev), func([]byte) []byte { return k.sig })
	if !bytes.Equal(last[:], k.hash) {
		return nil, bad("its last entry's hash is not the block's")
	}
	return out, nil
}

// blockReader reads appendBlock's fields; the first failure sticks in
// err and later reads return zero values.
type blockReader struct {
	b   []byte
	err error
}

func (r *blockReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated %s", what)
	}
	r.b = nil
}

func (r *blockReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *blockReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *blockReader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail("float")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *blockReader) digest() job.Digest {
	var d job.Digest
	if len(r.b) < len(d) {
		r.fail("digest")
		return d
	}
	copy(d[:], r.b)
	r.b = r.b[len(d):]
	return d
}

func (r *blockReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.fail("string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
