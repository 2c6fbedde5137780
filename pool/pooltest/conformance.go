package pooltest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
)

// RefOf returns the chunk manifest of result in chunks of
// castore.MinChunkSize, as a device that kept result would submit it
// (pool.Submission.Ref): a result of more than one chunk makes a
// manifest whose Chunks slice a store must copy.
func RefOf(tb testing.TB, result []byte) *castore.Manifest {
	tb.Helper()
	m, err := castore.Split(bytes.NewReader(result), castore.MinChunkSize, nil)
	if err != nil {
		tb.Fatalf("split result: %v", err)
	}
	return &m
}

// StoreConformance checks that a pool.Store keeps the Store contract:
// batches round-trip through Load, every compare-and-set conflict fails
// the whole batch (wrapping pool.ErrConflict) and changes nothing, acks
// drop result bytes, references and holders (not the work), work counts
// round-trip, result references are
// copied in and out and cleared by an update, Entries pages and
// filters, and everything survives reopening. open returns a fresh store and a function that closes and
// reopens it (returning the same store is fine for memory stores). A
// replicated store just formed may not answer its first calls: as the
// Scheduler does with Commit (the contract's pool.ErrStoreUnavailable:
// nothing applied, the same batch may be committed again), the suite
// waits that out and commits again (commitPatiently); it also asks
// again when a read (Load, Entries, Replica) says so, which the
// contract does not define but a read cannot spoil (patiently).
func StoreConformance(t *testing.T, open func(t *testing.T) (pool.Store, func(pool.Store) pool.Store)) {
	ctx := context.Background()
	key := Key(t, "coordinator")
	owner := Key(t, "owner/bob")
	peerA, peerB := Device(t, owner, "bob-1"), Device(t, Key(t, "owner/carol"), "carol-1")
	at := time.UnixMilli(1_767_000_000_000)
	peerA.Joined, peerB.Joined = at, at.Add(time.Second)
	jobID := job.ID(sha256.Sum256([]byte("job")))
	jobRec := pool.JobRecord{ID: jobID, Canonical: []byte("canonical"), Owner: "idalice", Merger: "idalice-1", Order: 1, Added: at}
	// A replica with a result counted work: counts past 2^32 (and, for
	// the store that keeps them as signed numbers, near the largest).
	rep := func(lease string, peer pool.Peer, task int64, state string, version, prev int64, result []byte) pool.ReplicaRecord {
		r := pool.ReplicaRecord{Lease: lease, Job: jobID, Task: task, Peer: peer.ID, Owner: peer.Owner, State: state,
			Created: at, Deadline: at.Add(time.Minute), Digest: pool.ReplicaDigest(result, false, ""), Result: result,
			Version: version, Prev: prev}
		if result != nil {
			r.Work = &pool.Work{Rule: 1, Count: pool.MaxWorkCount - uint64(len(result))}
		}
		return r
	}
	entries := func(from uint64, prev job.Digest, n int, peers ...pool.Peer) []pool.Entry {
		var out []pool.Entry
		for i := range n {
			p := peers[i%len(peers)]
			e := pool.Entry{Seq: from + uint64(i), Prev: prev, Kind: pool.KindReceipt, Pool: "test", Job: jobID,
				Task: int64(i), Peer: p.ID, Owner: p.Owner, Lease: fmt.Sprint("l", i), Cost: 1.5, Work: 150_000_000 + uint64(i), Time: at.UnixMilli()}
			e.Sig = key.Sign(e.Canonical(false))
			prev = e.Hash()
			out = append(out, e)
		}
		return out
	}
	first := &pool.Batch{
		Peers:    []pool.Peer{peerA, peerB},
		Jobs:     []pool.JobRecord{jobRec},
		Replicas: []pool.ReplicaRecord{rep("l0", peerA, 0, pool.ReplicaLeased, 2, 0, nil), rep("l1", peerB, 0, pool.ReplicaReturned, 1, 0, []byte("r"))},
		Outcomes: []pool.OutcomeRecord{{Job: jobID, Digest: pool.ReplicaDigest([]byte("r"), false, ""),
			Verified: pool.Verified{Seq: 1, Task: 5, Status: pool.OutcomeOK, Result: []byte("r"), Work: 1 << 40}}},
		Entries: entries(1, job.Digest{}, 3, peerA, peerB),
	}
	opts := cmp.Options{cmpopts.EquateEmpty()}
	want := func(b *pool.Batch) *pool.Snapshot {
		s := &pool.Snapshot{Peers: b.Peers, Jobs: b.Jobs, Outcomes: b.Outcomes}
		for _, r := range b.Replicas {
			r.Prev = 0
			s.Replicas = append(s.Replicas, r)
		}
		s.LedgerSeq = b.Entries[len(b.Entries)-1].Seq
		s.LedgerHash = b.Entries[len(b.Entries)-1].Hash()
		return s
	}
	load := func(t *testing.T, st pool.Store) *pool.Snapshot {
		t.Helper()
		s, err := patiently(t, "Load", func() (*pool.Snapshot, error) { return st.Load(ctx) })
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		return s
	}

	t.Run("round trip and reopen", func(t *testing.T) {
		st, reopen := open(t)
		if s := load(t, st); len(s.Peers)+len(s.Jobs)+len(s.Replicas)+len(s.Outcomes) != 0 || s.LedgerSeq != 0 {
			t.Fatalf("a new store is not empty: %+v", s)
		}
		if err := commitPatiently(t, st, first); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		if diff := cmp.Diff(want(first), load(t, st), opts); diff != "" {
			t.Fatalf("Load (-want +got):\n%s", diff)
		}
		st = reopen(st)
		if diff := cmp.Diff(want(first), load(t, st), opts); diff != "" {
			t.Fatalf("Load after reopening (-want +got):\n%s", diff)
		}
		es, err := patiently(t, "Entries", func() ([]pool.Entry, error) { return st.Entries(ctx, pool.EntryQuery{Max: 10}) })
		if err != nil || !cmp.Equal(first.Entries, es, opts) {
			t.Fatalf("Entries: %v\n%s", err, cmp.Diff(first.Entries, es, opts))
		}
	})

	t.Run("conflicts change nothing", func(t *testing.T) {
		st, _ := open(t)
		if err := commitPatiently(t, st, first); err != nil {
			t.Fatal(err)
		}
		before := load(t, st)
		head := before.LedgerHash
		good := func() pool.Batch {
			return pool.Batch{
				Replicas: []pool.ReplicaRecord{rep("l2", peerB, 1, pool.ReplicaLeased, 1, 0, nil)},
				Entries:  entries(4, head, 1, peerA),
			}
		}
		tests := []struct {
			name  string
			spoil func(*pool.Batch)
		}{
			{"replica at another version", func(b *pool.Batch) {
				b.Replicas = append(b.Replicas, rep("l0", peerA, 0, pool.ReplicaExpired, 4, 1, nil))
			}},
			{"replica inserted twice", func(b *pool.Batch) {
				b.Replicas = append(b.Replicas, rep("l1", peerB, 0, pool.ReplicaLeased, 1, 0, nil))
			}},
			{"ledger gap", func(b *pool.Batch) { b.Entries = entries(5, head, 1, peerA) }},
			{"ledger repeats a seq", func(b *pool.Batch) { b.Entries = entries(3, head, 1, peerA) }},
			{"ledger chain broken", func(b *pool.Batch) { b.Entries = entries(4, job.Digest{1}, 1, peerA) }},
			{"outcome seq twice", func(b *pool.Batch) {
				b.Outcomes = []pool.OutcomeRecord{{Job: jobID, Verified: pool.Verified{Seq: 1, Task: 9, Status: pool.OutcomeOK}}}
			}},
			{"outcome task twice", func(b *pool.Batch) {
				b.Outcomes = []pool.OutcomeRecord{{Job: jobID, Verified: pool.Verified{Seq: 2, Task: 5, Status: pool.OutcomeOK}}}
			}},
			{"ack from another mark", func(b *pool.Batch) { b.Acks = []pool.AckRecord{{Job: jobID, Prev: 3, Upto: 4}} }},
			{"job twice", func(b *pool.Batch) { b.Jobs = []pool.JobRecord{jobRec} }},
			{"cancel of an unknown job", func(b *pool.Batch) {
				b.Cancels = []pool.CancelRecord{{Job: job.ID{9}, At: at}}
			}},
			{"cancel twice in a batch", func(b *pool.Batch) {
				b.Cancels = []pool.CancelRecord{{Job: jobID, At: at}, {Job: jobID, At: at.Add(time.Second)}}
			}},
			{"peer with other keys", func(b *pool.Batch) {
				p := peerA
				p.OwnerKey = peerB.OwnerKey
				b.Peers = []pool.Peer{p}
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				b := good()
				tc.spoil(&b)
				err := commitPatiently(t, st, &b)
				if !errors.Is(err, pool.ErrConflict) {
					t.Fatalf("Commit: %v, want pool.ErrConflict", err)
				}
				if diff := cmp.Diff(before, load(t, st), opts); diff != "" {
					t.Fatalf("a failed batch changed the store (-before +after):\n%s", diff)
				}
			})
		}
		b := good()
		if err := commitPatiently(t, st, &b); err != nil {
			t.Fatalf("the unspoilt batch: %v", err)
		}
	})

	t.Run("cancel once", func(t *testing.T) {
		st, reopen := open(t)
		if err := commitPatiently(t, st, first); err != nil {
			t.Fatal(err)
		}
		withdraw := &pool.Batch{
			Replicas: []pool.ReplicaRecord{rep("l0", peerA, 0, pool.ReplicaWithdrawn, 3, 2, nil)},
			Cancels:  []pool.CancelRecord{{Job: jobID, At: at.Add(time.Hour)}},
		}
		if err := commitPatiently(t, st, withdraw); err != nil {
			t.Fatalf("Commit cancel: %v", err)
		}
		st = reopen(st)
		s := load(t, st)
		withArchived(t, st, s, "l0") // withdrawn, of a cancelled job
		if len(s.Jobs) != 1 || !s.Jobs[0].Cancelled.Equal(at.Add(time.Hour)) || s.Replicas[0].State != pool.ReplicaWithdrawn {
			t.Errorf("after cancel: job %+v, replica %+v", s.Jobs, s.Replicas[0])
		}
		again := &pool.Batch{Cancels: []pool.CancelRecord{{Job: jobID, At: at.Add(2 * time.Hour)}}}
		if err := commitPatiently(t, st, again); !errors.Is(err, pool.ErrConflict) {
			t.Fatalf("second cancel: %v, want pool.ErrConflict", err)
		}
		after := load(t, st)
		withArchived(t, st, after, "l0")
		if diff := cmp.Diff(s, after, opts); diff != "" {
			t.Errorf("a refused cancel changed the store (-before +after):\n%s", diff)
		}
	})

	t.Run("updates, acks and entry queries", func(t *testing.T) {
		st, reopen := open(t)
		if err := commitPatiently(t, st, first); err != nil {
			t.Fatal(err)
		}
		head := first.Entries[2].Hash()
		more := entries(4, head, 5, peerA, peerB)
		b := &pool.Batch{
			Replicas: []pool.ReplicaRecord{
				rep("l0", peerA, 0, pool.ReplicaReturned, 3, 2, []byte("s")),
				rep("l1", peerB, 0, pool.ReplicaAgreed, 2, 1, nil),
			},
			Outcomes: []pool.OutcomeRecord{{Job: jobID, Verified: pool.Verified{Seq: 2, Task: 0, Status: pool.OutcomeOK, Result: []byte("t")}}},
			Acks:     []pool.AckRecord{{Job: jobID, Prev: 0, Upto: 1}},
			Entries:  more,
		}
		if err := commitPatiently(t, st, b); err != nil {
			t.Fatal(err)
		}
		st = reopen(st)
		s := load(t, st)
		withArchived(t, st, s, "l1") // agreed, its task decided
		if len(s.Replicas) != 2 || string(s.Replicas[0].Result) != "s" || s.Replicas[0].Version != 3 || s.Replicas[1].Result != nil || s.Replicas[1].State != pool.ReplicaAgreed ||
			!cmp.Equal(s.Replicas[0].Work, &pool.Work{Rule: 1, Count: pool.MaxWorkCount - 1}) || s.Replicas[1].Work != nil {
			t.Errorf("replicas after update: %+v", s.Replicas)
		}
		if len(s.Summaries) > 0 {
			// A store that summarised the acknowledged outcome.
			want := []pool.OutcomeSummary{{Job: jobID, Upto: 1, Accepted: 1, Decided: []pool.TaskRange{{From: 5, To: 6}}}}
			if !cmp.Equal(want, s.Summaries) || len(s.Outcomes) != 1 || s.Outcomes[0].Seq != 2 || string(s.Outcomes[0].Result) != "t" || s.Jobs[0].Acked != 1 {
				t.Errorf("outcomes after ack to 1: %+v, summaries %+v, acked %d", s.Outcomes, s.Summaries, s.Jobs[0].Acked)
			}
		} else if len(s.Outcomes) != 2 || s.Outcomes[0].Result != nil || s.Outcomes[0].Work != 1<<40 || string(s.Outcomes[1].Result) != "t" || s.Jobs[0].Acked != 1 {
			t.Errorf("outcomes after ack to 1: %+v, acked %d", s.Outcomes, s.Jobs[0].Acked)
		}
		if s.LedgerSeq != 8 || s.LedgerHash != more[4].Hash() {
			t.Errorf("ledger head %d", s.LedgerSeq)
		}
		all := append(append([]pool.Entry(nil), first.Entries...), more...)
		queries := []struct {
			q    pool.EntryQuery
			want []pool.Entry
		}{
			{pool.EntryQuery{After: 0, Max: 100}, all},
			{pool.EntryQuery{After: 2, Max: 3}, all[2:5]},
			{pool.EntryQuery{After: 8, Max: 3}, nil},
			{pool.EntryQuery{After: 0, Max: 0}, nil},
			{pool.EntryQuery{After: 1, Max: 2, Peer: peerA.ID}, []pool.Entry{all[2], all[3]}},
			{pool.EntryQuery{After: 0, Max: 100, Peer: "idnobody"}, nil},
		}
		for _, q := range queries {
			got, err := patiently(t, "Entries", func() ([]pool.Entry, error) { return st.Entries(ctx, q.q) })
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(q.want, got, opts); diff != "" {
				t.Errorf("Entries(%+v) (-want +got):\n%s", q.q, diff)
			}
		}
	})

	t.Run("acknowledged outcomes summarised", func(t *testing.T) {
		st, reopen := open(t)
		if err := commitPatiently(t, st, first); err != nil { // outcome 1: task 5
			t.Fatal(err)
		}
		b := &pool.Batch{
			Outcomes: []pool.OutcomeRecord{
				{Job: jobID, Verified: pool.Verified{Seq: 2, Task: 0, Status: pool.OutcomeOK, Result: []byte("t")}},
				{Job: jobID, Verified: pool.Verified{Seq: 3, Task: 6, Status: pool.OutcomeFailed, Reason: "no quorum"}},
				{Job: jobID, Verified: pool.Verified{Seq: 4, Task: 4, Status: pool.OutcomeOK, Result: []byte("u")}},
			},
			Acks: []pool.AckRecord{{Job: jobID, Prev: 0, Upto: 3}},
		}
		if err := commitPatiently(t, st, b); err != nil {
			t.Fatal(err)
		}
		if f, ok := st.(OutcomeForgetter); ok {
			if n := f.ForgetAcked(); n != 3 {
				t.Errorf("ForgetAcked folded %d outcomes, want 3", n)
			}
		}
		st = reopen(st)
		check := func(t *testing.T, st pool.Store, want Decided) {
			t.Helper()
			got, err := DecidedOf(load(t, st), jobID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, opts); diff != "" {
				t.Errorf("decided outcomes (-want +got):\n%s", diff)
			}
		}
		check(t, st, Decided{Outcomes: 4, Accepted: 3, Failed: 1, Tasks: []int64{0, 4, 5, 6}, Unacked: map[int64]string{4: "u"}})
		for _, o := range []pool.Verified{{Seq: 1, Task: 9}, {Seq: 3, Task: 9}, {Seq: 5, Task: 5}, {Seq: 5, Task: 6}, {Seq: 5, Task: 4}} {
			o.Status = pool.OutcomeOK
			err := commitPatiently(t, st, &pool.Batch{Outcomes: []pool.OutcomeRecord{{Job: jobID, Verified: o}}})
			if !errors.Is(err, pool.ErrConflict) {
				t.Errorf("outcome %d for task %d after the summary: %v, want pool.ErrConflict", o.Seq, o.Task, err)
			}
		}
		b = &pool.Batch{
			Outcomes: []pool.OutcomeRecord{{Job: jobID, Verified: pool.Verified{Seq: 5, Task: 7, Status: pool.OutcomeOK, Result: []byte("v")}}},
			Acks:     []pool.AckRecord{{Job: jobID, Prev: 3, Upto: 4}},
		}
		if err := commitPatiently(t, st, b); err != nil {
			t.Fatalf("a new outcome and ack after the summary: %v", err)
		}
		if f, ok := st.(OutcomeForgetter); ok {
			f.ForgetAcked()
		}
		st = reopen(st)
		check(t, st, Decided{Outcomes: 5, Accepted: 4, Failed: 1, Tasks: []int64{0, 4, 5, 6, 7}, Unacked: map[int64]string{5: "v"}})
	})

	t.Run("result references", func(t *testing.T) {
		st, reopen := open(t)
		big := bytes.Repeat([]byte("kept by the device "), 1000) // 19,000 bytes: 5 chunks
		// batch returns a new batch each time, so that one can be
		// spoilt after its Commit and compared with a fresh one.
		batch := func() *pool.Batch {
			ref := RefOf(t, big)
			byRef := rep("l1", peerB, 0, pool.ReplicaReturned, 1, 0, nil)
			byRef.Digest, byRef.Ref = ref.SHA256, ref
			return &pool.Batch{
				Peers:    []pool.Peer{peerA, peerB},
				Jobs:     []pool.JobRecord{jobRec},
				Replicas: []pool.ReplicaRecord{rep("l0", peerA, 0, pool.ReplicaLeased, 1, 0, nil), byRef},
				Outcomes: []pool.OutcomeRecord{
					{Job: jobID, Digest: ref.SHA256, Verified: pool.Verified{Seq: 1, Task: 5, Status: pool.OutcomeOK,
						Ref: RefOf(t, big), Holders: []string{peerB.ID, peerA.ID}}},
					{Job: jobID, Digest: pool.ReplicaDigest([]byte("r"), false, ""),
						Verified: pool.Verified{Seq: 2, Task: 6, Status: pool.OutcomeOK, Result: []byte("r")}},
				},
				Entries: entries(1, job.Digest{}, 1, peerA),
			}
		}
		b := batch()
		if err := commitPatiently(t, st, b); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		// The store keeps its own copies: changing the committed batch
		// or a loaded snapshot changes nothing stored.
		b.Replicas[1].Ref.Chunks[0].Size, b.Outcomes[0].Ref.Chunks[1].Digest[0], b.Outcomes[0].Holders[0] = 1, 1, "idmallory-1"
		s := load(t, st)
		if diff := cmp.Diff(want(batch()), s, opts); diff != "" {
			t.Fatalf("Load (-want +got):\n%s", diff)
		}
		s.Replicas[1].Ref.Chunks[0].Size, s.Outcomes[0].Ref.Chunks[1].Digest[0], s.Outcomes[0].Holders[0] = 1, 1, "idmallory-1"
		st = reopen(st)
		if diff := cmp.Diff(want(batch()), load(t, st), opts); diff != "" {
			t.Fatalf("Load after reopening (-want +got):\n%s", diff)
		}
		if ar, ok := st.(pool.ReplicaArchive); ok {
			got, err := patiently(t, "Replica", func() (pool.ReplicaRecord, error) { return ar.Replica(ctx, "l1") })
			if err != nil {
				t.Fatalf("Replica: %v", err)
			}
			if diff := cmp.Diff(RefOf(t, big), got.Ref, opts); diff != "" {
				t.Errorf("Replica(l1).Ref (-want +got):\n%s", diff)
			}
		}

		// Deciding the task clears the replica's reference; the ack drops
		// outcome 1's reference and holders and leaves outcome 2's result.
		decided := rep("l1", peerB, 0, pool.ReplicaAgreed, 2, 1, nil)
		decided.Digest = b.Replicas[1].Digest
		if err := commitPatiently(t, st, &pool.Batch{
			Replicas: []pool.ReplicaRecord{decided},
			Acks:     []pool.AckRecord{{Job: jobID, Prev: 0, Upto: 1}},
		}); err != nil {
			t.Fatalf("Commit decision and ack: %v", err)
		}
		st = reopen(st)
		after := want(batch())
		decided.Prev = 0
		after.Replicas[1] = decided
		after.Jobs[0].Acked = 1
		after.Outcomes[0].Ref, after.Outcomes[0].Holders = nil, nil
		got := load(t, st)
		withArchived(t, st, got, "l1") // agreed
		if len(got.Summaries) > 0 {
			// A store that summarised the acknowledged outcome.
			o := after.Outcomes[0]
			after.Summaries = []pool.OutcomeSummary{{Job: o.Job, Upto: 1, Accepted: 1, Decided: []pool.TaskRange{{From: o.Task, To: o.Task + 1}}}}
			after.Outcomes = after.Outcomes[1:]
		}
		if diff := cmp.Diff(after, got, opts); diff != "" {
			t.Errorf("Load after the decision and ack (-want +got):\n%s", diff)
		}
		if ar, ok := st.(pool.ReplicaArchive); ok {
			if got, err := patiently(t, "Replica", func() (pool.ReplicaRecord, error) { return ar.Replica(ctx, "l1") }); err != nil || got.Ref != nil {
				t.Errorf("Replica(l1) after the decision: Ref %+v, %v; want none", got.Ref, err)
			}
		}
	})

	t.Run("trust records compare and set", func(t *testing.T) {
		st, reopen := open(t)
		rec := func(id, body string, version, prev int64) pool.TrustRecord {
			return pool.TrustRecord{Kind: pool.TrustDevice, ID: id, Record: []byte(body), Version: version, Prev: prev}
		}
		commit := func(recs ...pool.TrustRecord) error {
			return commitPatiently(t, st, &pool.Batch{Trust: recs})
		}
		if err := commit(rec("d1", `{"agreed":1}`, 1, 0), pool.TrustRecord{Kind: pool.TrustOwner, ID: "o1", Record: []byte(`{}`), Version: 1}); err != nil {
			t.Fatal(err)
		}
		if err := commit(rec("d1", `{"agreed":2}`, 2, 1)); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []pool.TrustRecord{rec("d1", `{"agreed":9}`, 2, 1), rec("d1", `{"agreed":9}`, 1, 0)} {
			if err := commit(rec("d2", `{}`, 1, 0), bad); !errors.Is(err, pool.ErrConflict) {
				t.Fatalf("stale trust record %+v: %v, want pool.ErrConflict", bad, err)
			}
		}
		st = reopen(st)
		got := load(t, st).Trust
		want := []pool.TrustRecord{rec("d1", `{"agreed":2}`, 2, 0), {Kind: pool.TrustOwner, ID: "o1", Record: []byte(`{}`), Version: 1}}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Errorf("trust records after reopen (-want +got):\n%s", diff)
		}
	})
}

// withArchived puts back into s, in its order, those of leases that a
// Store that is a ReplicaArchive left out of Load as done
// (pool.Snapshot.Replicas): each must still be returned by its lease.
// Of another Store, s must hold them all already.
func withArchived(t *testing.T, st pool.Store, s *pool.Snapshot, leases ...string) {
	t.Helper()
	ar, ok := st.(pool.ReplicaArchive)
	if !ok {
		return
	}
	for _, l := range leases {
		if slices.ContainsFunc(s.Replicas, func(r pool.ReplicaRecord) bool { return r.Lease == l }) {
			continue
		}
		r, err := patiently(t, "Replica", func() (pool.ReplicaRecord, error) { return ar.Replica(context.Background(), l) })
		if err != nil {
			t.Fatalf("Replica(%s), left out of Load as done: %v", l, err)
		}
		s.Replicas = append(s.Replicas, r)
	}
	slices.SortStableFunc(s.Replicas, func(a, b pool.ReplicaRecord) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Lease, b.Lease)
	})
}

// commitPatiently commits b to st as the Scheduler does: while Commit
// fails with pool.ErrStoreUnavailable (nothing applied, the same batch
// may be committed again) it commits b again (patiently). A replicated
// store just formed may not answer its first appends (a stream leader
// not elected yet on a busy machine); committing again must then apply
// b once. A conflict after such a try says that the try applied
// something, against the contract.
func commitPatiently(tb testing.TB, st pool.Store, b *pool.Batch) error {
	tb.Helper()
	unavailable := false
	_, err := patiently(tb, "Commit", func() (struct{}, error) {
		err := st.Commit(context.Background(), b)
		unavailable = unavailable || errors.Is(err, pool.ErrStoreUnavailable)
		return struct{}{}, err
	})
	if unavailable && errors.Is(err, pool.ErrConflict) {
		return fmt.Errorf("%w (committed again after a try said pool.ErrStoreUnavailable: if this batch conflicts with nothing else, that try applied something, where the contract says nothing was applied)", err)
	}
	return err
}

// patientTries bounds patiently: 20 tries, 50 ms apart doubling to 2 s,
// about half a minute in all, for a store that has not answered yet
// (a cluster electing its stream's leader takes seconds); one that
// never answers fails each call in that time.
const patientTries = 20

// patiently calls f until it returns anything but an error wrapping
// pool.ErrStoreUnavailable, at most patientTries times, logging each
// wait on tb, and returns f's last answer. Any other error, or the
// last unavailability, is the caller's to judge.
func patiently[T any](tb testing.TB, what string, f func() (T, error)) (T, error) {
	tb.Helper()
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		v, err := f()
		if err == nil || !errors.Is(err, pool.ErrStoreUnavailable) || try == patientTries {
			return v, err
		}
		tb.Logf("%s, try %d: %v; trying again in %v", what, try, err, wait)
		time.Sleep(wait) // the store's own timeouts bound each try
		wait = min(2*wait, 2*time.Second)
	}
}
