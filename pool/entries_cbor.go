package pool

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"idlepool/job"
)

// EntriesContentType is the media type of the compact form of a page of
// ledger entries (AppendEntriesCBOR), which GET /v1/receipts answers a
// request that accepts it.
const EntriesContentType = "application/cbor"

// ErrEntriesCBOR is what DecodeEntriesCBOR's errors match: the bytes are
// not a well-formed compact page of ledger entries.
var ErrEntriesCBOR = errors.New("pool: malformed CBOR ledger entries")

// AppendEntriesCBOR appends es in their compact form to b: a CBOR map
// (RFC 8949) with two keys, in which what the entries of one signed
// batch share is sent once:
//
//	"batches": an array of the batches es come from, each a map
//	    {"sig": byte string (64), "size": unsigned}: the coordinator's
//	    signature over the batch's tree head and its number of leaves
//	    (the head's root is not sent: each entry's leaf hash and path
//	    lead to it, as Entry.Tree does).
//	"entries": an array of maps, one an entry in es's order, with the
//	    keys "seq" (unsigned), "prev", "job" and "digest" (byte strings,
//	    32), "kind", "pool", "peer", "owner", "lease" (text), "task" and
//	    "time" (integers), "cost" (float), "work" (unsigned, only when
//	    not 0), "reason" (text, only when not empty), and then either
//	    "batch" (unsigned: the index of its batch in "batches"),
//	    "index" (unsigned: its leaf's index in the batch's tree) and
//	    "path" (byte string: its inclusion path's hashes, 32 bytes each,
//	    leaf to root; only when not empty), or, for an entry signed
//	    alone (Tree nil), "sig" (byte string, 64).
//
// Entries go to the same batch when their Sig and tree size are equal.
// DecodeEntriesCBOR reads it back into the same Entry values.
func AppendEntriesCBOR(b []byte, es []Entry) []byte {
	type batch struct {
		sig  []byte
		size uint64
	}
	type batchKey struct {
		sig  string
		size uint64
	}
	var (
		batches []batch
		index   map[batchKey]int // each batch's place in batches
	)
	of := make([]int, len(es)) // each entry's batch, -1 for one signed alone
	for i := range es {
		e := &es[i]
		of[i] = -1
		if e.Tree == nil {
			continue
		}
		// A page's entries come batch by batch, so the last batch is
		// the likely one; a device's page often has one entry per batch,
		// where a search of every batch would be quadratic.
		j := len(batches) - 1
		if j < 0 || batches[j].size != e.Tree.Size || !bytes.Equal(batches[j].sig, e.Sig) {
			if index == nil {
				index = map[batchKey]int{}
			}
			k := batchKey{string(e.Sig), e.Tree.Size}
			var ok bool
			if j, ok = index[k]; !ok {
				j = len(batches)
				batches = append(batches, batch{e.Sig, e.Tree.Size})
				index[k] = j
			}
		}
		of[i] = j
	}
	b = AppendCBORHead(b, 5, 2)
	b = AppendCBORText(b, "batches")
	b = AppendCBORHead(b, 4, uint64(len(batches)))
	for _, bt := range batches {
		b = AppendCBORHead(b, 5, 2)
		b = AppendCBORText(b, "sig")
		b = cborBytes(b, bt.sig)
		b = AppendCBORText(b, "size")
		b = AppendCBORHead(b, 0, bt.size)
	}
	b = AppendCBORText(b, "entries")
	b = AppendCBORHead(b, 4, uint64(len(es)))
	for i := range es {
		e := &es[i]
		n := uint64(13) // 12 keys and "sig", or:
		if e.Tree != nil {
			n++ // "batch" and "index"
			if len(e.Tree.Path) > 0 {
				n++
			}
		}
		if e.Work != 0 {
			n++
		}
		if e.Reason != "" {
			n++
		}
		b = AppendCBORHead(b, 5, n)
		b = AppendCBORText(b, "seq")
		b = AppendCBORHead(b, 0, e.Seq)
		b = AppendCBORText(b, "prev")
		b = cborBytes(b, e.Prev[:])
		b = AppendCBORText(b, "kind")
		b = AppendCBORText(b, e.Kind)
		b = AppendCBORText(b, "pool")
		b = AppendCBORText(b, e.Pool)
		b = AppendCBORText(b, "job")
		b = cborBytes(b, e.Job[:])
		b = AppendCBORText(b, "task")
		b = AppendCBORInt(b, e.Task)
		b = AppendCBORText(b, "peer")
		b = AppendCBORText(b, e.Peer)
		b = AppendCBORText(b, "owner")
		b = AppendCBORText(b, e.Owner)
		b = AppendCBORText(b, "lease")
		b = AppendCBORText(b, e.Lease)
		b = AppendCBORText(b, "digest")
		b = cborBytes(b, e.Digest[:])
		b = AppendCBORText(b, "cost")
		b = cborFloat(b, e.Cost)
		if e.Work != 0 {
			b = AppendCBORText(b, "work")
			b = AppendCBORHead(b, 0, e.Work)
		}
		b = AppendCBORText(b, "time")
		b = AppendCBORInt(b, e.Time)
		if e.Reason != "" {
			b = AppendCBORText(b, "reason")
			b = AppendCBORText(b, e.Reason)
		}
		if t := e.Tree; t == nil {
			b = AppendCBORText(b, "sig")
			b = cborBytes(b, e.Sig)
		} else {
			b = AppendCBORText(b, "batch")
			b = AppendCBORHead(b, 0, uint64(of[i]))
			b = AppendCBORText(b, "index")
			b = AppendCBORHead(b, 0, t.Index)
			if len(t.Path) > 0 {
				b = AppendCBORText(b, "path")
				b = AppendCBORHead(b, 2, uint64(len(t.Path)*len(job.Digest{})))
				for _, d := range t.Path {
					b = append(b, d[:]...)
				}
			}
		}
	}
	return b
}

// entriesCBOR, batchCBOR and pageEntryCBOR are AppendEntriesCBOR's form,
// for the decoder.
type entriesCBOR struct {
	Batches []batchCBOR     `cbor:"batches"`
	Entries []pageEntryCBOR `cbor:"entries"`
}

type batchCBOR struct {
	Sig  []byte `cbor:"sig"`
	Size uint64 `cbor:"size"`
}

type pageEntryCBOR struct {
	Seq    uint64  `cbor:"seq"`
	Prev   []byte  `cbor:"prev"`
	Kind   string  `cbor:"kind"`
	Pool   string  `cbor:"pool"`
	Job    []byte  `cbor:"job"`
	Task   int64   `cbor:"task"`
	Peer   string  `cbor:"peer"`
	Owner  string  `cbor:"owner"`
	Lease  string  `cbor:"lease"`
	Digest []byte  `cbor:"digest"`
	Cost   float64 `cbor:"cost"`
	Work   uint64  `cbor:"work"`
	Time   int64   `cbor:"time"`
	Reason string  `cbor:"reason"`
	Batch  *uint64 `cbor:"batch"`
	Index  *uint64 `cbor:"index"`
	Path   []byte  `cbor:"path"`
	Sig    []byte  `cbor:"sig"`
}

// entriesDecMode refuses what AppendEntriesCBOR never writes: unknown
// keys (a known key in another case among them), a key given twice,
// indefinite lengths and tags.
var entriesDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		FieldNameMatching: cbor.FieldNameMatchingCaseSensitive,
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxArrayElements:  1 << 20,
		MaxMapPairs:       1 << 20,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// maxPathHashes bounds an inclusion path (a tree of at most 2^32
// leaves has at most 32; UnmarshalJSON allows 64).
const maxPathHashes = 64

// DecodeEntriesCBOR reads what AppendEntriesCBOR writes into the Entry
// values it was given: each entry of a batch gets the batch's Sig (one
// slice shared by them) and a Tree of the batch's size, its index and
// its path. It checks the form only, not the signatures (EntryVerifier
// does). The error wraps ErrEntriesCBOR and names what is wrong: bytes
// that are not one CBOR map of that shape (trailing bytes included), a
// digest or signature of the wrong length, a path that is not whole
// hashes, an entry naming a batch the answer does not have or carrying
// both a batch and a signature (or neither), or a batch no entry names.
func DecodeEntriesCBOR(b []byte) ([]Entry, error) {
	var v entriesCBOR
	if err := entriesDecMode.Unmarshal(b, &v); err != nil {
		if u := (*cbor.UnknownFieldError)(nil); errors.As(err, &u) {
			if where := unknownKey(b); where != "" {
				return nil, fmt.Errorf("%w: %s", ErrEntriesCBOR, where)
			}
		}
		return nil, fmt.Errorf("%w: %w", ErrEntriesCBOR, err)
	}
	for i, bt := range v.Batches {
		if len(bt.Sig) != ed25519.SignatureSize {
			return nil, fmt.Errorf("%w: batch %d: sig of %d bytes, want %d", ErrEntriesCBOR, i, len(bt.Sig), ed25519.SignatureSize)
		}
		if bt.Size == 0 || bt.Size > maxTreeSize {
			return nil, fmt.Errorf("%w: batch %d: size %d out of range 1 to %d", ErrEntriesCBOR, i, bt.Size, uint64(maxTreeSize))
		}
	}
	const hashLen = len(job.Digest{})
	hashes := 0
	for i := range v.Entries {
		hashes += len(v.Entries[i].Path) / hashLen
	}
	out := make([]Entry, len(v.Entries))
	proofs := make([]TreeProof, len(v.Entries))
	paths := make([]job.Digest, 0, hashes)
	named := make([]bool, len(v.Batches))
	for i := range v.Entries {
		pe := &v.Entries[i]
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: entry %d (seq %d): %s", ErrEntriesCBOR, i, pe.Seq, fmt.Sprintf(format, args...))
		}
		e := Entry{Seq: pe.Seq, Kind: pe.Kind, Pool: pe.Pool, Task: pe.Task, Peer: pe.Peer, Owner: pe.Owner,
			Lease: pe.Lease, Cost: pe.Cost, Work: pe.Work, Time: pe.Time, Reason: pe.Reason}
		for _, f := range []struct {
			name string
			b    []byte
			d    *job.Digest
		}{{"prev", pe.Prev, &e.Prev}, {"job", pe.Job, &e.Job}, {"digest", pe.Digest, &e.Digest}} {
			if len(f.b) != hashLen {
				return nil, bad("%s of %d bytes, want %d", f.name, len(f.b), hashLen)
			}
			*f.d = job.Digest(f.b)
		}
		switch {
		case pe.Batch == nil:
			if pe.Index != nil || pe.Path != nil {
				return nil, bad("an index or path without a batch")
			}
			if len(pe.Sig) != ed25519.SignatureSize {
				return nil, bad("neither a batch nor a sig of %d bytes (%d)", ed25519.SignatureSize, len(pe.Sig))
			}
			e.Sig = pe.Sig
		case pe.Sig != nil:
			return nil, bad("both a batch and a sig")
		case *pe.Batch >= uint64(len(v.Batches)):
			return nil, bad("batch %d, but the answer has %d", *pe.Batch, len(v.Batches))
		case pe.Index == nil:
			return nil, bad("no index in its batch")
		case len(pe.Path)%hashLen != 0 || len(pe.Path)/hashLen > maxPathHashes:
			return nil, bad("path of %d bytes is not at most %d whole hashes", len(pe.Path), maxPathHashes)
		default:
			bt := &v.Batches[*pe.Batch]
			named[*pe.Batch] = true
			proofs[i] = TreeProof{Size: bt.Size, Index: *pe.Index}
			if len(pe.Path) > 0 {
				n := len(paths)
				for j := 0; j < len(pe.Path); j += hashLen {
					paths = append(paths, job.Digest(pe.Path[j:j+hashLen]))
				}
				proofs[i].Path = paths[n:len(paths):len(paths)]
			}
			e.Sig, e.Tree = bt.Sig, &proofs[i]
		}
		out[i] = e
	}
	for i, ok := range named {
		if !ok {
			return nil, fmt.Errorf("%w: batch %d: no entry names it", ErrEntriesCBOR, i)
		}
	}
	return out, nil
}

// unknownKey says where in b (a page refused for an unknown key) the
// first key the compact form does not have is, or "" when it cannot.
func unknownKey(b []byte) string {
	var page map[string]cbor.RawMessage
	if cbor.Unmarshal(b, &page) != nil {
		return ""
	}
	known := func(m map[string]cbor.RawMessage, t reflect.Type) string {
		keys := map[string]bool{}
		for i := range t.NumField() {
			keys[t.Field(i).Tag.Get("cbor")] = true
		}
		var bad []string
		for k := range m {
			if !keys[k] {
				bad = append(bad, k)
			}
		}
		if len(bad) == 0 {
			return ""
		}
		slices.Sort(bad)
		return fmt.Sprintf("unknown key %q", bad[0])
	}
	if s := known(page, reflect.TypeFor[entriesCBOR]()); s != "" {
		return s
	}
	for _, list := range []struct {
		key, one string
		t        reflect.Type
	}{{"batches", "batch", reflect.TypeFor[batchCBOR]()}, {"entries", "entry", reflect.TypeFor[pageEntryCBOR]()}} {
		var ms []map[string]cbor.RawMessage
		if cbor.Unmarshal(page[list.key], &ms) != nil {
			return ""
		}
		for i, m := range ms {
			if s := known(m, list.t); s != "" {
				return fmt.Sprintf("%s %d: %s", list.one, i, s)
			}
		}
	}
	return ""
}
