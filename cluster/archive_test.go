package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// lateJS is a JetStream that answers as a server does that has not
// applied a bucket another node made a moment before: Stream, KeyValue
// and ObjectStore say "not found" for the names in late, as many times
// as it says, and CreateKeyValue and CreateObjectStore say "exists" for
// those in made, once each. KeyValue and CreateKeyValue hand out the
// buckets in kvs as those lateKVs, over the real bucket.
type lateJS struct {
	jetstream.JetStream
	late map[string]int
	made map[string]bool
	kvs  map[string]*lateKV
}

func (j *lateJS) isLate(name string) bool {
	if j.late[name] == 0 {
		return false
	}
	j.late[name]--
	return true
}

func (j *lateJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if j.isLate(name) {
		return nil, jetstream.ErrStreamNotFound
	}
	return j.JetStream.Stream(ctx, name)
}

func (j *lateJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if j.isLate(bucket) {
		return nil, jetstream.ErrBucketNotFound
	}
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if lk := j.kvs[bucket]; lk != nil && err == nil {
		lk.KeyValue = kv
		return lk, nil
	}
	return kv, err
}

func (j *lateJS) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if j.isLate(bucket) {
		return nil, jetstream.ErrBucketNotFound
	}
	return j.JetStream.ObjectStore(ctx, bucket)
}

func (j *lateJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if j.made[cfg.Bucket] {
		delete(j.made, cfg.Bucket)
		return nil, jetstream.ErrBucketExists
	}
	kv, err := j.JetStream.CreateKeyValue(ctx, cfg)
	if lk := j.kvs[cfg.Bucket]; lk != nil && err == nil {
		lk.KeyValue = kv
		return lk, nil
	}
	return kv, err
}

func (j *lateJS) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if j.made[cfg.Bucket] {
		delete(j.made, cfg.Bucket)
		return nil, jetstream.ErrBucketExists
	}
	return j.JetStream.CreateObjectStore(ctx, cfg)
}

// A store's bucket that the server answering does not know yet, though
// it was found a moment before or another node just made it, makes
// OpenStore (and OpenBlobs) wait and try again (pool.ErrStoreUnavailable,
// on which the coordinator tries again), not fail. Seen on a three-node
// first start under load: the replica archive's bucket was found, its
// stream then "not found", the node stopped serving, and its shards
// waited for it for the test's nine minutes.
func TestOpenStoreWaitsForABucketNotKnownYet(t *testing.T) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	openStore(t, node, 1) // the buckets made, as by another node
	if _, err := OpenBlobs(t.Context(), node.JetStream(), 1); err != nil {
		t.Fatal(err)
	}
	sh := Shard{}
	for _, c := range []struct {
		what string
		late map[string]int
		made map[string]bool
	}{
		{"the replica archive's stream", map[string]int{"KV_" + sh.Archive(): 1}, nil},
		{"the replica archive, made meanwhile", map[string]int{sh.Archive(): 2}, map[string]bool{sh.Archive(): true}},
		{"the ledger archive, made meanwhile", map[string]int{sh.Ledger(): 2}, map[string]bool{sh.Ledger(): true}},
		{"the snapshots, made meanwhile", map[string]int{sh.Snapshots(): 2}, map[string]bool{sh.Snapshots(): true}},
		{"the pool's files, made meanwhile", map[string]int{BlobBucket: 2}, map[string]bool{BlobBucket: true}},
	} {
		js := &lateJS{JetStream: node.JetStream(), late: c.late, made: c.made}
		blobs := c.late[BlobBucket] > 0
		open := func() error {
			if blobs {
				_, err := OpenBlobs(t.Context(), js, 1)
				return err
			}
			_, err := OpenStore(t.Context(), js, StoreConfig{Replicas: 1})
			return err
		}
		if err := open(); !errors.Is(err, pool.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not known yet") {
			t.Errorf("%s not known yet: %v; want a wait (pool.ErrStoreUnavailable) that says why", c.what, err)
		}
		if err := open(); err != nil {
			t.Errorf("%s: tried again: %v", c.what, err)
		}
	}
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

// historyEpoch is the stamp of the leases of a history's task 0: a
// nanosecond of 2026 (pool.NewLeaseID).
const historyEpoch = 0x18a0000000000000

// firstLease is the lease ID history gives the first replica of task 0.
const firstLease = "18a00000000000000000000000000000"

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

// archiveRecords returns n done replicas, every field set, whose
// leases were minted every step nanoseconds from 2026-12 on: 32
// lowercase hex digits, the Scheduler's form.
func archiveRecords(n int, step uint64) []*pool.ReplicaRecord {
	var base pool.ReplicaRecord
	k := 0
	fill(reflect.ValueOf(&base).Elem(), &k)
	base.Prev = 0
	out := make([]*pool.ReplicaRecord, n)
	for i := range out {
		r := base
		r.Lease = fmt.Sprintf("%016x%016x", uint64(0x18a0000000000000)+uint64(i)*step, uint64(i)*7919)
		r.Task = int64(i)
		out[i] = &r
	}
	return out
}

// windowNs is a window's length in nanoseconds.
const windowNs = uint64(1) << (64 - 4*windowDigits)

// The replicas a snapshot archives are grouped by window: in lease
// order, each lease once, each group within one window; a replica whose
// lease ID is not the Scheduler's form goes to a key of its own. A
// window's value reads back with every field as it was, and one that
// is not a window's, or out of order, is refused.
func TestArchiveWindows(t *testing.T) {
	recs := archiveRecords(3000, windowNs/1000+1) // 1,000 a window
	recs = append(recs, recs[17], recs[2500])     // noted done twice
	slices.Reverse(recs)                          // and given out of order
	odd := *recs[0]
	odd.Lease = "lease-from-elsewhere"
	upper := *recs[1]
	upper.Lease = strings.ToUpper(recs[1].Lease)
	recs = append(recs, &odd, &upper)

	windows, own := archiveGroups(recs)
	if len(own) != 2 || own[0].Lease != odd.Lease || own[1].Lease != upper.Lease {
		t.Fatalf("under keys of their own: %d replicas, want the two whose leases are not the Scheduler's", len(own))
	}
	keys := map[string]bool{}
	for _, r := range recs[:len(recs)-2] {
		keys[windowPrefix(r.Lease)] = true
	}
	if len(windows) != len(keys) || len(keys) < 3 {
		t.Fatalf("%d windows, want %d (and at least 3)", len(windows), len(keys))
	}
	want := map[string]pool.ReplicaRecord{}
	for _, r := range recs[:len(recs)-2] {
		want[r.Lease] = *r
	}
	got := map[string]pool.ReplicaRecord{}
	for _, win := range windows {
		data, ok, err := encodeFragment(win)
		if err != nil || !ok {
			t.Fatalf("encode window %s: %v, %v", windowPrefix(win[0].Lease), ok, err)
		}
		rs, err := decodeFragment(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if _, twice := got[r.Lease]; twice {
				t.Fatalf("replica %s stored twice", r.Lease)
			}
			if windowPrefix(r.Lease) != windowPrefix(rs[0].Lease) {
				t.Fatalf("window %s holds %s", windowPrefix(rs[0].Lease), r.Lease)
			}
			got[r.Lease] = r
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("the archived replicas differ (-given +read):\n%s", d)
	}
	// A replica with a large result goes under a key of its own.
	big := *recs[2]
	big.Result = make([]byte, ownBytes+1)
	if _, own := archiveGroups([]*pool.ReplicaRecord{&big}); len(own) != 1 {
		t.Errorf("a replica with a result of %d bytes went into a window", len(big.Result))
	}
	if _, err := decodeFragment([]byte{0xc1, 0x00}); err == nil {
		t.Error("a time tag read as a window")
	}
	rs := archiveRecords(2, 1)
	data, _, _ := encodeFragment([]pool.ReplicaRecord{*rs[1], *rs[0]})
	if _, err := decodeFragment(data); err == nil || !strings.Contains(err.Error(), "lease order") {
		t.Errorf("a window out of order: %v", err)
	}
	far := *rs[0]
	far.Deadline = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok, err := encodeFragment([]pool.ReplicaRecord{far}); ok || err != nil {
		t.Errorf("a replica of the year 2300 encoded as a window: %v, %v", ok, err)
	}
}

// A Store reads every archived replica back from its window, and from
// a key of its own where an older version put it or where a window
// could not hold it; a lease in no window, or in a window that does not
// hold it, is unknown. Replicas of one window archived at different
// snapshots, by one node or by two at once (a term's overlap, the one
// behind archiving fewer), are all kept. A damaged window is an error
// that names it, for its own leases only.
func TestArchiveReadsWindows(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	archiveReadsWindows(t, s, false)
}

// TestArchiveReadsWindowsThreeNodes is TestArchiveReadsWindows on three
// nodes, the archive replicated three times, up to the reads back: a
// read is served by any replica (JetStream's direct get), which may not
// have applied the last write yet, so each read is tried again for a
// while, and the checks of a value just written are left to the one
// node's test. make check-cluster (IDLEPOOL_FULL_CLUSTER=1).
func TestArchiveReadsWindowsThreeNodes(t *testing.T) {
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("the replica archive's windows on three nodes: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	t.Parallel()
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	s := openStore(t, nodes[0], 3)
	if _, err := s.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	archiveReadsWindows(t, openStore(t, nodes[1], 3), true)
}

func archiveReadsWindows(t *testing.T, s *Store, replicated bool) {
	ctx := context.Background()
	recs := archiveRecords(300, windowNs/100+1) // windows of 100
	// Two snapshots: the second's replicas join windows the first wrote.
	var first, second []*pool.ReplicaRecord
	for i, r := range recs {
		if i%3 == 0 {
			first = append(first, r)
		} else {
			second = append(second, r)
		}
	}
	if err := s.arch.put(ctx, first, 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.arch.put(ctx, second, 20, time.Minute); err != nil {
		t.Fatal(err)
	}
	// A node in charge a moment too long, behind the other, archives
	// a few of the same windows again.
	if err := s.arch.put(ctx, []*pool.ReplicaRecord{recs[0], recs[199]}, 15, time.Minute); err != nil {
		t.Fatal(err)
	}
	// A year-2300 replica cannot be in a window: a key of its own.
	far := *archiveRecords(1, 1)[0]
	far.Lease = recs[5].Lease[:31] + "f"
	far.Deadline = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.arch.put(ctx, []*pool.ReplicaRecord{&far}, 20, time.Minute); err != nil {
		t.Fatal(err)
	}
	old := *archiveRecords(1, 1)[0]
	old.Lease = "0123456789abcdef0123456789abcdef"
	v, err := replicaValue(&old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.arch.kv.Put(ctx, v.key, v.data); err != nil {
		t.Fatal(err)
	}
	for i, r := range append(slices.Clone(recs), &far, &old) {
		got, err := s.Replica(ctx, r.Lease)
		if replicated && err != nil { // a replica behind the write
			patience(t, 2*time.Minute, "Replica("+r.Lease+") read back", func() bool {
				got, err = s.Replica(ctx, r.Lease)
				return err == nil
			})
		}
		if err != nil {
			t.Fatalf("Replica(%s), #%d: %v", r.Lease, i, err)
		}
		if d := cmp.Diff(*r, got); d != "" {
			t.Fatalf("Replica(%s) (-archived +read):\n%s", r.Lease, d)
		}
	}
	kl, err := s.arch.kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	for range kl.Keys() {
		keys++
	}
	if keys != 10 {
		t.Errorf("the archive holds %d keys, want 10 (fragments of 3 windows at 10 and at 20, of 2 at 15; 2 replicas of their own)", keys)
	}
	if replicated {
		return
	}
	between := recs[0].Lease[:31] + "e" // in the first window, not archived
	for _, l := range []string{between, "7fffffffffffffff0000000000000000", "not a lease"} {
		if _, err := s.Replica(ctx, l); !errors.Is(err, pool.ErrUnknownLease) {
			t.Errorf("Replica(%s) = %v, want ErrUnknownLease", l, err)
		}
	}
	// Damage every fragment of the first window.
	damaged := []string{windowKey(recs[0].Lease, 10), windowKey(recs[0].Lease, 20), windowKey(recs[0].Lease, 15)}
	for _, key := range damaged {
		if _, err := s.arch.kv.Put(ctx, key, []byte("not a window")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Replica(ctx, recs[3].Lease); err == nil || !strings.Contains(err.Error(), windowPrefix(recs[0].Lease)) {
		t.Errorf("Replica of a lease in a damaged window: %v, want an error naming %s", err, windowPrefix(recs[0].Lease))
	}
	if r, err := s.Replica(ctx, far.Lease); err != nil || r.Lease != far.Lease {
		t.Errorf("Replica(%s), of its own key beside a damaged window: %v", far.Lease, err)
	}
	if _, err := s.Replica(ctx, recs[100].Lease); err != nil {
		t.Errorf("Replica(%s), in another window: %v", recs[100].Lease, err)
	}
	// A good fragment of the window is still read beside the damaged.
	if err := s.arch.put(ctx, []*pool.ReplicaRecord{recs[4]}, 30, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Replica(ctx, recs[4].Lease); err != nil || r.Lease != recs[4].Lease {
		t.Errorf("Replica(%s), in a good fragment beside damaged ones: %v", recs[4].Lease, err)
	}
	// A fragment deleted by hand is skipped.
	if err := s.arch.kv.Delete(ctx, windowKey(recs[100].Lease, 10)); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Replica(ctx, recs[101].Lease); err != nil || r.Lease != recs[101].Lease {
		t.Errorf("Replica(%s), of the fragment after a deleted one: %v", recs[101].Lease, err)
	}
	if _, err := s.Replica(ctx, recs[102].Lease); !errors.Is(err, pool.ErrUnknownLease) {
		t.Errorf("Replica(%s), of the deleted fragment: %v, want ErrUnknownLease", recs[102].Lease, err)
	}
	if _, err := s.Replica(ctx, ""); !errors.Is(err, pool.ErrUnknownLease) {
		t.Errorf("Replica of the empty lease: %v, want ErrUnknownLease", err)
	}
}

// Writers that archive into the same windows at once (a term's
// overlap, or retries meeting) lose no replica: on three nodes, four
// writers on three nodes each put every fourth replica of the same
// windows, in rounds: make check-cluster (IDLEPOOL_FULL_CLUSTER=1).
func TestArchiveWritersAtOnceThreeNodes(t *testing.T) {
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("archive writers at once on three nodes: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	t.Parallel()
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = openStore(t, nodes[i%3], 3)
	}
	ctx := context.Background()
	recs := archiveRecords(4000, windowNs/40+1) // 40 a window, 100 windows
	var g errgroup.Group
	for w, s := range stores {
		g.Go(func() error {
			for round := range 10 {
				var mine []*pool.ReplicaRecord
				for i := round * 400; i < (round+1)*400; i++ {
					if i%4 == w {
						mine = append(mine, recs[i])
					}
				}
				if err := s.arch.put(ctx, mine, uint64(100*w+round), time.Minute); err != nil {
					return fmt.Errorf("writer %d, round %d: %w", w, round, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		// A replica of the bucket may be behind the last write for a
		// moment: each read is tried again, bounded, never timed.
		patience(t, 2*time.Minute, "replica "+r.Lease+" readable after four writers archived at once", func() bool {
			_, err := stores[0].Replica(ctx, r.Lease)
			return err == nil
		})
	}
}

// inDoneOrder sorts recs (leases granted 20,000 a second, in order) by
// when each is done: spread seconds at most after its lease, at random.
func inDoneOrder(recs []*pool.ReplicaRecord, spread float64) {
	rnd := rand.New(rand.NewPCG(3, 4))
	done := make(map[*pool.ReplicaRecord]float64, len(recs))
	for i, r := range recs {
		done[r] = float64(i)/20000 + spread*rnd.Float64()
	}
	slices.SortStableFunc(recs, func(x, y *pool.ReplicaRecord) int {
		switch dx, dy := done[x], done[y]; {
		case dx < dy:
			return -1
		case dx > dy:
			return 1
		}
		return 0
	})
}

// BenchmarkArchivePut stores the replicas a busy pool's snapshot
// archives (4,096 done replicas at a time, minted 20,000 a second, every
// field set) in a one-node cluster's archive, by window and, as before
// windows, a key for each; ns/op is per replica, the JetStream server's
// work included (it runs in the process). The bytes stored per replica
// and the values (JetStream messages) per replica are reported too. In
// "lease-order" the replicas are done in the order their leases were
// granted; in "done-order" each up to a snapshot's span (0.2 s) after
// its lease, so that a window's replicas are in one or two fragments; in
// "shuffled" up to a hundred snapshots' span (20 s) after, so that they
// are in up to 21.
func BenchmarkArchivePut(b *testing.B) {
	for _, form := range []string{"windows/lease-order", "key-each/lease-order", "windows/done-order", "windows/shuffled", "key-each/shuffled"} {
		b.Run(form, func(b *testing.B) {
			_, s := oneNodeStore(b)
			ctx := context.Background()
			const batch = 4096
			recs := archiveRecords(b.N, uint64(time.Second)/20000)
			switch {
			case strings.HasSuffix(form, "/done-order"):
				inDoneOrder(recs, 0.2) // a snapshot's span: 4,096 at 20,000 a second
			case strings.HasSuffix(form, "/shuffled"):
				inDoneOrder(recs, 20) // a hundred snapshots' span
			}
			msgs, bytes := 0, 0
			for i := 0; i < b.N; i += batch {
				part := recs[i:min(i+batch, b.N)]
				if strings.HasPrefix(form, "windows") {
					windows, _ := archiveGroups(part)
					msgs += len(windows)
					for _, w := range windows {
						data, _, _ := encodeFragment(w)
						bytes += len(data)
					}
				} else {
					msgs += len(part)
					for _, r := range part {
						v, _ := replicaValue(r)
						bytes += len(v.data)
					}
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				part := recs[i:min(i+batch, b.N)]
				var err error
				if strings.HasPrefix(form, "windows") {
					err = s.arch.put(ctx, part, uint64(i), time.Minute)
				} else {
					err = putEach(ctx, s.arch, part)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(msgs)/float64(b.N), "values/replica")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/replica")
		})
	}
}

// putEach stores recs as the versions before windows did: each
// replica's gob under a key of its own, 1,024 acknowledgements awaited
// at a time.
func putEach(ctx context.Context, a *archive, recs []*pool.ReplicaRecord) error {
	for len(recs) > 0 {
		n := min(len(recs), archiveWindow)
		var acks []jetstream.PubAckFuture
		for _, r := range recs[:n] {
			v, err := replicaValue(r)
			if err != nil {
				return err
			}
			f, err := a.js.PublishAsync("$KV."+a.bucket+"."+v.key, v.data)
			if err != nil {
				return err
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		recs = recs[n:]
	}
	return nil
}

// BenchmarkArchiveGet reads one archived replica (the rare request that
// names a lease decided and archived, or one never granted, "unknown")
// among 40,960 granted 20,000 a second and archived in snapshots of
// 1,024, in the order they became done (as BenchmarkArchivePut: within
// a snapshot's span of their leases, "done-order", or a hundred
// snapshots', "shuffled": 1 or 2 fragments a window, or up to 21), by
// window and, as before windows, a key for each.
func BenchmarkArchiveGet(b *testing.B) {
	for _, form := range []string{"windows/done-order", "windows/done-order/unknown", "windows/shuffled", "windows/shuffled/unknown", "key-each"} {
		b.Run(form, func(b *testing.B) {
			_, s := oneNodeStore(b)
			ctx := context.Background()
			recs := archiveRecords(40960, uint64(time.Second)/20000)
			done := slices.Clone(recs)
			if strings.Contains(form, "shuffled") {
				inDoneOrder(done, 100*1024/20000.0)
			} else {
				inDoneOrder(done, 1024/20000.0)
			}
			for i := 0; i < len(done); i += 1024 {
				var err error
				if form == "key-each" {
					err = putEach(ctx, s.arch, done[i:i+1024])
				} else {
					err = s.arch.put(ctx, done[i:i+1024], uint64(i), time.Minute)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				r := recs[i*7919%len(recs)]
				if strings.HasSuffix(form, "/unknown") { // in a window, never granted
					forged := r.Lease[:31] + map[bool]string{true: "1", false: "0"}[r.Lease[31] == '0']
					if _, err := s.arch.get(ctx, forged); !errors.Is(err, pool.ErrUnknownLease) {
						b.Fatal(err)
					}
					continue
				}
				got, err := s.arch.get(ctx, r.Lease)
				if err != nil || got.Lease != r.Lease {
					b.Fatalf("get %s: %+v, %v", r.Lease, got.Lease, err)
				}
			}
		})
	}
}
