package pool

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"idlepool/job"
)

// reflectedEntryJSON is an entry's JSON as encoding/json writes its
// entryJSON form: what MarshalJSON wrote before AppendJSON, and the
// reference AppendJSON must equal byte for byte (old receipts and
// downloaded ledgers must read the same).
func reflectedEntryJSON(e Entry) ([]byte, error) {
	v := entryJSON{
		Seq: e.Seq, Prev: e.Prev.String(), Kind: e.Kind, Pool: e.Pool, Job: e.Job.String(),
		Task: e.Task, Peer: e.Peer, Owner: e.Owner, Lease: e.Lease, Digest: e.Digest.String(),
		Cost: e.Cost, Work: e.Work, Time: e.Time, Reason: e.Reason, Sig: base64.StdEncoding.EncodeToString(e.Sig),
	}
	if e.Tree != nil {
		v.Tree = &treeJSON{Size: e.Tree.Size, Index: e.Tree.Index, Path: make([]string, len(e.Tree.Path))}
		for i, d := range e.Tree.Path {
			v.Tree.Path[i] = d.String()
		}
	}
	return json.Marshal(v)
}

func TestEntryAppendJSONMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "receipt", "pool-1", "a b", `q"uote`, `back\slash`, "<script>&", "tab\there", "nl\n", "\x00\x1f\x7f",
		"é ü 中文", "\u2028\u2029", "bad \xff utf8", "emoji 🎉"}
	costs := []float64{0, 1, -1, 0.5, 1.0 / 3, 123456789.125, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21, 1.5e300, -2.5e-8, math.SmallestNonzeroFloat64, math.MaxFloat64}
	rng := rand.New(rand.NewPCG(1, 2))
	digest := func() job.Digest {
		var d job.Digest
		for i := range d {
			d[i] = byte(rng.Uint32())
		}
		return d
	}
	pick := func() string { return strs[rng.IntN(len(strs))] }
	for i := range 2000 {
		e := Entry{
			Seq: rng.Uint64() >> uint(rng.IntN(64)), Prev: digest(), Kind: pick(), Pool: pick(), Job: digest(),
			Task: rng.Int64() - rng.Int64(), Peer: pick(), Owner: pick(), Lease: pick(), Digest: digest(),
			Cost: costs[rng.IntN(len(costs))], Time: rng.Int64(), Reason: pick(),
		}
		if rng.IntN(2) == 0 {
			e.Work = rng.Uint64()
		}
		if n := rng.IntN(80); n > 0 {
			e.Sig = make([]byte, n-1)
			for k := range e.Sig {
				e.Sig[k] = byte(rng.Uint32())
			}
		}
		if rng.IntN(3) > 0 {
			e.Tree = &TreeProof{Size: rng.Uint64(), Index: rng.Uint64()}
			for range rng.IntN(5) {
				e.Tree.Path = append(e.Tree.Path, digest())
			}
		}
		want, err := reflectedEntryJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.AppendJSON([]byte("prefix"))
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("entry %d (%+v):\n got %s\nwant prefix%s", i, e, got, want)
		}
		if m, _ := e.MarshalJSON(); !bytes.Equal(m, want) {
			t.Fatalf("entry %d: MarshalJSON %s, want %s", i, m, want)
		}
	}
	for _, c := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, werr := reflectedEntryJSON(Entry{Cost: c})
		got, err := Entry{Cost: c}.AppendJSON([]byte("x"))
		if err == nil || werr == nil || string(got) != "x" {
			t.Errorf("cost %v: %q, %v (encoding/json: %v), want an error and b as it was", c, got, err, werr)
		}
	}
}

// reflectedEntry is an Entry whose MarshalJSON is reflectedEntryJSON:
// how an entry was encoded before AppendJSON.
type reflectedEntry Entry

func (e reflectedEntry) MarshalJSON() ([]byte, error) { return reflectedEntryJSON(Entry(e)) }

// The encoding of one entry with a tree proof of 12 hashes (a batch of
// about 4,000 entries), as a receipt poll wrote it through encoding/json
// before AppendJSON ("reflect"), through encoding/json now ("marshal":
// MarshalJSON and encoding/json's re-scan of its output) and as it
// writes it now ("append").
func BenchmarkEntryJSON(b *testing.B) {
	e := Entry{Seq: 123456, Kind: KindReceipt, Pool: "bench", Task: 4242, Peer: "0123456789abcdef0123456789abcdef",
		Owner: "fedcba9876543210fedcba9876543210", Lease: NewLeaseID(), Cost: 1, Time: 1_767_000_000_000,
		Sig: make([]byte, 64), Tree: &TreeProof{Size: 4000, Index: 17, Path: make([]job.Digest, 12)}}
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal([]reflectedEntry{reflectedEntry(e)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal([]Entry{e}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = e.AppendJSON(buf[:0])
		}
	})
}
