package pool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"idlepool/job"
)

// treeHeadDomain is written into a tree head's canonical encoding, so a
// signature over a head can never pass for one over an entry or anything
// else.
const treeHeadDomain = "idlepool/ledger-tree-head/v1"

// maxTreeSize bounds the leaves of one batch's tree a proof may claim,
// and so the length of its path (at most 32 hashes).
const maxTreeSize = 1 << 32

// TreeProof shows that an entry is one leaf of the Merkle tree of the
// entries its coordinator committed together (one batch): the tree has
// Size leaves, the entry is leaf Index (0-based, in Seq order), and Path
// is its inclusion proof, the sibling hashes from the leaf up to the root
// (RFC 9162 section 2.1.3.1, PATH). The entry's Sig signs the tree's head
// (TreeHead), so one signature covers the whole batch.
type TreeProof struct {
	Size  uint64
	Index uint64
	Path  []job.Digest
}

// TreeHead is the root of one batch's Merkle tree and its number of
// leaves: what a batch's one signature signs.
type TreeHead struct {
	Size uint64
	Root job.Digest
}

// Canonical returns the bytes the coordinator signs for h: the
// deterministic CBOR encoding of a map with the keys "type"
// ("idlepool/ledger-tree-head/v1"), "size" and "root" (32 bytes).
func (h TreeHead) Canonical() []byte {
	b, err := ledgerEncMode.Marshal(treeHeadCBOR{Type: treeHeadDomain, Size: h.Size, Root: h.Root[:]})
	if err != nil {
		panic(fmt.Sprintf("pool: encode tree head: %v", err)) // plain values only
	}
	return b
}

type treeHeadCBOR struct {
	Type string `cbor:"type"`
	Size uint64 `cbor:"size"`
	Root []byte `cbor:"root"`
}

// LeafHash returns the entry's Merkle leaf hash, SHA-256 of 0x00 followed
// by Canonical(false) (RFC 9162 section 2.1.1). It is also the Hash of an
// entry signed with its batch.
func (e Entry) LeafHash() job.Digest { return e.leafHash() }

// SignBatch chains entries after prev (each entry's Prev is the Hash of
// the one before) and signs them with one call of sign: over the head of
// the Merkle tree of their leaf hashes (TreeHead.Canonical), each entry
// getting its inclusion proof (Tree) and that signature (Sig). It
// returns the Hash of the last entry, or prev when entries is empty. The
// Scheduler signs each batch it commits so.
func SignBatch(entries []Entry, prev job.Digest, sign func([]byte) []byte) job.Digest {
	last, _ := signBatch(entries, prev, sign)
	return last
}

// Sign chains and signs b.Entries after prev as SignBatch does, and
// keeps their leaf hashes in b.Leaves for its store (SignedWhole,
// Hashes): the Scheduler signs each batch it commits so. It returns the
// Hash of the last entry, or prev when there is none. An entry changed
// after Sign makes b's hashes wrong as it makes its signature: never
// change one.
func (b *Batch) Sign(prev job.Digest, sign func([]byte) []byte) job.Digest {
	last, leaves := signBatch(b.Entries, prev, sign)
	b.Leaves = leaves
	return last
}

// signBatch is SignBatch that also returns the entries' leaf hashes
// (nil for no entries).
func signBatch(entries []Entry, prev job.Digest, sign func([]byte) []byte) (last job.Digest, leaves []job.Digest) {
	if len(entries) == 0 {
		return prev, nil
	}
	leaves = make([]job.Digest, len(entries))
	for i := range entries {
		e := &entries[i]
		e.Prev = prev
		leaves[i] = e.leafHash()
		prev = leaves[i]
	}
	paths := newPaths(len(entries))
	head := TreeHead{Size: uint64(len(entries)), Root: treePaths(leaves, paths)}
	sig := sign(head.Canonical())
	proofs := make([]TreeProof, len(entries))
	for i := range entries {
		proofs[i] = TreeProof{Size: head.Size, Index: uint64(i), Path: paths[i]}
		entries[i].Tree = &proofs[i]
		entries[i].Sig = sig
	}
	return prev, leaves
}

// SignedWhole reports whether b.Entries are one batch as Sign signed
// it, with the leaf hashes it kept (Leaves): one hash per entry, the
// entries following one another in Seq, each Prev the leaf before it,
// the last entry's hash the last leaf, and each entry's proof (Tree)
// placing it in one tree of them all under one signature. A store may then keep
// the entries as one block and chain them by those leaves without
// hashing them again or rebuilding the tree's proofs (WholeBatch, which
// checks the proofs too). It checks that shape and the last entry's
// hash, not every hash nor the proofs' paths. For entries as signed,
// that makes every leaf the entry's hash (each but the last is the next
// one's Prev); an entry changed after Sign (never done) can pass.
func (b *Batch) SignedWhole() bool {
	n := len(b.Entries)
	if n == 0 || len(b.Leaves) != n {
		return false
	}
	first := &b.Entries[0]
	for k := range b.Entries {
		e := &b.Entries[k]
		if e.Tree == nil || e.Tree.Size != uint64(n) || e.Tree.Index != uint64(k) || len(e.Sig) == 0 ||
			e.Seq != first.Seq+uint64(k) || !bytes.Equal(e.Sig, first.Sig) || (k > 0 && e.Prev != b.Leaves[k-1]) {
			return false
		}
	}
	return b.Entries[n-1].Hash() == b.Leaves[n-1]
}

// Hashes returns the Hash of each of b.Entries and whether b is
// SignedWhole: Leaves itself when it is (read it, never change it),
// else each hash computed.
func (b *Batch) Hashes() (hashes []job.Digest, whole bool) {
	if b.SignedWhole() {
		return b.Leaves, true
	}
	hs := make([]job.Digest, len(b.Entries))
	for i := range b.Entries {
		hs[i] = b.Entries[i].Hash()
	}
	return hs, false
}

// TreeProofs returns the inclusion proof of each of leaves (the leaf
// hashes of one batch's entries, in Seq order, as Entry.Hash returns them
// for entries signed with their batch) in the batch's Merkle tree: the
// proofs SignBatch gave those entries. A store that keeps a batch's
// signature once, rather than a proof in every entry, rebuilds them so.
// It returns nil for no leaves.
func TreeProofs(leaves []job.Digest) []TreeProof {
	if len(leaves) == 0 {
		return nil
	}
	paths := newPaths(len(leaves))
	treePaths(leaves, paths)
	out := make([]TreeProof, len(leaves))
	for i := range out {
		out[i] = TreeProof{Size: uint64(len(leaves)), Index: uint64(i), Path: paths[i]}
	}
	return out
}

// treePaths returns the Merkle tree hash of leaves (RFC 9162 section
// 2.1.1, MTH) and appends to paths[i] the inclusion path of leaf i
// (section 2.1.3.1), leaf to root. leaves is not empty.
func treePaths(leaves []job.Digest, paths [][]job.Digest) job.Digest {
	n := len(leaves)
	if n == 1 {
		return leaves[0]
	}
	k := 1 << (bits.Len(uint(n-1)) - 1) // the largest power of two below n
	l := treePaths(leaves[:k], paths[:k])
	r := treePaths(leaves[k:], paths[k:])
	for i := range k {
		paths[i] = append(paths[i], r)
	}
	for i := k; i < n; i++ {
		paths[i] = append(paths[i], l)
	}
	return hashChildren(l[:], r[:])
}

// newPaths returns n empty inclusion paths with room for a tree of n
// leaves, all in one allocation (nil paths for a tree of one leaf).
func newPaths(n int) [][]job.Digest {
	depth := bits.Len(uint(n - 1))
	paths := make([][]job.Digest, n)
	if depth == 0 {
		return paths // one leaf: no path, nil as SignBatch always gave it
	}
	all := make([]job.Digest, n*depth)
	for i := range paths {
		paths[i] = all[i*depth : i*depth : (i+1)*depth]
	}
	return paths
}

// treeHead returns the head of the tree e.Tree proves e is part of.
func (e Entry) treeHead() (TreeHead, error) {
	t := e.Tree
	if t.Size == 0 || t.Size > maxTreeSize || t.Index >= t.Size {
		return TreeHead{}, fmt.Errorf("leaf %d of a tree of %d is out of range", t.Index, t.Size)
	}
	root, err := rootFromInclusionProof(t.Index, t.Size, e.leafHash(), t.Path)
	if err != nil {
		return TreeHead{}, fmt.Errorf("inclusion proof: %w", err)
	}
	return TreeHead{Size: t.Size, Root: root}, nil
}

// rootFromInclusionProof returns the root of the Merkle tree of size
// leaves in which leaf, a leaf hash, is leaf index (0-based) with the
// inclusion path path, leaf to root: RFC 9162 section 2.1.3.2's
// verification algorithm, which computes the root it then compares. A
// path too long or too short for index and size is an error; the tree it
// gives is checked by whoever signed its head. It does not allocate
// (every device checks each receipt it is given).
func rootFromInclusionProof(index, size uint64, leaf job.Digest, path []job.Digest) (job.Digest, error) {
	if index >= size {
		return job.Digest{}, fmt.Errorf("leaf %d of a tree of %d is out of range", index, size)
	}
	fn, sn := index, size-1
	r := leaf
	for _, p := range path {
		if sn == 0 {
			return job.Digest{}, fmt.Errorf("a path of %d hashes, more than leaf %d of a tree of %d has", len(path), index, size)
		}
		if fn&1 == 1 || fn == sn {
			r = hashChildren(p[:], r[:])
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = hashChildren(r[:], p[:])
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return job.Digest{}, fmt.Errorf("a path of %d hashes, fewer than leaf %d of a tree of %d has", len(path), index, size)
	}
	return r, nil
}

// MarshalBinary encodes the proof as the uvarints Size and Index followed
// by the path's 32-byte hashes, for a store's column.
func (t *TreeProof) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 2*binary.MaxVarintLen64+len(t.Path)*len(job.Digest{}))
	b = binary.AppendUvarint(b, t.Size)
	b = binary.AppendUvarint(b, t.Index)
	for _, d := range t.Path {
		b = append(b, d[:]...)
	}
	return b, nil
}

// UnmarshalBinary reads what MarshalBinary writes; a truncated encoding
// or a path that is not whole hashes is an error.
func (t *TreeProof) UnmarshalBinary(b []byte) error {
	size, n := binary.Uvarint(b)
	if n <= 0 {
		return fmt.Errorf("pool: tree proof: bad size")
	}
	b = b[n:]
	index, n := binary.Uvarint(b)
	if n <= 0 {
		return fmt.Errorf("pool: tree proof: bad index")
	}
	b = b[n:]
	const hashLen = len(job.Digest{})
	if len(b)%hashLen != 0 || len(b)/hashLen > 64 {
		return fmt.Errorf("pool: tree proof: path of %d bytes is not whole hashes", len(b))
	}
	path := make([]job.Digest, len(b)/hashLen)
	for i := range path {
		copy(path[i][:], b[i*hashLen:])
	}
	*t = TreeProof{Size: size, Index: index, Path: path}
	return nil
}

// WholeBatch returns how many of entries, from the first, are one whole
// batch as SignBatch signs it: leaves 0 to Size-1 of one tree in
// order, with one non-empty signature and exactly the inclusion proofs
// that TreeProofs rebuilds from their hashes (hashes[i] is entries[i]'s
// Hash), so that a store that keeps the signature once and rebuilds the
// proofs when it reads gives back the same entries. It returns 0 when
// they do not start such a batch: a store then keeps each entry's
// signature and proof with it. The SQLite store's ledger blocks and the
// cluster's state batches are kept so.
func WholeBatch(entries []Entry, hashes []job.Digest) int {
	t := entries[0].Tree
	if t == nil || t.Index != 0 || t.Size == 0 || t.Size > uint64(len(entries)) || len(entries[0].Sig) == 0 {
		return 0
	}
	n := int(t.Size)
	proofs := TreeProofs(hashes[:n])
	for i := range n {
		e := entries[i]
		if e.Tree == nil || e.Tree.Size != t.Size || e.Tree.Index != uint64(i) || !bytes.Equal(e.Sig, entries[0].Sig) ||
			!slices.Equal(e.Tree.Path, proofs[i].Path) || (e.Tree.Path == nil) != (proofs[i].Path == nil) {
			return 0
		}
	}
	return n
}
