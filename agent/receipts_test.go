package agent

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/home"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// recordingStore is an agent Store that records what the receipt follower
// asks of it.
type recordingStore struct {
	calls []string
}

func (s *recordingStore) AddPending(context.Context, store.Contribution) error { return nil }
func (s *recordingStore) Unacknowledged(context.Context, string) ([]store.Contribution, error) {
	return nil, nil
}
func (s *recordingStore) MarkAcknowledged(context.Context, string) error { return nil }
func (s *recordingStore) Confirm(_ context.Context, lease string, e pool.Entry) error {
	s.calls = append(s.calls, "confirm "+lease)
	return nil
}
func (s *recordingStore) AddAbandoned(_ context.Context, c store.Contribution, reason string) error {
	s.calls = append(s.calls, "abandon "+c.Lease+": "+reason)
	return nil
}

func (s *recordingStore) Reject(_ context.Context, lease, reason string) error {
	s.calls = append(s.calls, "reject "+lease+": "+reason)
	return nil
}
func (s *recordingStore) LedgerCursor(context.Context, string) (uint64, error)  { return 0, nil }
func (s *recordingStore) SetLedgerCursor(context.Context, string, uint64) error { return nil }

type noExec struct{}

func (noExec) Run(context.Context, worker.Request) (worker.Result, error) {
	return worker.Result{}, nil
}

func TestReceiptsAreChecked(t *testing.T) {
	gen := func() *identity.Key {
		k, err := identity.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	coordKey, forger, dev := gen(), gen(), gen()
	entry := func(kind, peer, lease, reason string, signer *identity.Key) pool.Entry {
		e := pool.Entry{Seq: 7, Kind: kind, Pool: "lab", Job: job.ID{1}, Task: 3, Peer: peer, Owner: "idowner", Lease: lease, Reason: reason}
		if kind == pool.KindReceipt {
			e.Cost = 2
		}
		e.Sig = signer.Sign(e.Canonical(false))
		return e
	}
	tampered := entry(pool.KindDeviation, dev.ID(), "l6", "", coordKey)
	tampered.Kind = pool.KindReceipt // turned into a receipt after signing
	// batched signs e in the middle of a batch of three, with one
	// signature over the batch's Merkle tree head (as the coordinator
	// signs now); the entries above are signed alone, as before.
	batched := func(e pool.Entry, signer *identity.Key) pool.Entry {
		b := []pool.Entry{e, e, e}
		b[0].Lease, b[2].Lease = "other-0", "other-2"
		pool.SignBatch(b, job.Digest{}, signer.Sign)
		return b[1]
	}
	plainReceipt := pool.Entry{Seq: 7, Kind: pool.KindReceipt, Pool: "lab", Job: job.ID{1}, Task: 3, Peer: dev.ID(), Owner: "idowner", Lease: "l7", Cost: 2}
	batchTampered := batched(plainReceipt, coordKey)
	batchTampered.Cost = 20
	tests := []struct {
		name  string
		entry pool.Entry
		want  []string
	}{
		{"receipt", entry(pool.KindReceipt, dev.ID(), "l1", "", coordKey), []string{"confirm l1"}},
		{"deviation", entry(pool.KindDeviation, dev.ID(), "l2", "returned other bytes", coordKey), []string{"reject l2: deviation: returned other bytes"}},
		{"unverified", entry(pool.KindUnverified, dev.ID(), "l3", "", coordKey), []string{"reject l3: unverified: no majority agreed within the replica limit"}},
		{"forged signature", entry(pool.KindReceipt, dev.ID(), "l4", "", forger), nil},
		{"another peer's", entry(pool.KindReceipt, forger.ID(), "l5", "", coordKey), nil},
		{"changed after signing", tampered, nil},
		{"receipt signed with its batch", batched(plainReceipt, coordKey), []string{"confirm l7"}},
		{"batch signed by another key", batched(plainReceipt, forger), nil},
		{"batched and changed after signing", batchTampered, nil},
	}
	// One verifier for all, as a device has: it has seen the batch's
	// head when the changed entry of that batch comes.
	verifier := pool.NewEntryVerifier(coordKey.Public())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &recordingStore{}
			a, err := New(Config{PoolURL: "http://127.0.0.1:1", Home: home.Dirs{Config: t.TempDir(), Cache: t.TempDir()},
				DeviceKey: dev, OwnerKey: gen(), Executor: noExec{}, Store: st})
			if err != nil {
				t.Fatal(err)
			}
			a.poolName, a.poolKey = "lab", ed25519.PublicKey(coordKey.Public())
			a.verifier = verifier
			if err := a.applyEntry(context.Background(), tc.entry); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, st.calls); diff != "" {
				t.Errorf("store calls (-want +got):\n%s", diff)
			}
		})
	}
}
