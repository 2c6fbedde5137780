package pool_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// movedStore is a MemStore whose done replicas are moved out at every
// reopening, as a clustered Store moves them to its archive: the new
// MemStore is built from the LiveImage, and Replica answers for a moved
// replica from the archive.
type movedStore struct {
	*pool.MemStore
	archive map[string]pool.ReplicaRecord
	moved   int
}

func (s *movedStore) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	r, err := s.MemStore.Replica(ctx, lease)
	if !errors.Is(err, pool.ErrUnknownLease) {
		return r, err
	}
	if r, ok := s.archive[lease]; ok {
		return r, nil
	}
	return pool.ReplicaRecord{}, err
}

// ackAll commits what a merger that merged every outcome so far
// commits: each job acknowledged up to its last outcome.
func ackAll(t *testing.T, st pool.Store) {
	t.Helper()
	ctx := context.Background()
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[job.ID]int64{}
	for _, o := range snap.Outcomes {
		last[o.Job] = o.Seq
	}
	b := &pool.Batch{}
	for _, j := range snap.Jobs {
		if last[j.ID] > j.Acked {
			b.Acks = append(b.Acks, pool.AckRecord{Job: j.ID, Prev: j.Acked, Upto: last[j.ID]})
		}
	}
	if !b.Empty() {
		if err := st.Commit(ctx, b); err != nil {
			t.Fatalf("commit the merger's acknowledgements: %v", err)
		}
	}
}

func moveDone(t *testing.T, old pool.Store) pool.Store {
	t.Helper()
	s := old.(*movedStore)
	img, done := s.LiveImage(0)
	for _, r := range s.DoneRecords(0, done) {
		s.archive[r.Lease] = *r
	}
	m, err := pool.NewMemStoreFrom(context.Background(), img)
	if err != nil {
		t.Fatalf("NewMemStoreFrom(LiveImage): %v", err)
	}
	if m.Done() != 0 {
		t.Fatalf("a store loaded from a live image holds %d done replicas", m.Done())
	}
	s.moved += done
	return &movedStore{MemStore: m, archive: s.archive, moved: s.moved}
}

// A scheduler restarted on a store that left its done replicas out of
// Load (answering for them from an archive) loses, duplicates and
// answers nothing differently: the restart, machine failure, cancel and
// archive scenarios pass as on a store that returns every replica. In
// the archive scenario the merger acknowledged every outcome before
// each restart (the others check the outcomes still unacknowledged), so
// that its replicas are done and left out.
func TestMemStoreDoneLeftOut(t *testing.T) {
	for name, run := range map[string]func(*pooltest.Harness){
		"restart": pooltest.RunRestart, "machine failures": pooltest.RunMachineFailures,
		"cancel": pooltest.RunCancel, "archive": pooltest.RunArchive,
	} {
		t.Run(name, func(t *testing.T) {
			st := &movedStore{MemStore: pool.NewMemStore(), archive: map[string]pool.ReplicaRecord{}}
			h := pooltest.NewHarness(t, st, nil)
			h.Reopen = func(old pool.Store) pool.Store {
				if name == "archive" {
					ackAll(t, old)
				}
				return moveDone(t, old)
			}
			run(h)
			if name == "archive" && len(st.archive) == 0 {
				t.Error("the archive scenario moved no replica out")
			}
		})
	}
}

// A replica is done once it is settled, its task has an outcome and the
// merger acknowledged that outcome, in any order; one in play (leased
// again to recompute a lost result) is not. Forgetting drops the done ones from Load and Image, and a
// MemStore built from a full image finds its done replicas again.
func TestMemStoreDone(t *testing.T) {
	ctx := context.Background()
	m := pool.NewMemStore()
	jid := job.ID(sha256.Sum256([]byte("job")))
	j := pool.JobRecord{ID: jid, Canonical: []byte("job"), Owner: "o", Merger: "m", Order: 1}
	rep := func(lease string, task int64, state string, version int64) pool.ReplicaRecord {
		return pool.ReplicaRecord{Lease: lease, Job: jid, Task: task, Peer: "p", Owner: "o", State: state, Version: version, Prev: version - 1}
	}
	out := func(seq, task int64) pool.OutcomeRecord {
		return pool.OutcomeRecord{Job: jid, Verified: pool.Verified{Seq: seq, Task: task, Status: pool.OutcomeOK}}
	}
	commit := func(b *pool.Batch) {
		t.Helper()
		if err := m.Commit(ctx, b); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	commit(&pool.Batch{Jobs: []pool.JobRecord{j}, Replicas: []pool.ReplicaRecord{
		rep("a", 0, pool.ReplicaLeased, 1), rep("b", 0, pool.ReplicaLeased, 1), rep("c", 1, pool.ReplicaLeased, 1)}})
	// c expires before its task is decided: settled, not done.
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep("c", 1, pool.ReplicaExpired, 2)}})
	if n := m.Done(); n != 0 {
		t.Fatalf("Done = %d before any outcome, want 0", n)
	}
	// Task 0 is decided and acknowledged with its replicas agreed in
	// the same batch.
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep("a", 0, pool.ReplicaAgreed, 2), rep("b", 0, pool.ReplicaAgreed, 2)},
		Outcomes: []pool.OutcomeRecord{out(1, 0)}, Acks: []pool.AckRecord{{Job: jid, Prev: 0, Upto: 1}}})
	// Task 1 is decided later (by replicas d and e), and d2 is leased
	// again for it afterwards: in play.
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep("d", 1, pool.ReplicaAgreed, 1), rep("e", 1, pool.ReplicaAgreed, 1),
		rep("d2", 1, pool.ReplicaLeased, 1)}, Outcomes: []pool.OutcomeRecord{out(2, 1)}})
	if n := m.Done(); n != 2 {
		t.Fatalf("Done = %d before task 1's outcome is acknowledged, want 2 (a, b)", n)
	}
	commit(&pool.Batch{Acks: []pool.AckRecord{{Job: jid, Prev: 1, Upto: 2}}})
	if n := m.Done(); n != 5 {
		t.Fatalf("Done = %d, want 5 (a, b, c, d, e)", n)
	}
	full := m.Image()
	img, done := m.LiveImage(0)
	if done != 5 || len(img.Replicas) != 1 || img.Replicas[0].Lease != "d2" {
		t.Fatalf("LiveImage: %d done, replicas %+v; want 5 done and d2 alone", done, img.Replicas)
	}
	recs := m.DoneRecords(0, done)
	if len(recs) != 5 {
		t.Fatalf("DoneRecords: %d, want 5", len(recs))
	}
	if n := m.ForgetDone(done); n != 5 {
		t.Fatalf("ForgetDone dropped %d, want 5", n)
	}
	if n := m.ForgetDone(done); n != 0 {
		t.Fatalf("ForgetDone again dropped %d, want 0", n)
	}
	s, err := m.Load(ctx)
	if err != nil || len(s.Replicas) != 1 || len(s.Outcomes) != 2 {
		t.Fatalf("Load after ForgetDone: %d replicas, %d outcomes, %v; want d2 and both outcomes", len(s.Replicas), len(s.Outcomes), err)
	}
	if _, err := m.Replica(ctx, "a"); !errors.Is(err, pool.ErrUnknownLease) {
		t.Fatalf("Replica(a) after ForgetDone: %v, want ErrUnknownLease", err)
	}
	if got := m.DoneRecords(0, done); len(got) != 0 {
		t.Fatalf("DoneRecords after ForgetDone: %d, want none", len(got))
	}
	// d2 settles: done at once (its task has an outcome).
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep("d2", 1, pool.ReplicaCancelled, 2)}})
	if got := m.DoneRecords(done, m.Done()); len(got) != 1 || got[0].Lease != "d2" {
		t.Fatalf("DoneRecords after d2 settled: %+v, want d2", got)
	}
	// d3 is leased and cancelled in one batch, its lease twice in it:
	// done at once too, once.
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep("d3", 1, pool.ReplicaLeased, 1), rep("d3", 1, pool.ReplicaCancelled, 2)}})
	if got := m.DoneRecords(done, m.Done()); len(got) != 2 || got[1].Lease != "d3" || got[1].State != pool.ReplicaCancelled {
		t.Fatalf("DoneRecords after d3 leased and settled in one batch: %+v, want d2 and d3 cancelled", got)
	}
	// An image with every replica (an older snapshot's) gives them back
	// as done.
	m2, err := pool.NewMemStoreFrom(ctx, full)
	if err != nil {
		t.Fatal(err)
	}
	if n := m2.Done(); n != 5 {
		t.Fatalf("a MemStore from a full image holds %d done replicas, want 5", n)
	}
}

// A record DoneRecords handed out stays as it was whatever is committed
// after: a replica in play changes in place, a settled one never does,
// and a done replica changed back into play by a writer that breaks the
// Scheduler's premise (a settled replica never changes) is no longer
// handed out as done.
func TestMemStoreDoneRecordsStay(t *testing.T) {
	ctx := context.Background()
	m := pool.NewMemStore()
	jid := job.ID(sha256.Sum256([]byte("job")))
	rep := func(state string, version int64, result string) pool.ReplicaRecord {
		r := pool.ReplicaRecord{Lease: "a", Job: jid, Peer: "p", Owner: "o", State: state, Version: version, Prev: version - 1}
		if result != "" {
			r.Result = []byte(result)
		}
		return r
	}
	commit := func(b *pool.Batch) {
		t.Helper()
		if err := m.Commit(ctx, b); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	commit(&pool.Batch{Jobs: []pool.JobRecord{{ID: jid, Canonical: []byte("job"), Owner: "o", Merger: "m", Order: 1}},
		Replicas: []pool.ReplicaRecord{rep(pool.ReplicaLeased, 1, "")}})
	before := m.Image()
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep(pool.ReplicaReturned, 2, "42")}}) // in play: in place
	if r := before.Replicas[0]; r.State != pool.ReplicaLeased || r.Result != nil {
		t.Fatalf("an image taken before the replica returned reads %s %q, want leased with no result", r.State, r.Result)
	}
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep(pool.ReplicaAgreed, 3, "42")},
		Outcomes: []pool.OutcomeRecord{{Job: jid, Verified: pool.Verified{Seq: 1, Task: 0, Status: pool.OutcomeOK}}},
		Acks:     []pool.AckRecord{{Job: jid, Prev: 0, Upto: 1}}})
	recs := m.DoneRecords(0, m.Done())
	if len(recs) != 1 || recs[0].State != pool.ReplicaAgreed || recs[0].Version != 3 || string(recs[0].Result) != "42" {
		t.Fatalf("DoneRecords: %+v, want a agreed at version 3", recs)
	}
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep(pool.ReplicaLeased, 4, "")}})
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rep(pool.ReplicaReturned, 5, "7")}})
	if r := recs[0]; r.State != pool.ReplicaAgreed || r.Version != 3 || string(r.Result) != "42" {
		t.Fatalf("a record DoneRecords handed out changed to %s version %d %q", r.State, r.Version, r.Result)
	}
	if got := m.DoneRecords(0, m.Done()); len(got) != 0 {
		t.Fatalf("DoneRecords hands out %+v, a replica back in play", got)
	}
	if got, err := m.Replica(ctx, "a"); err != nil || got.Version != 5 || string(got.Result) != "7" {
		t.Fatalf("Replica(a) = %+v, %v; want version 5 with result 7", got, err)
	}
	// A lease in play twice in one batch (returned, then agreed, its
	// task decided and acknowledged with it): the first changes its
	// record in place, the second replaces it, and the replica is done
	// once, as its last record.
	b := func(state string, version int64) pool.ReplicaRecord {
		return pool.ReplicaRecord{Lease: "b", Job: jid, Task: 1, Peer: "p", Owner: "o", State: state, Version: version, Prev: version - 1}
	}
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{b(pool.ReplicaLeased, 1)}})
	done := m.Done()
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{b(pool.ReplicaReturned, 2), b(pool.ReplicaAgreed, 3)},
		Outcomes: []pool.OutcomeRecord{{Job: jid, Verified: pool.Verified{Seq: 2, Task: 1, Status: pool.OutcomeOK}}},
		Acks:     []pool.AckRecord{{Job: jid, Prev: 1, Upto: 2}}})
	if got := m.DoneRecords(done, m.Done()); len(got) != 1 || got[0].Lease != "b" || got[0].State != pool.ReplicaAgreed || got[0].Version != 3 {
		t.Fatalf("DoneRecords after b returned and agreed in one batch: %+v, want b agreed at version 3, once", got)
	}
}
