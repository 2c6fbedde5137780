package cluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

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

// outcomesIn returns how many outcomes of h's job snap holds, as
// records or summarised.
func outcomesIn(t *testing.T, snap *pool.Snapshot, h *history) int64 {
	t.Helper()
	d, err := pooltest.DecidedOf(snap, h.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	return d.Outcomes
}

// replicasIn returns how many replicas s holds in memory.
func replicasIn(t *testing.T, s *Store) int {
	t.Helper()
	snap, err := s.mem.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(snap.Replicas)
}

// firstLease is the lease ID history gives the first replica of task 0.
const firstLease = "00000000000000000000000000000000"

// A snapshot moves the replicas that are done (settled, their task
// decided) to the archive: the writer's memory, the snapshot and a node
// that loads it hold none of them, a node that follows the stream drops
// its own once the archive holds them, and every one is still answered
// by Replica, from the archive. The ledger stays whole, and so do the
// outcomes (the acknowledged ones summarised).
func TestStoreArchivesDone(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	h := newHistory()
	h.write(t, w, 10, 10)
	follower := openStore(t, node, 1) // follows from here on
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	follower.Release()
	h.write(t, w, 200, 10)
	want, err := w.Replica(ctx, firstLease)
	if err != nil || want.State != pool.ReplicaAgreed {
		t.Fatalf("Replica(%s) before the snapshot: %+v, %v", firstLease, want, err)
	}
	if n := replicasIn(t, w); n != 400 {
		t.Fatalf("the writer holds %d replicas before the snapshot, want 400", n)
	}
	st, err := w.WriteSnapshot(ctx)
	if err != nil || st.Archived != 400 {
		t.Fatalf("snapshot: %+v, %v; want 400 replicas archived", st, err)
	}
	if n := replicasIn(t, w); n != 0 {
		t.Fatalf("the writer holds %d replicas after the snapshot, want none (all are done)", n)
	}
	h.write(t, w, 220, 10) // a tail: 40 more replicas done, not archived yet

	cold := openStore(t, node, 1)
	snap, err := cold.Load(ctx)
	if err != nil {
		t.Fatalf("load from nothing: %v", err)
	}
	if len(snap.Replicas) != 40 || outcomesIn(t, snap, h) != 220 || snap.LedgerSeq != 440 {
		t.Fatalf("loaded %d replicas, %d outcomes, ledger at %d; want 40 (the tail's), 220, 440",
			len(snap.Replicas), outcomesIn(t, snap, h), snap.LedgerSeq)
	}
	sameState(t, "from the snapshot", w, cold)
	for name, s := range map[string]*Store{"writer": w, "cold": cold} {
		got, err := s.Replica(ctx, firstLease)
		if err != nil {
			t.Fatalf("%s: Replica(%s) from the archive: %v", name, firstLease, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("%s: archived replica (-committed +archived):\n%s", name, d)
		}
	}
	for _, lease := range []string{"nobody leased this", strings.Repeat("x", 1<<16)} {
		if _, err := cold.Replica(ctx, lease); !errors.Is(err, pool.ErrUnknownLease) {
			t.Fatalf("Replica of a lease never granted (%d bytes): %v, want ErrUnknownLease", len(lease), err)
		}
	}
	// The follower applied every batch itself; catching up, it drops the
	// replicas the archive holds and keeps the tail's.
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if follower.loads != 0 {
		t.Fatalf("the follower loaded %d snapshots, want none (it follows the stream)", follower.loads)
	}
	if n := replicasIn(t, follower); n != 40 {
		t.Fatalf("the follower holds %d replicas, want 40 (the tail's)", n)
	}
	sameState(t, "followed", w, follower)
}

// A snapshot written before the archive (format v1, every replica in it)
// still loads, with its done replicas in memory until a snapshot
// archives them; the next snapshot, written by the node that loaded it,
// archives them all.
func TestStoreLoadsSnapshotV1(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	h := newHistory()
	h.write(t, w, 100, 10)
	w.mu.Lock()
	seq, img := w.applied.Load(), w.mem.Image()
	w.mu.Unlock()
	if err := w.snaps.writeFormat(ctx, seq, img, snapFormatV1); err != nil {
		t.Fatal(err)
	}
	w.Release()

	old := openStore(t, node, 1)
	snap, err := old.Load(ctx)
	if err != nil {
		t.Fatalf("load a v1 snapshot: %v", err)
	}
	if old.loads != 1 || len(snap.Replicas) != 200 {
		t.Fatalf("loaded %d snapshots and %d replicas, want 1 and 200", old.loads, len(snap.Replicas))
	}
	if r, err := old.Replica(ctx, firstLease); err != nil || r.State != pool.ReplicaAgreed {
		t.Fatalf("Replica(%s) after a v1 snapshot: %+v, %v", firstLease, r, err)
	}
	h.write(t, old, 120, 10)
	st, err := old.WriteSnapshot(ctx)
	if err != nil || st.Archived != 240 {
		t.Fatalf("snapshot after a v1 one: %+v, %v; want 240 replicas archived", st, err)
	}
	old.Release()
	fresh := openStore(t, node, 1)
	snap, err = fresh.Load(ctx)
	if err != nil || len(snap.Replicas) != 0 || outcomesIn(t, snap, h) != 120 {
		t.Fatalf("load the v2 snapshot: %d replicas, %d outcomes, %v; want none, 120", len(snap.Replicas), outcomesIn(t, snap, h), err)
	}
	if r, err := fresh.Replica(ctx, firstLease); err != nil || r.State != pool.ReplicaAgreed {
		t.Fatalf("Replica(%s) from the archive: %+v, %v", firstLease, r, err)
	}
}

// A scheduler moved to a fresh store after each snapshot (in the archive
// scenario, the merger having acknowledged every outcome before) answers every request that
// names a replica of a decided task from the archive as it did from
// memory (pooltest.RunArchive), and its restarts lose nothing.
func TestClusterArchiveSnapshots(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(*pooltest.Harness){
		"archive": pooltest.RunArchive, "machine-failures": pooltest.RunMachineFailures, "cancel": pooltest.RunCancel,
	} {
		t.Run(name, func(t *testing.T) {
			node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
			h := pooltest.NewHarness(t, openStore(t, node, 1), nil)
			archived := 0
			h.Reopen = func(old pool.Store) pool.Store {
				if name == "archive" { // the others check unacknowledged outcomes
					ackAll(t, old)
				}
				st, err := old.(*Store).WriteSnapshot(context.Background())
				if err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				archived += st.Archived
				return openStore(t, node, 1)
			}
			run(h)
			if name == "archive" && archived == 0 {
				t.Fatal("no snapshot archived a replica")
			}
			if name == "archive" {
				coldReceipts(t, h)
			}
		})
	}
}

// coldReceipts checks that h's scheduler, started on a store that loaded
// a snapshot after the ledger's older entries moved to the archive,
// serves every device's receipts from the first (none are in its tail
// of entries committed since it started) and the whole ledger, which
// verifies (Harness.Ledger).
func coldReceipts(t *testing.T, h *pooltest.Harness) {
	t.Helper()
	if base, _ := ledgerBase(h.Store.(*Store)); base == 0 {
		t.Fatal("the store the scheduler restarted on holds the whole ledger: no entry moved to the archive")
	}
	all := h.Ledger()
	for name, p := range h.Peers {
		var want []pool.Entry
		for _, e := range all {
			if e.Peer == p.ID {
				want = append(want, e)
			}
		}
		got, err := h.S.PeerLedger(p.ID, 0, 10_000)
		if err != nil {
			t.Fatalf("receipts of %s: %v", name, err)
		}
		if !sameEntries(want, got) {
			t.Fatalf("receipts of %s: %d entries, want %d (those of the whole ledger)", name, len(got), len(want))
		}
	}
}

// On three nodes (the archive replicated three times), a scheduler moved
// to another node after each snapshot answers requests that name
// replicas of decided tasks from the archive, whichever node wrote it.
// About 10 s on a busy machine: make check-cluster runs it
// (IDLEPOOL_FULL_CLUSTER=1); TestClusterArchiveSnapshots checks the same
// on one node in make test.
func TestClusterArchiveThreeNodes(t *testing.T) {
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("the replica archive on three nodes: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	t.Parallel()
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	h := pooltest.NewHarness(t, openStore(t, nodes[0], 3), nil)
	i, archived := 0, 0
	h.Reopen = func(old pool.Store) pool.Store {
		ackAll(t, old)
		st, err := old.(*Store).WriteSnapshot(context.Background())
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		archived += st.Archived
		i++
		return openStore(t, nodes[i%3], 3)
	}
	pooltest.RunArchive(h)
	if archived == 0 {
		t.Fatal("no snapshot archived a replica")
	}
	coldReceipts(t, h)
}
