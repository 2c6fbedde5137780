package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// farFuture passes every chunk of replicas whatever it holds
// (DB.Compact's before).
var farFuture = time.UnixMilli(1 << 50)

// compacting is a DB that compacts on demand for StoreConformance
// (pooltest.OutcomeForgetter).
type compacting struct {
	*store.DB
	t *testing.T
}

// ForgetAcked compacts everything and returns how many outcomes it folded.
func (c compacting) ForgetAcked() int {
	got, err := c.Compact(context.Background(), farFuture)
	if err != nil {
		c.t.Fatalf("Compact: %v", err)
	}
	return got.Outcomes
}

// openCompacting is openDB whose reopening compacts the store first, so
// that every restart loads from the compacted form.
func openCompacting(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	open := func() compacting {
		db, err := store.Open(path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return compacting{db, t}
	}
	cur := open()
	t.Cleanup(func() { cur.Close() })
	return cur, func(old pool.Store) pool.Store {
		t.Helper()
		db := old.(compacting)
		if _, err := db.Compact(context.Background(), farFuture); err != nil {
			t.Fatalf("Compact: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		cur = open()
		return cur
	}
}

func TestDBCompactingConformance(t *testing.T) {
	pooltest.StoreConformance(t, openCompacting)
}

// The scheduler's restart scenarios, each restart loading a compacted
// store: the work in play and the outcomes after the summaries.
func TestDBCompactedScenarios(t *testing.T) {
	for _, sc := range []struct {
		name string
		run  func(*pooltest.Harness)
	}{
		{"restart", pooltest.RunRestart},
		{"acked restart", pooltest.RunAckedRestart},
		{"machine failures", pooltest.RunMachineFailures},
		{"cancel", pooltest.RunCancel},
		{"archive", pooltest.RunArchive},
		{"trust restart", pooltest.RunTrustRestart},
		{"ledger counts", pooltest.RunLedgerCounts},
	} {
		t.Run(sc.name, func(t *testing.T) {
			st, reopen := openCompacting(t)
			h := pooltest.NewHarness(t, st, nil)
			h.Reopen = reopen
			sc.run(h)
		})
	}
}

// compactDB opens a coordinator database with Compact's chunks set small,
// and returns it with its path.
func compactDB(t *testing.T, outcomes, replicas int64) (*store.DB, string) {
	t.Helper()
	store.SetCompactChunks(t, outcomes, replicas)
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// leases returns the leases of s's replicas, in order.
func leases(s *pool.Snapshot) []string {
	out := []string{}
	for _, r := range s.Replicas {
		out = append(out, r.Lease)
	}
	return out
}

func mustLoad(t *testing.T, db *store.DB) *pool.Snapshot {
	t.Helper()
	s, err := db.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

// The mark passes chunks of done replicas, stops at the work in play
// while it is recent, passes it once it is old (naming what is not done
// in replicas_open), and a replica named there leaves Load once done.
// Rows below a mark whose lease does not match are read whole.
func TestCompactReplicaMark(t *testing.T) {
	ctx := context.Background()
	db, path := compactDB(t, 8192, 4)
	at := time.UnixMilli(1_767_000_000_000)
	jobID := job.ID(sha256.Sum256([]byte("compact job")))
	peer := pooltest.Device(t, pooltest.Key(t, "owner/bob"), "bob-1")
	commit := func(b *pool.Batch) {
		t.Helper()
		if err := db.Commit(ctx, b); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	compact := func(before time.Time) store.Compaction {
		t.Helper()
		c, err := db.Compact(ctx, before)
		if err != nil {
			t.Fatalf("Compact: %v", err)
		}
		return c
	}
	rec := func(task int64, k int, state string, version, prev int64) pool.ReplicaRecord {
		return pool.ReplicaRecord{Lease: fmt.Sprintf("l%d-%d", task, k), Job: jobID, Task: task, Peer: peer.ID, Owner: peer.Owner,
			State: state, Created: at, Deadline: at.Add(time.Minute), Version: version, Prev: prev}
	}
	b := &pool.Batch{Peers: []pool.Peer{peer}, Jobs: []pool.JobRecord{{ID: jobID, Canonical: []byte("c"), Owner: peer.Owner,
		Merger: peer.ID, Order: 1, Added: at}}}
	for task := range int64(4) {
		b.Replicas = append(b.Replicas, rec(task, 0, pool.ReplicaLeased, 1, 0), rec(task, 1, pool.ReplicaLeased, 1, 0))
	}
	commit(b)
	all := leases(mustLoad(t, db))
	if len(all) != 8 {
		t.Fatalf("Load before compacting: %v", all)
	}
	recent, old := at.Add(-time.Hour), at.Add(time.Hour)
	if c := compact(recent); c != (store.Compaction{}) {
		t.Errorf("compaction of the work in play: %+v, want nothing", c)
	}
	decide := func(seq int64, tasks ...int64) {
		t.Helper()
		b := &pool.Batch{}
		for _, task := range tasks {
			b.Replicas = append(b.Replicas, rec(task, 0, pool.ReplicaAgreed, 2, 1), rec(task, 1, pool.ReplicaAgreed, 2, 1))
			b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: jobID, Verified: pool.Verified{Seq: seq, Task: task, Status: pool.OutcomeOK}})
			seq++
		}
		commit(b)
	}
	decide(1, 0, 1)
	if c := compact(recent); c != (store.Compaction{Replicas: 4}) {
		t.Errorf("compaction after tasks 0 and 1: %+v, want 4 replicas passed", c)
	}
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, all[4:]) {
		t.Errorf("Load after tasks 0 and 1 were compacted: %v, want %v", got, all[4:])
	}
	// Task 2's replicas expire: settled, their task undecided.
	commit(&pool.Batch{Replicas: []pool.ReplicaRecord{rec(2, 0, pool.ReplicaExpired, 2, 1), rec(2, 1, pool.ReplicaExpired, 2, 1)}})
	if c := compact(recent); c != (store.Compaction{}) {
		t.Errorf("compaction of recent work in play: %+v, want nothing", c)
	}
	if c := compact(old); c != (store.Compaction{Replicas: 4, Opened: 4}) {
		t.Errorf("compaction of old work in play: %+v, want 4 replicas passed and named", c)
	}
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, all[4:]) {
		t.Errorf("Load after the work in play was passed: %v, want %v", got, all[4:])
	}
	decide(3, 3)
	if c := compact(old); c != (store.Compaction{Closed: 2}) {
		t.Errorf("compaction after task 3: %+v, want its 2 replicas closed", c)
	}
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, all[4:6]) {
		t.Errorf("Load after task 3: %v, want task 2's %v", got, all[4:6])
	}
	if ar, err := db.Replica(ctx, all[0]); err != nil || ar.State != pool.ReplicaAgreed {
		t.Errorf("Replica(%s) after compacting: %+v, %v", all[0], ar, err)
	}

	// A mark whose row below is not the one it passed: Load reads every
	// replica.
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE replica_mark SET below_lease = 'moved'`); err != nil {
		t.Fatal(err)
	}
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, all) {
		t.Errorf("Load with a mark that does not match its rows: %v, want all of %v", got, all)
	}
	// Compact starts the mark again from the first row.
	if c := compact(old); c != (store.Compaction{Replicas: 8, Opened: 2}) {
		t.Errorf("compaction after the mark was reset: %+v, want 8 replicas passed, task 2's named", c)
	}
	if got := leases(mustLoad(t, db)); !cmp.Equal(got, all[4:6]) {
		t.Errorf("Load after the mark was reset and passed again: %v, want task 2's %v", got, all[4:6])
	}
}

// Outcomes decided in a random order, acknowledged in random steps and
// folded in small chunks load as the same decided tasks as from a store
// never compacted (pooltest.DecidedOf), each summary's ranges disjoint
// and never adjacent (pool.OutcomeSummary.Check).
func TestCompactOutcomeRanges(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 20 {
		db, _ := compactDB(t, int64(1+rng.IntN(9)), 8192)
		plain, _ := openDB(t)
		at := time.UnixMilli(1_767_000_000_000)
		jobID := job.ID(sha256.Sum256(fmt.Appendf(nil, "job %d", round)))
		const tasks = 120
		b := &pool.Batch{Jobs: []pool.JobRecord{{ID: jobID, Canonical: []byte("c"), Owner: "idowner", Merger: "idowner-1", Order: 1, Added: at}}}
		order := rng.Perm(tasks)
		if round%4 == 0 {
			slices.Sort(order) // in order: one range
		}
		var seq, acked int64
		for len(order) > 0 || acked < seq {
			n := min(len(order), rng.IntN(12))
			for _, task := range order[:n] {
				seq++
				status := pool.OutcomeOK
				if rng.IntN(5) == 0 {
					status = pool.OutcomeFailed
				}
				b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: jobID, Verified: pool.Verified{Seq: seq, Task: int64(task), Status: status}})
			}
			order = order[n:]
			if upto := acked + int64(rng.IntN(int(seq-acked)+1)); upto > acked {
				b.Acks = []pool.AckRecord{{Job: jobID, Prev: acked, Upto: upto}}
				acked = upto
			}
			for _, st := range []pool.Store{db, plain} {
				if err := st.Commit(ctx, b); err != nil {
					t.Fatalf("round %d: Commit: %v", round, err)
				}
			}
			b = &pool.Batch{}
			if rng.IntN(3) == 0 {
				if _, err := db.Compact(ctx, at); err != nil {
					t.Fatalf("round %d: Compact: %v", round, err)
				}
			}
			want, err := pooltest.DecidedOf(mustLoad(t, plain.(*store.DB)), jobID)
			if err != nil {
				t.Fatal(err)
			}
			s := mustLoad(t, db)
			got, err := pooltest.DecidedOf(s, jobID)
			if err != nil {
				t.Fatalf("round %d: compacted store: %v", round, err)
			}
			slices.Sort(want.Tasks)
			slices.Sort(got.Tasks)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("round %d: decided tasks, compacted (-plain +compacted):\n%s", round, diff)
			}
		}
		if _, err := db.Compact(ctx, at); err != nil {
			t.Fatal(err)
		}
		s := mustLoad(t, db)
		if len(s.Summaries) != 1 || s.Summaries[0].Upto != tasks || len(s.Outcomes) != 0 {
			t.Fatalf("round %d: after acknowledging everything: %d summaries, %d outcomes", round, len(s.Summaries), len(s.Outcomes))
		}
		if d := s.Summaries[0].Decided; len(d) != 1 || d[0] != (pool.TaskRange{From: 0, To: tasks}) {
			t.Errorf("round %d: every task decided, in ranges %v, want one", round, d)
		}
	}
}

// A scheduler serving a job while its store is compacted over and over,
// in chunks of a few rows, then restarted on the compacted store, has the
// same job status and leases the same tasks as one restarted on a store
// never compacted.
func TestCompactWhileServing(t *testing.T) {
	type outcome struct {
		before, after pool.JobStatus
		replicas      int
		leased        []int64
	}
	run := func(compact bool) outcome {
		ctx := context.Background()
		db, path := compactDB(t, 3, 5)
		h := pooltest.NewHarness(t, db, nil)
		alice := h.Device("alice", "alice-1")
		bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
		j := h.Job("served", 200, pooltest.Policy{LeaseTimeout: time.Hour}, alice)
		stop := make(chan struct{})
		compacted := make(chan error, 1)
		go func() {
			for compact {
				select {
				case <-stop:
					compacted <- nil
					return
				case <-time.After(time.Millisecond):
				}
				if _, err := db.Compact(ctx, h.Clock.Now().Add(time.Hour)); err != nil {
					compacted <- err
					return
				}
			}
			compacted <- nil
		}()
		var acked int64
		for range 18 {
			lb, lc := h.Lease(bob, 10), h.Lease(carol, 10)
			for _, l := range lb {
				h.Submit(l, pooltest.Good(l.Task))
			}
			for _, l := range lc {
				h.Submit(l, pooltest.Good(l.Task))
			}
			vs, err := h.S.Results(ctx, alice, j.ID, acked, 1000)
			if err != nil {
				t.Fatalf("Results: %v", err)
			}
			if len(vs) > 1 { // some acknowledged, some not
				acked = vs[len(vs)/2].Seq
				if err := h.S.Ack(ctx, alice, j.ID, acked); err != nil {
					t.Fatalf("Ack: %v", err)
				}
			}
		}
		h.Lease(bob, 10) // in play at the restart
		close(stop)
		if err := <-compacted; err != nil {
			t.Fatalf("Compact while serving: %v", err)
		}
		var o outcome
		var err error
		if o.before, err = h.S.Status(j.ID); err != nil {
			t.Fatal(err)
		}
		h.Reopen = func(old pool.Store) pool.Store {
			if compact {
				if _, err := old.(*store.DB).Compact(ctx, h.Clock.Now().Add(time.Hour)); err != nil {
					t.Fatalf("Compact: %v", err)
				}
			}
			old.(*store.DB).Close()
			db, err := store.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		h.Restart()
		o.replicas = len(mustLoad(t, h.Store.(*store.DB)).Replicas)
		if o.after, err = h.S.Status(j.ID); err != nil {
			t.Fatal(err)
		}
		o.before.Trouble, o.after.Trouble = "", ""
		o.leased = pooltest.Tasks(h.Lease(carol, 40))
		return o
	}
	plain, compacted := run(false), run(true)
	if compacted.before != compacted.after || compacted.after != plain.after {
		t.Errorf("status after the restart on the compacted store:\n%s\nand against the store never compacted:\n%s",
			cmp.Diff(compacted.before, compacted.after), cmp.Diff(plain.after, compacted.after))
	}
	if !cmp.Equal(plain.leased, compacted.leased) {
		t.Errorf("tasks leased after the restart: %v on the compacted store, %v on the other", compacted.leased, plain.leased)
	}
	if compacted.replicas >= plain.replicas/4 {
		t.Errorf("the compacted store loaded %d replicas, the other %d: want the work in play only", compacted.replicas, plain.replicas)
	}
	t.Logf("replicas loaded: %d compacted, %d not; status %+v", compacted.replicas, plain.replicas, compacted.after)
}

// A job acknowledged past its stored outcomes (a damaged database) is not
// folded: Compact names it and ErrCorrupt, compacts the replicas all the
// same, and Load still hands over every outcome.
func TestCompactMissingOutcomes(t *testing.T) {
	ctx := context.Background()
	db, _ := compactDB(t, 8192, 8192)
	at := time.UnixMilli(1_767_000_000_000)
	jobID := job.ID(sha256.Sum256([]byte("damaged job")))
	peer := pooltest.Device(t, pooltest.Key(t, "owner/bob"), "bob-1")
	b := &pool.Batch{Peers: []pool.Peer{peer}, Jobs: []pool.JobRecord{{ID: jobID, Canonical: []byte("c"), Owner: peer.Owner, Merger: peer.ID, Order: 1, Added: at}}}
	for task := range int64(2) {
		b.Replicas = append(b.Replicas, pool.ReplicaRecord{Lease: fmt.Sprintf("l%d", task), Job: jobID, Task: task, Peer: peer.ID, Owner: peer.Owner,
			State: pool.ReplicaAgreed, Created: at, Deadline: at.Add(time.Minute), Version: 1})
		b.Outcomes = append(b.Outcomes, pool.OutcomeRecord{Job: jobID, Verified: pool.Verified{Seq: task + 1, Task: task, Status: pool.OutcomeOK}})
	}
	b.Acks = []pool.AckRecord{{Job: jobID, Prev: 0, Upto: 3}}
	if err := db.Commit(ctx, b); err != nil {
		t.Fatal(err)
	}
	c, err := db.Compact(ctx, at)
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "outcomes 1 to 3 are not all stored") {
		t.Errorf("Compact of a job acknowledged past its outcomes: %v, want ErrCorrupt naming them", err)
	}
	if c != (store.Compaction{Replicas: 2}) {
		t.Errorf("compaction: %+v, want its 2 replicas passed", c)
	}
	s := mustLoad(t, db)
	if len(s.Summaries) != 0 || len(s.Outcomes) != 2 || len(s.Replicas) != 0 {
		t.Errorf("Load after the failed fold: %d summaries, %d outcomes, %d replicas; want 0, 2, 0", len(s.Summaries), len(s.Outcomes), len(s.Replicas))
	}
}
