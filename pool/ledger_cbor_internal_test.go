package pool

import (
	"bytes"
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"idlepool/job"
)

// encodedCanonical is an entry's canonical encoding as the CBOR encoder
// writes it (ledgerEncMode, entryCBOR): what Canonical returned before it
// was written by hand, and the reference it must equal byte for byte
// (every signature and hash in a ledger is over these bytes).
func encodedCanonical(t testing.TB, e Entry, withSig bool) []byte {
	c := entryCBOR{
		Type: ledgerDomain, Seq: e.Seq, Prev: e.Prev[:], Kind: e.Kind, Pool: e.Pool, Job: e.Job[:], Task: e.Task,
		Peer: e.Peer, Owner: e.Owner, Lease: e.Lease, Digest: e.Digest[:], Cost: e.Cost, Work: e.Work, Time: e.Time, Reason: e.Reason,
	}
	var (
		b   []byte
		err error
	)
	if withSig {
		b, err = ledgerEncMode.Marshal(signedEntryCBOR{entryCBOR: c, Sig: e.Sig})
	} else {
		b, err = ledgerEncMode.Marshal(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCanonicalByHandMatchesEncoder(t *testing.T) {
	strs := []string{"", "receipt", "pool-1", "é ü 中文", "bad \xff utf8", strings.Repeat("x", 23), strings.Repeat("y", 24),
		strings.Repeat("z", 255), strings.Repeat("w", 256)}
	long := []string{strings.Repeat("v", 65535), strings.Repeat("u", 65536)} // in one entry of 50: they are slow to compare
	costs := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1.0 / 3, 0.1, 65504, 65505, 65520, 1e-5, 5.960464477539063e-08,
		6e-8, 1.5e-45, 3.4028234663852886e+38, 3.5e38, 123456789.125, 1e20, 1.5e300, math.SmallestNonzeroFloat64,
		math.MaxFloat64, math.NaN(), math.Inf(1), math.Inf(-1), float64(math.Float32frombits(1))}
	ints := []int64{0, 1, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -24, -25, -256, -257, -65536, -65537, math.MinInt64}
	rng := rand.New(rand.NewPCG(3, 4))
	digest := func() job.Digest {
		var d job.Digest
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return d
	}
	pick := func() string { return strs[rng.IntN(len(strs))] }
	anInt := func() int64 {
		if rng.IntN(2) == 0 {
			return ints[rng.IntN(len(ints))]
		}
		return rng.Int64() >> uint(rng.IntN(64))
	}
	for i := range 1500 {
		e := Entry{
			Seq: uint64(anInt()), Prev: digest(), Kind: pick(), Pool: pick(), Job: digest(),
			Task: anInt(), Peer: pick(), Owner: pick(), Lease: pick(), Digest: digest(),
			Cost: costs[rng.IntN(len(costs))], Time: anInt(), Reason: pick(),
		}
		if rng.IntN(2) == 0 {
			e.Work = uint64(anInt())
		}
		if i%50 == 0 {
			e.Reason, e.Lease = long[rng.IntN(2)], long[rng.IntN(2)]
		}
		if rng.IntN(4) == 0 {
			e.Cost = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
		}
		if n := rng.IntN(80); n > 0 {
			e.Sig = make([]byte, n-1) // nil, empty or not
			for k := range e.Sig {
				e.Sig[k] = byte(rng.Uint32())
			}
		}
		for _, withSig := range []bool{false, true} {
			want := encodedCanonical(t, e, withSig)
			if got := e.appendCanonical([]byte("prefix"), withSig); !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("entry %d (cost %v, withSig %v):\n got %x\nwant prefix%x", i, e.Cost, withSig, got, want)
			}
			if got := e.Canonical(withSig); !bytes.Equal(got, want) {
				t.Fatalf("entry %d: Canonical(%v) %x, want %x", i, withSig, got, want)
			}
		}
		if got, want := e.LeafHash(), job.Digest(rfc6962.DefaultHasher.HashLeaf(encodedCanonical(t, e, false))); got != want {
			t.Fatalf("entry %d: LeafHash %s, want %s", i, got, want)
		}
		if got, want := (Entry{Seq: e.Seq, Sig: e.Sig}).Hash(), job.Digest(sha256.Sum256(encodedCanonical(t, Entry{Seq: e.Seq, Sig: e.Sig}, true))); got != want {
			t.Fatalf("entry %d: Hash %s, want %s", i, got, want)
		}
	}
}

// Hashing a batch's entries allocates nothing for an entry of usual size:
// the encoder's reflection and the hasher's state were most of the
// scheduler's allocations per task.
func TestLeafHashAllocatesNothing(t *testing.T) {
	e := Entry{Seq: 12345, Kind: KindReceipt, Pool: "pool", Task: 7, Peer: "peer-0123456789abcdef", Owner: "owner-0123456789abcdef",
		Lease: "0123456789abcdef0123456789abcdef", Cost: 1.5, Work: 1000, Time: 1_767_000_000_000}
	if n := testing.AllocsPerRun(100, func() { e.LeafHash() }); n != 0 {
		t.Errorf("LeafHash: %v allocations, want 0", n)
	}
	l, r := e.LeafHash(), e.LeafHash()
	if n := testing.AllocsPerRun(100, func() { hashChildren(l[:], r[:]) }); n != 0 {
		t.Errorf("hashChildren: %v allocations, want 0", n)
	}
	if got, want := hashChildren(l[:], r[:]), job.Digest(rfc6962.DefaultHasher.HashChildren(l[:], r[:])); got != want {
		t.Errorf("hashChildren %s, want %s", got, want)
	}
}

// rootFromInclusionProof agrees with the reference implementation
// (transparency-dev/merkle's RootFromInclusionProof) on every leaf of
// every tree of up to 70 leaves: the right path gives the same root,
// and a path one hash short or one hash long, or a leaf outside the
// tree, is refused by both. Computing a root allocates nothing.
func TestRootFromInclusionProofMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	random := func() (d job.Digest) {
		for i := range d {
			d[i] = byte(r.Uint32())
		}
		return d
	}
	for size := uint64(1); size <= 70; size++ {
		for index := uint64(0); index <= size; index++ {
			want := 0
			if index < size {
				want = len(proofPath(index, size))
			}
			for _, n := range []int{want - 1, want, want + 1} {
				if n < 0 {
					continue
				}
				leaf, path := random(), make([]job.Digest, n)
				ref := make([][]byte, n)
				for i := range path {
					path[i] = random()
					ref[i] = path[i][:]
				}
				got, err := rootFromInclusionProof(index, size, leaf, path)
				root, refErr := proof.RootFromInclusionProof(rfc6962.DefaultHasher, index, size, leaf[:], ref)
				switch {
				case (err == nil) != (refErr == nil):
					t.Fatalf("leaf %d of %d, path of %d: error %v, the reference's %v", index, size, n, err, refErr)
				case err == nil && got != job.Digest(root):
					t.Fatalf("leaf %d of %d: root %s, the reference's %x", index, size, got, root)
				case err == nil && (index >= size || n != want):
					t.Fatalf("leaf %d of %d, path of %d: accepted", index, size, n)
				}
			}
		}
	}
	path := make([]job.Digest, len(proofPath(5, 11)))
	if n := testing.AllocsPerRun(100, func() { rootFromInclusionProof(5, 11, job.Digest{}, path) }); n != 0 {
		t.Errorf("rootFromInclusionProof: %v allocations, want 0", n)
	}
}

// proofPath returns the inclusion path SignBatch gives leaf index of a
// tree of size leaves (zero hashes: only its length matters here).
func proofPath(index, size uint64) []job.Digest {
	return TreeProofs(make([]job.Digest, size))[index].Path
}
