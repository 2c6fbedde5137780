package pool_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// sampleLedger returns a real ledger: receipts, a deviation and unverified
// marks from a scheduler run.
func sampleLedger(t *testing.T) ([]pool.Entry, *pooltest.Harness) {
	return sampleLedgerIn(t, pool.NewMemStore())
}

// sampleLedgerIn is sampleLedger with the Scheduler's store given.
func sampleLedgerIn(t *testing.T, store pool.Store) ([]pool.Entry, *pooltest.Harness) {
	h := newHarness(t, store, func(c *pool.SchedulerConfig) { c.MaxReplicas = 4 })
	alice := h.Device("alice", "alice-1")
	b, c, d := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	e := h.Device("erin", "erin-1")
	h.Job("ledger", 2, pooltest.Policy{TaskCost: 0.1}, alice)
	lb, lc := h.Lease(b, 2), h.Lease(c, 2)
	h.Submit(lb[0], good(0))
	h.Submit(lc[0], bad(0))
	h.Submit(lb[1], pooltest.Result([]byte("x")))
	h.Submit(lc[1], pooltest.Result([]byte("y")))
	ld := h.Lease(d, 2)
	h.Submit(ld[1], pooltest.Result([]byte("z"))) // task 1: three digests, no majority can form within 4 replicas
	h.Submit(ld[0], good(0))                      // task 0: 2-1 after a split, a bare majority: one more
	le := h.Lease(e, 2)
	h.Submit(le[0], good(0)) // task 0: receipts for b, d and e, a deviation for c
	es := h.Ledger()
	if len(es) != 7 {
		t.Fatalf("%d entries, want 7: %+v", len(es), summarize(es))
	}
	return es, h
}

func TestLedgerVerify(t *testing.T) {
	es, h := sampleLedger(t)
	pub := h.S.PublicKey()
	forger := pooltest.Key(t, "forger")
	clone := func() []pool.Entry {
		out := make([]pool.Entry, len(es))
		for i, e := range es {
			e.Sig = bytes.Clone(e.Sig)
			out[i] = e
		}
		return out
	}
	tests := []struct {
		name    string
		tamper  func([]pool.Entry) []pool.Entry
		wantSeq uint64 // 0: verifies
	}{
		{"untouched", func(l []pool.Entry) []pool.Entry { return l }, 0},
		{"empty", func(l []pool.Entry) []pool.Entry { return nil }, 0},
		{"prefix", func(l []pool.Entry) []pool.Entry { return l[:3] }, 0},
		{"flipped digest byte", func(l []pool.Entry) []pool.Entry { l[2].Digest[5] ^= 1; return l }, 3},
		{"raised cost", func(l []pool.Entry) []pool.Entry { l[1].Cost = 1e6; return l }, 2},
		{"raised work", func(l []pool.Entry) []pool.Entry { l[1].Work++; return l }, 2},
		{"other peer", func(l []pool.Entry) []pool.Entry { l[0].Peer = l[2].Peer; return l }, 1},
		{"flipped signature byte", func(l []pool.Entry) []pool.Entry { l[4].Sig[10] ^= 0x80; return l }, 5},
		{"flipped prev byte", func(l []pool.Entry) []pool.Entry { l[3].Prev[0] ^= 1; return l }, 4},
		{"removed entry", func(l []pool.Entry) []pool.Entry { return append(l[:2], l[3:]...) }, 3},
		{"removed and renumbered", func(l []pool.Entry) []pool.Entry {
			l = append(l[:2], l[3:]...)
			for i := range l {
				l[i].Seq = uint64(i + 1)
			}
			return l
		}, 3},
		{"reordered pair", func(l []pool.Entry) []pool.Entry { l[3], l[4] = l[4], l[3]; return l }, 4},
		{"duplicated entry", func(l []pool.Entry) []pool.Entry { return append(l[:4], l[3:]...) }, 5},
		{"starts after 1", func(l []pool.Entry) []pool.Entry { return l[1:] }, 1},
		{"forged signature", func(l []pool.Entry) []pool.Entry {
			l[2].Cost = 99
			l[2].Sig = forger.Sign(l[2].Canonical(false))
			return l
		}, 3},
		{"unknown kind", func(l []pool.Entry) []pool.Entry { l[0].Kind = "bonus"; return l }, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := pool.VerifyLedger(tc.tamper(clone()), pub)
			if tc.wantSeq == 0 {
				if err != nil {
					t.Fatalf("VerifyLedger: %v", err)
				}
				return
			}
			var le *pool.LedgerError
			if !errors.As(err, &le) || !errors.Is(err, pool.ErrLedger) {
				t.Fatalf("VerifyLedger: %v, want a *LedgerError", err)
			}
			if le.Seq != tc.wantSeq {
				t.Errorf("first bad entry %d (%v), want %d", le.Seq, err, tc.wantSeq)
			}
		})
	}
	// A whole ledger re-signed by another key verifies only with that key.
	if err := pool.VerifyLedger(es, forger.Public()); !errors.Is(err, pool.ErrLedger) {
		t.Errorf("VerifyLedger with another key: %v", err)
	}
	for _, e := range es {
		if err := pool.VerifyEntry(e, pub); err != nil {
			t.Errorf("VerifyEntry %d: %v", e.Seq, err)
		}
	}
}

func TestLedgerKinds(t *testing.T) {
	es, _ := sampleLedger(t)
	var kinds []string
	for _, e := range es {
		kinds = append(kinds, e.Kind)
	}
	want := []string{pool.KindUnverified, pool.KindUnverified, pool.KindUnverified, pool.KindReceipt, pool.KindDeviation, pool.KindReceipt, pool.KindReceipt}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds in ledger order (-want +got):\n%s", diff)
	}
	if es[3].Cost != 0.1 || es[4].Cost != 0 || es[0].Cost != 0 {
		t.Errorf("costs %v %v %v: receipts carry the planner's cost, other entries none", es[3].Cost, es[4].Cost, es[0].Cost)
	}
}

// The JSON Lines form round-trips exactly and still verifies.
func TestLedgerJSON(t *testing.T) {
	es, h := sampleLedger(t)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range es {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	var back []pool.Entry
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var e pool.Entry
		if err := dec.Decode(&e); err != nil {
			t.Fatal(err)
		}
		back = append(back, e)
	}
	if diff := cmp.Diff(es, back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	if err := pool.VerifyLedger(back, h.S.PublicKey()); err != nil {
		t.Fatal(err)
	}
	var e pool.Entry
	if err := json.Unmarshal([]byte(`{"seq":1,"bonus":5}`), &e); err == nil {
		t.Error("an unknown key was accepted")
	}
}

// FuzzEntryJSON feeds arbitrary bytes to the decoder of downloaded ledger
// lines: it must not panic, and what it accepts must encode back to an
// equal entry.
func FuzzEntryJSON(f *testing.F) {
	f.Add([]byte(`{"seq":1,"prev":"0000000000000000000000000000000000000000000000000000000000000000","kind":"receipt","pool":"p","job":"0000000000000000000000000000000000000000000000000000000000000000","task":3,"peer":"idx","owner":"idy","lease":"l","digest":"0000000000000000000000000000000000000000000000000000000000000000","cost":1.5,"time":5,"sig":"AAAA"}`))
	f.Add([]byte(`{"seq":2,"prev":"0000000000000000000000000000000000000000000000000000000000000000","kind":"receipt","pool":"p","job":"0000000000000000000000000000000000000000000000000000000000000000","task":3,"peer":"idx","owner":"idy","lease":"l","digest":"0000000000000000000000000000000000000000000000000000000000000000","cost":1.5,"time":5,"sig":"AAAA","tree":{"size":3,"index":2,"path":["0000000000000000000000000000000000000000000000000000000000000000"]}}`))
	f.Add([]byte(`{"seq":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e pool.Entry
		if err := json.Unmarshal(b, &e); err != nil {
			return
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var back pool.Entry
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !cmp.Equal(e, back) && e.Cost == e.Cost { // NaN never equals itself
			t.Fatalf("round trip changed the entry:\n%s", cmp.Diff(e, back))
		}
		_ = pool.VerifyEntry(e, pooltest.Key(t, "c").Public())
	})
}
