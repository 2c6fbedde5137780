package cluster

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

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

// archiveRecords returns n done replicas, every field set, of leases
// minted over stretches stretches of partStretch digits: n/stretches
// consecutive leases in each.
func archiveRecords(n, stretches int) []*pool.ReplicaRecord {
	var base pool.ReplicaRecord
	k := 0
	fill(reflect.ValueOf(&base).Elem(), &k)
	base.Prev = 0
	out := make([]*pool.ReplicaRecord, n)
	for i := range out {
		r := base
		stamp := uint64(0x18a0000000000000) + uint64(i%stretches)<<(64-4*partStretch) + uint64(i)
		r.Lease = fmt.Sprintf("%016x%016x", stamp, uint64(i)*7919)
		r.Task = int64(i)
		out[i] = &r
	}
	return out
}

// The replicas a snapshot archives are stored in parts: in lease order,
// each lease once, each part within one stretch and at most partMax
// replicas or about partBytes; a replica whose lease ID is not the
// Scheduler's form, or whose times cbor-v2 cannot hold, under a key of
// its own in the form before. Every replica reads back with every
// field as it was.
func TestArchiveParts(t *testing.T) {
	recs := archiveRecords(5000, 3)
	// Noted done twice, and given out of order.
	recs = append(recs, recs[17], recs[4000])
	slices.Reverse(recs)
	odd := *recs[0]
	odd.Lease = "lease-from-elsewhere"
	late := *recs[1]
	late.Lease = recs[1].Lease[:31] + "x" // not hex: under its own key
	far := *archiveRecords(1, 1)[0]
	far.Lease = "ffffffffffffffff0000000000000000"
	far.Deadline = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) // past cbor-v2's times
	big := *archiveRecords(1, 1)[0]
	big.Lease = recs[0].Lease[:partStretch] + "ffffffff00000000000000000000"[:32-partStretch] // its stretch's last
	big.Result = make([]byte, partBytes-10)
	recs = append(recs, &odd, &late, &far, &big)

	vals, err := archiveValues(recs, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]pool.ReplicaRecord{}
	for _, r := range recs {
		want[r.Lease] = *r
	}
	got := map[string]pool.ReplicaRecord{}
	parts, own := 0, 0
	for _, v := range vals {
		if strings.HasPrefix(v.key, "l.") {
			own++
			var r pool.ReplicaRecord
			if err := gob.NewDecoder(bytes.NewReader(v.data)).Decode(&r); err != nil {
				t.Fatalf("%s: %v", v.key, err)
			}
			if v.key != leaseKey(r.Lease) {
				t.Fatalf("replica %s under key %s", r.Lease, v.key)
			}
			got[r.Lease] = r
			continue
		}
		parts++
		rs, err := decodePart(v.data)
		if err != nil {
			t.Fatalf("%s: %v", v.key, err)
		}
		if len(rs) == 0 || len(rs) > partMax {
			t.Fatalf("%s holds %d replicas, want 1 to %d", v.key, len(rs), partMax)
		}
		if v.key != partKey(rs[0].Lease, rs[len(rs)-1].Lease, 7) {
			t.Fatalf("a part from %s to %s under key %s", rs[0].Lease, rs[len(rs)-1].Lease, v.key)
		}
		size := 0
		for _, r := range rs {
			if _, twice := got[r.Lease]; twice {
				t.Fatalf("replica %s stored twice", r.Lease)
			}
			if r.Lease[:partStretch] != rs[0].Lease[:partStretch] {
				t.Fatalf("%s holds %s, of another stretch", v.key, r.Lease)
			}
			got[r.Lease] = r
			size += replicaSize(&r)
		}
		if len(rs) > 1 && size > partBytes {
			t.Fatalf("%s holds %d replicas with %d bytes of results, over %d", v.key, len(rs), size, partBytes)
		}
	}
	if own != 3 {
		t.Errorf("%d replicas under keys of their own, want 3 (a lease not in the Scheduler's form, one not hex, one of the year 2300)", own)
	}
	// 5,000 leases over 3 stretches: 1,667, 1,667 and 1,666, each cut
	// into parts of partMax; the big result is a part of its own.
	if want := 3*((1667+partMax-1)/partMax) + 1; parts != want {
		t.Errorf("%d parts, want %d", parts, want)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("the archived replicas differ (-given +read):\n%s", d)
	}
	// More than partMax in one stretch: cut.
	vals, err = archiveValues(archiveRecords(2*partMax+1, 1), 7)
	if err != nil || len(vals) != 3 {
		t.Fatalf("%d+1 replicas of one stretch in %d values (%v), want 3 parts", 2*partMax, len(vals), err)
	}
	// A part that is not one.
	if _, err := decodePart([]byte{0xc1, 0x00}); err == nil {
		t.Error("a time tag read as a part")
	}
	rs := archiveRecords(2, 1)
	data, _, _ := encodePart([]pool.ReplicaRecord{*rs[1], *rs[0]})
	if _, err := decodePart(data); err == nil || !strings.Contains(err.Error(), "lease order") {
		t.Errorf("a part out of order: %v", err)
	}
}

// A Store reads every archived replica back from its part, and from a
// key of its own where an older version put it; a lease in a stretch
// with parts but in none of them, or in a stretch with none, is
// unknown; parts stored again (a put done again with more replicas, or
// by another node with fewer) still answer; a damaged part is an error
// that names it.
func TestArchiveReadsParts(t *testing.T) {
	t.Parallel()
	_, s := oneNodeStore(t)
	ctx := context.Background()
	recs := archiveRecords(3000, 2)
	if err := s.arch.put(ctx, recs[:1000], 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.arch.put(ctx, recs, 20, time.Minute); err != nil {
		t.Fatal(err)
	}
	// A node in charge a moment too long (a term's overlap), behind the
	// other, archives less of the same stretch: its part from the same
	// first lease to the same last (the first part of the first stretch,
	// the even leases 0 to 2,046) must not take the place of the other's.
	if err := s.arch.put(ctx, []*pool.ReplicaRecord{recs[0], recs[2*(partMax-1)]}, 15, time.Minute); err != nil {
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
	for _, r := range []*pool.ReplicaRecord{recs[0], recs[1], recs[2], recs[999], recs[1500], recs[2*(partMax-1)], recs[2998], recs[2999], &old} {
		got, err := s.Replica(ctx, r.Lease)
		if err != nil {
			t.Fatalf("Replica(%s): %v", r.Lease, err)
		}
		if d := cmp.Diff(*r, got); d != "" {
			t.Fatalf("Replica(%s) (-archived +read):\n%s", r.Lease, d)
		}
	}
	between := recs[0].Lease[:31] + "f" // in the first part's range, not archived
	if between == recs[0].Lease || between == recs[2].Lease {
		t.Fatal("the test's leases changed")
	}
	for _, l := range []string{between, "7fffffffffffffff0000000000000000", "not a lease"} {
		if _, err := s.Replica(ctx, l); !errors.Is(err, pool.ErrUnknownLease) {
			t.Errorf("Replica(%s) = %v, want ErrUnknownLease", l, err)
		}
	}
	// Damage every part that holds recs[0].
	kl, err := s.arch.kv.ListKeysFiltered(ctx, partPrefix(recs[0].Lease)+">")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for k := range kl.Keys() {
		if first, last, ok := partRange(k, partPrefix(recs[0].Lease)); ok && first <= recs[0].Lease && recs[0].Lease <= last {
			if _, err := s.arch.kv.Put(ctx, k, []byte("not a part")); err != nil {
				t.Fatal(err)
			}
			key = k
		}
	}
	if key == "" {
		t.Fatalf("no part holds %s", recs[0].Lease)
	}
	if _, err := s.Replica(ctx, recs[0].Lease); err == nil || !strings.Contains(err.Error(), partPrefix(recs[0].Lease)) {
		t.Errorf("Replica of a lease in a damaged part: %v, want an error naming the part (%s)", err, key)
	}
}

// BenchmarkArchivePut stores the replicas a busy pool's snapshot
// archives (4,096 done replicas at a time, every field set) in a
// one-node cluster's archive, in parts and, as before parts, a key for
// each; ns/op is per replica, the JetStream server's work included (it
// runs in the process). The bytes stored per replica and the values
// (JetStream messages) per replica are reported too.
func BenchmarkArchivePut(b *testing.B) {
	for _, form := range []string{"parts", "key-each"} {
		b.Run(form, func(b *testing.B) {
			_, s := oneNodeStore(b)
			ctx := context.Background()
			const batch = 4096
			msgs, bytes := 0, 0
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				recs := archiveRecords(min(batch, b.N-done), 1)
				for i, r := range recs { // leases of their own
					r.Lease = fmt.Sprintf("%016x%016x", uint64(0x18a0000000000000)+uint64(done+i)<<20, uint64(done+i))
				}
				var err error
				if form == "parts" {
					var vals []archiveValue
					if vals, err = archiveValues(recs, uint64(done)); err == nil {
						msgs += len(vals)
						for _, v := range vals {
							bytes += len(v.data)
						}
					}
					err = s.arch.put(ctx, recs, uint64(done), time.Minute)
				} else {
					for _, r := range recs {
						v, _ := replicaValue(r)
						bytes += len(v.data)
					}
					err = putEach(ctx, s.arch, recs)
					msgs += len(recs)
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

// putEach stores recs as the versions before parts did: each replica's
// gob under a key of its own, 1,024 acknowledgements awaited at a time.
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
// names a lease decided and archived) among 40,960 archived at 2,048 a
// second over 20 s (about 9,000 in its stretch), in parts and, as
// before parts, a key for each.
func BenchmarkArchiveGet(b *testing.B) {
	for _, form := range []string{"parts", "key-each"} {
		b.Run(form, func(b *testing.B) {
			_, s := oneNodeStore(b)
			ctx := context.Background()
			recs := archiveRecords(40960, 1)
			for i, r := range recs {
				r.Lease = fmt.Sprintf("%016x%016x", uint64(0x18a0000000000000)+uint64(i)*uint64(time.Second)/2048, uint64(i))
			}
			var err error
			if form == "parts" {
				err = s.arch.put(ctx, recs, 1, time.Minute)
			} else {
				err = putEach(ctx, s.arch, recs)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				r := recs[i*7919%len(recs)]
				if got, err := s.arch.get(ctx, r.Lease); err != nil || got.Lease != r.Lease {
					b.Fatalf("get %s: %+v, %v", r.Lease, got.Lease, err)
				}
			}
		})
	}
}
