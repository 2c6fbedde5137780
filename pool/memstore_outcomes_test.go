package pool_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// A scheduler restarted on a MemStore that folded the acknowledged
// outcomes into summaries (and was rebuilt from its image) reports the
// same status, leases and decides no decided task again, and the store
// hands over summaries in place of those outcomes.
func TestMemStoreAckedRestart(t *testing.T) {
	ctx := context.Background()
	var summarised []int64
	h := pooltest.NewHarness(t, pool.NewMemStore(), nil)
	h.Reopen = func(s pool.Store) pool.Store {
		m := s.(*pool.MemStore)
		m.ForgetAcked()
		out := imageRoundTrip(t, m)
		snap, err := out.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, sum := range snap.Summaries {
			summarised = append(summarised, sum.Upto)
		}
		for _, o := range snap.Outcomes {
			if o.Seq <= snap.Jobs[0].Acked {
				t.Errorf("outcome %d is acknowledged (up to %d) and still handed over", o.Seq, snap.Jobs[0].Acked)
			}
		}
		return out
	}
	pooltest.RunAckedRestart(h)
	if diff := cmp.Diff([]int64{4, 8}, summarised); diff != "" {
		t.Errorf("outcomes summarised at each restart (-want +got):\n%s", diff)
	}
}

// outcomeStore returns a MemStore holding one job (an ID from name)
// with outcomes for tasks, Seq 1 on, every third one failed, and the
// job acknowledged up to acked.
func outcomeStore(t *testing.T, name string, tasks []int64, acked int64) (*pool.MemStore, job.ID) {
	t.Helper()
	id := job.ID(sha256.Sum256([]byte(name)))
	m := pool.NewMemStore()
	if err := m.Commit(context.Background(), &pool.Batch{Jobs: []pool.JobRecord{{ID: id, Canonical: []byte(name), Owner: "idalice", Merger: "idalice-1", Order: 1, Added: time.UnixMilli(1)}}}); err != nil {
		t.Fatal(err)
	}
	b := &pool.Batch{}
	for i, task := range tasks {
		st := pool.OutcomeOK
		if i%3 == 2 {
			st = pool.OutcomeFailed
		}
		b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: id, Verified: pool.Verified{Seq: int64(i + 1), Task: task, Status: st, Result: []byte{byte(i)}}})
	}
	if acked > 0 {
		b.Acks = []pool.AckRecord{{Job: id, Upto: acked}}
	}
	if err := m.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return m, id
}

// ForgetAcked folds exactly the acknowledged outcomes, into ranges of
// consecutive tasks, whatever the order they were decided in; the
// summary survives an image and a second fold adds to it; every task
// and Seq it covers is still refused a second outcome.
func TestMemStoreForgetAcked(t *testing.T) {
	ctx := context.Background()
	m, id := outcomeStore(t, "fold", []int64{7, 3, 4, 0, 9, 5, 1, 2}, 6)
	if n := m.ForgetAcked(); n != 6 {
		t.Fatalf("ForgetAcked folded %d, want 6", n)
	}
	if n := m.ForgetAcked(); n != 0 {
		t.Fatalf("ForgetAcked again folded %d, want 0", n)
	}
	m = imageRoundTrip(t, m)
	snap, err := m.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []pool.OutcomeSummary{{Job: id, Upto: 6, Accepted: 4, Failed: 2,
		Decided: []pool.TaskRange{{From: 0, To: 1}, {From: 3, To: 6}, {From: 7, To: 8}, {From: 9, To: 10}}}}
	if diff := cmp.Diff(want, snap.Summaries); diff != "" {
		t.Fatalf("summaries (-want +got):\n%s", diff)
	}
	if len(snap.Outcomes) != 2 || snap.Outcomes[0].Seq != 7 || snap.Outcomes[1].Task != 2 || string(snap.Outcomes[1].Result) != "\x07" {
		t.Fatalf("outcomes after the summary: %+v", snap.Outcomes)
	}
	for _, o := range []pool.Verified{{Seq: 3, Task: 20}, {Seq: 9, Task: 0}, {Seq: 9, Task: 4}, {Seq: 9, Task: 9}, {Seq: 9, Task: 1}} {
		o.Status = pool.OutcomeOK
		if err := m.Commit(ctx, &pool.Batch{Outcomes: []pool.OutcomeRecord{{Job: id, Verified: o}}}); !errors.Is(err, pool.ErrConflict) {
			t.Errorf("outcome %d of task %d after the fold: %v, want ErrConflict", o.Seq, o.Task, err)
		}
	}
	// Task 8 joins the ranges around it; the ack after the fold drops
	// the results of the outcomes it covers.
	b := &pool.Batch{Outcomes: []pool.OutcomeRecord{{Job: id, Verified: pool.Verified{Seq: 9, Task: 8, Status: pool.OutcomeOK}}},
		Acks: []pool.AckRecord{{Job: id, Prev: 6, Upto: 7}}}
	if err := m.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	if snap, _ = m.Load(ctx); len(snap.Outcomes) != 3 || snap.Outcomes[0].Result != nil || snap.Outcomes[1].Result == nil {
		t.Fatalf("outcomes after an ack past the summary: %+v", snap.Outcomes)
	}
	if err := m.Commit(ctx, &pool.Batch{Acks: []pool.AckRecord{{Job: id, Prev: 7, Upto: 9}}}); err != nil {
		t.Fatal(err)
	}
	if n := m.ForgetAcked(); n != 3 {
		t.Fatalf("the second fold folded %d, want 3", n)
	}
	snap, _ = m.Load(ctx)
	want = []pool.OutcomeSummary{{Job: id, Upto: 9, Accepted: 7, Failed: 2, Decided: []pool.TaskRange{{From: 0, To: 6}, {From: 7, To: 10}}}}
	if diff := cmp.Diff(want, snap.Summaries); diff != "" || len(snap.Outcomes) != 0 {
		t.Fatalf("summaries after the second fold (-want +got):\n%s\noutcomes %+v", diff, snap.Outcomes)
	}
}

// An image written before summaries existed (every outcome, acknowledged
// or not) still loads, and its acknowledged outcomes fold afterwards;
// an image whose summary does not hang together is refused.
func TestMemStoreImageWithoutSummaries(t *testing.T) {
	ctx := context.Background()
	m, id := outcomeStore(t, "old", []int64{0, 1, 2, 3}, 3)
	img := m.Image()
	// The image as written before: gob names the embedded Snapshot's
	// fields, which had no Summaries.
	type Snapshot struct {
		Peers      []pool.Peer
		Jobs       []pool.JobRecord
		Replicas   []pool.ReplicaRecord
		Outcomes   []pool.OutcomeRecord
		Trust      []pool.TrustRecord
		LedgerSeq  uint64
		LedgerHash job.Digest
	}
	type oldImage struct {
		Snapshot
		Ledger     []pool.Entry
		LedgerBase uint64
		Kinds      map[string]uint64
	}
	old := oldImage{Snapshot: Snapshot{Jobs: img.Jobs, Outcomes: img.Outcomes}, Kinds: map[string]uint64{}}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(old); err != nil {
		t.Fatal(err)
	}
	var dec pool.MemImage
	if err := gob.NewDecoder(&buf).Decode(&dec); err != nil {
		t.Fatal(err)
	}
	loaded, err := pool.NewMemStoreFrom(ctx, &dec)
	if err != nil {
		t.Fatalf("load an image without summaries: %v", err)
	}
	if snap, _ := loaded.Load(ctx); len(snap.Outcomes) != 4 || len(snap.Summaries) != 0 {
		t.Fatalf("loaded: %d outcomes, summaries %+v", len(snap.Outcomes), snap.Summaries)
	}
	if n := loaded.ForgetAcked(); n != 3 {
		t.Fatalf("ForgetAcked after loading an old image folded %d, want 3", n)
	}
	snap, _ := loaded.Load(ctx)
	want := []pool.OutcomeSummary{{Job: id, Upto: 3, Accepted: 2, Failed: 1, Decided: []pool.TaskRange{{From: 0, To: 3}}}}
	if diff := cmp.Diff(want, snap.Summaries); diff != "" || len(snap.Outcomes) != 1 {
		t.Fatalf("summaries (-want +got):\n%s\noutcomes %+v", diff, snap.Outcomes)
	}

	for name, spoil := range map[string]func(*pool.MemImage){
		"counts that do not add up": func(img *pool.MemImage) { img.Summaries[0].Failed = 0 },
		"past the acknowledged":     func(img *pool.MemImage) { img.Jobs[0].Acked = 2 },
		"overlapping ranges": func(img *pool.MemImage) {
			img.Summaries[0].Decided = []pool.TaskRange{{From: 0, To: 2}, {From: 1, To: 2}}
		},
		"a task decided twice":   func(img *pool.MemImage) { img.Summaries[0].Decided = []pool.TaskRange{{From: 1, To: 4}} },
		"outcomes not following": func(img *pool.MemImage) { img.Outcomes[0].Seq = 3 },
	} {
		m, _ := outcomeStore(t, "spoilt", []int64{0, 1, 2, 3}, 3)
		m.ForgetAcked()
		img := m.Image()
		spoil(img)
		if _, err := pool.NewMemStoreFrom(ctx, img); !errors.Is(err, pool.ErrConflict) {
			t.Errorf("an image with %s: %v, want ErrConflict", name, err)
		}
	}
}

// spoiltStore is a MemStore whose Load hands over a snapshot changed by
// spoil.
type spoiltStore struct {
	*pool.MemStore
	spoil func(*pool.Snapshot)
}

func (s spoiltStore) Load(ctx context.Context) (*pool.Snapshot, error) {
	snap, err := s.MemStore.Load(ctx)
	if err == nil {
		s.spoil(snap)
	}
	return snap, err
}

// A scheduler refuses to start from a summary that does not hang
// together with its job or the outcomes after it.
func TestSchedulerRefusesBadSummary(t *testing.T) {
	ctx := context.Background()
	m := pool.NewMemStore()
	h := pooltest.NewHarness(t, m, nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("summary", 3, pooltest.Policy{}, alice)
	lb, lc := h.Lease(bob, 3), h.Lease(carol, 3)
	for i := range 3 {
		h.Submit(lb[i], pooltest.Good(int64(i)))
		h.Submit(lc[i], pooltest.Good(int64(i)))
	}
	if err := h.S.Ack(ctx, alice, j.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := m.ForgetAcked(); n != 2 {
		t.Fatalf("ForgetAcked folded %d, want 2", n)
	}
	for name, spoil := range map[string]func(*pool.Snapshot){
		"none":                      func(*pool.Snapshot) {},
		"past the acknowledged":     func(s *pool.Snapshot) { s.Jobs[0].Acked = 1 },
		"counts that do not add up": func(s *pool.Snapshot) { s.Summaries[0].Accepted = 1 },
		"an outcome of a summarised task": func(s *pool.Snapshot) {
			s.Outcomes[0].Task = s.Summaries[0].Decided[0].From
		},
		"two summaries": func(s *pool.Snapshot) { s.Summaries = append(s.Summaries, s.Summaries[0]) },
	} {
		cfg := pool.SchedulerConfig{Pool: "test", Key: h.Key, Store: spoiltStore{m, spoil}, Blobs: h.Blobs.Path, Now: h.Clock.Now}
		s, err := pool.NewScheduler(ctx, cfg)
		if name == "none" {
			if err != nil {
				t.Fatalf("a scheduler on the summarised store: %v", err)
			}
			if st, _ := s.Status(j.ID); st.Accepted != 3 || !st.Complete || st.Acked != 2 {
				t.Errorf("status from the summary: %+v", st)
			}
			continue
		}
		if !errors.Is(err, pool.ErrConflict) {
			t.Errorf("a snapshot with %s: %v, want ErrConflict", name, err)
		}
	}
}
