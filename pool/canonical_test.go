package pool

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"idlepool/job"
)

// canonicalMap is Canonical as it was first written: a map with the same
// keys and values, encoded by the same mode, and "work" when not 0.
// Entries signed then must verify now.
func canonicalMap(e Entry, withSig bool) []byte {
	m := map[string]any{
		"type": ledgerDomain, "seq": e.Seq, "prev": e.Prev[:], "kind": e.Kind, "pool": e.Pool, "job": e.Job[:],
		"task": e.Task, "peer": e.Peer, "owner": e.Owner, "lease": e.Lease, "digest": e.Digest[:], "cost": e.Cost,
		"time": e.Time, "reason": e.Reason,
	}
	if e.Work != 0 { // added later, absent at 0: older entries keep their bytes
		m["work"] = e.Work
	}
	if withSig {
		m["sig"] = e.Sig
	}
	b, err := ledgerEncMode.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func TestCanonicalMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(' ' + rng.IntN(95))
		}
		return string(b)
	}
	costs := []float64{0, 1, 0.5, 1000, 1e-300, 3.25, 65504, 65505, 1.0 / 3}
	for i := range 2000 {
		e := Entry{
			Seq: rng.Uint64() >> rng.IntN(64), Kind: []string{KindReceipt, KindDeviation, KindUnverified, KindRevocation}[i%4],
			Pool: str(), Task: rng.Int64() >> rng.IntN(64), Peer: str(), Owner: str(), Lease: str(),
			Cost: costs[i%len(costs)] * float64(rng.IntN(5)), Time: rng.Int64N(1 << 45), Reason: str(),
		}
		if i%2 == 0 {
			e.Work = rng.Uint64() >> rng.IntN(64)
		}
		if i%3 == 0 {
			e.Task = -e.Task
		}
		for _, d := range []*job.Digest{&e.Prev, (*job.Digest)(&e.Job), &e.Digest} {
			for k := range d {
				d[k] = byte(rng.Uint32())
			}
		}
		if i%5 != 0 {
			e.Sig = make([]byte, 64)
			for k := range e.Sig {
				e.Sig[k] = byte(rng.Uint32())
			}
		}
		for _, withSig := range []bool{false, true} {
			if got, want := e.Canonical(withSig), canonicalMap(e, withSig); !bytes.Equal(got, want) {
				t.Fatalf("entry %+v, withSig %v:\ngot  %x\nwant %x", e, withSig, got, want)
			}
		}
	}
}
