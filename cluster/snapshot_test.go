package cluster

import (
	"context"
	"flag"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// streamBounds returns the state stream's first and last sequence.
func streamBounds(t testing.TB, n *Node) (first, last uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := n.JetStream().Stream(ctx, StateStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.FirstSeq, info.State.LastSeq
}

// sameState fails the test unless a and b hold the same snapshot and
// ledger.
func sameState(t *testing.T, what string, a, b *Store) {
	t.Helper()
	ctx := context.Background()
	sa, err := a.mem.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.mem.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A store folds the acknowledged outcomes into summaries when it
	// snapshots or follows one, so two stores may hold the same outcomes
	// as more or fewer records: compare what they say.
	decided := func(s *pool.Snapshot) (*pool.Snapshot, map[job.ID]pooltest.Decided) {
		d := map[job.ID]pooltest.Decided{}
		for _, j := range s.Jobs {
			var err error
			if d[j.ID], err = pooltest.DecidedOf(s, j.ID); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		c := *s
		c.Outcomes, c.Summaries = nil, nil
		return &c, d
	}
	ra, da := decided(sa)
	rb, db := decided(sb)
	if d := cmp.Diff(ra, rb); d != "" {
		t.Fatalf("%s: the state differs (-writer +loaded):\n%s", what, d)
	}
	if d := cmp.Diff(da, db); d != "" {
		t.Fatalf("%s: the outcomes differ (-writer +loaded):\n%s", what, d)
	}
	ea, _ := a.Entries(ctx, pool.EntryQuery{Max: 1 << 30})
	eb, _ := b.Entries(ctx, pool.EntryQuery{Max: 1 << 30})
	if d := cmp.Diff(ea, eb); d != "" {
		t.Fatalf("%s: the ledger differs (-writer +loaded):\n%s", what, d)
	}
	for _, r := range sa.Replicas[:min(len(sa.Replicas), 8)] {
		got, err := b.Replica(ctx, r.Lease)
		if err != nil || got.State != r.State {
			t.Fatalf("%s: archived replica %s: %+v, %v", what, r.Lease, got, err)
		}
	}
}

// A snapshot trims the state stream behind the snapshot before it; a
// node that starts from nothing loads the newest snapshot and replays
// only the batches after it, and one whose next batch was trimmed while
// it was behind loads the snapshot too; either ends with exactly the
// writer's state and ledger, and commits after it.
func TestStoreSnapshotTrim(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	lagging := openStore(t, node, 1)
	h := newHistory()
	h.write(t, w, 40, 10)
	if _, err := lagging.Load(ctx); err != nil { // follows up to here, then falls behind
		t.Fatal(err)
	}
	lagging.Release()
	h.write(t, w, 80, 10)
	first, err := w.WriteSnapshot(ctx)
	if err != nil || first.Seq == 0 || first.Trimmed != 0 {
		t.Fatalf("first snapshot: %+v, %v; want one that trims nothing", first, err)
	}
	h.write(t, w, 160, 10)
	second, err := w.WriteSnapshot(ctx)
	if err != nil || second.Seq <= first.Seq || second.Trimmed != first.Seq+1 {
		t.Fatalf("second snapshot: %+v, %v; want one that trims up to the first (%d)", second, err, first.Seq)
	}
	h.write(t, w, 180, 10)
	lo, hi := streamBounds(t, node)
	if lo != first.Seq+1 || hi != w.LastSeq() {
		t.Fatalf("stream holds %d..%d, want %d..%d", lo, hi, first.Seq+1, w.LastSeq())
	}
	seqs, err := w.snaps.list(ctx)
	if err != nil || len(seqs) != 1 || seqs[0] != second.Seq {
		t.Fatalf("snapshots kept: %v, %v; want only %d", seqs, err, second.Seq)
	}

	cold := openStore(t, node, 1)
	if _, err := cold.Load(ctx); err != nil {
		t.Fatalf("load from nothing: %v", err)
	}
	if cold.loads != 1 || cold.LastSeq() != w.LastSeq() {
		t.Fatalf("load from nothing: %d snapshots loaded, at %d; want 1, at %d", cold.loads, cold.LastSeq(), w.LastSeq())
	}
	sameState(t, "from nothing", w, cold)
	if _, err := lagging.Load(ctx); err != nil {
		t.Fatalf("load behind the trim: %v", err)
	}
	if lagging.loads != 1 {
		t.Fatalf("a store behind the trim loaded %d snapshots, want 1", lagging.loads)
	}
	sameState(t, "behind the trim", w, lagging)
	// The loaded store goes on where the writer stopped.
	w.Release()
	if err := cold.Commit(ctx, h.batch(5)); err != nil {
		t.Fatalf("commit after loading a snapshot: %v", err)
	}
}

// The pool.Store contract holds across snapshots: every reopening
// snapshots the store it leaves and loads a fresh one from that
// snapshot and the stream's tail.
func TestStoreConformanceSnapshots(t *testing.T) {
	t.Parallel()
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
		return openStore(t, node, 1), func(old pool.Store) pool.Store {
			if _, err := old.(*Store).WriteSnapshot(context.Background()); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			return openStore(t, node, 1)
		}
	})
}

// A scheduler moved to a fresh store three times in the middle of a job,
// each time after a snapshot, loses and duplicates nothing, and the
// fresh stores load snapshots.
func TestClusterRestartSnapshots(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	h := pooltest.NewHarness(t, openStore(t, node, 1), nil)
	loads := 0
	h.Reopen = func(old pool.Store) pool.Store {
		o := old.(*Store)
		loads += o.loads
		if _, err := o.WriteSnapshot(context.Background()); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		return openStore(t, node, 1)
	}
	pooltest.RunRestart(h)
	if loads == 0 {
		t.Fatal("no fresh store loaded a snapshot")
	}
}

var coldTasks = flag.Int("coldstart.tasks", 100_000, "BenchmarkColdStart: decided tasks in the pool's history")

// BenchmarkColdStart measures how long a node that starts from nothing
// takes to load a one-node cluster's state after coldstart.tasks decided
// tasks (quorum 2, 50 tasks per batch): once by replaying the whole
// stream (no snapshot, as every node did before snapshots), once from
// the newest snapshot (which leaves out the replicas and the ledger
// entries the snapshot moved to the archives, and holds a summary in
// place of the acknowledged outcomes) and the tail after it; each load reports its time and
// the heap the loaded state keeps. Run it with make bench-coldstart
// (docs/benchmarks.md).
func BenchmarkColdStart(b *testing.B) {
	node := startNodes(b, testConfigs(b, b.TempDir(), 1))[0]
	ctx := context.Background()
	w := openStore(b, node, 1)
	if _, err := w.Load(ctx); err != nil {
		b.Fatal(err)
	}
	h := newHistory()
	start := time.Now()
	h.write(b, w, *coldTasks, 50)
	_, hi := streamBounds(b, node)
	b.Logf("history: %d decided tasks in %d state messages, written in %s", *coldTasks, hi, time.Since(start).Round(time.Millisecond))
	load := func(what string) {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		s := openStore(b, node, 1)
		start := time.Now()
		if _, err := s.Load(ctx); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		runtime.ReadMemStats(&ms)
		lo, hi := streamBounds(b, node)
		heap := ms.HeapAlloc
		// What the loaded store keeps, once the load's garbage is gone:
		// the memory a node holds for the pool's state.
		runtime.GC()
		runtime.ReadMemStats(&ms)
		kept := int64(ms.HeapAlloc) - int64(before)
		runtime.KeepAlive(s)
		b.Logf("%s: loaded in %s (%d snapshots, stream %d..%d), heap %d MiB (the writer's state included), the loaded state keeps %d MiB",
			what, d.Round(time.Millisecond), s.loads, lo, hi, heap>>20, kept>>20)
		b.ReportMetric(d.Seconds(), what+"-s")
		b.ReportMetric(float64(kept>>20), what+"-MiB")
	}
	for range b.N {
		load("replay")
		st, err := w.WriteSnapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("snapshot at %d: copy %s (under the lock), archive %d replicas and %d ledger entries %s, write %s", st.Seq, st.Copy, st.Archived, st.Entries, st.Archive.Round(time.Millisecond), st.Write.Round(time.Millisecond))
		h.write(b, w, *coldTasks+*coldTasks/50, 50) // a tail
		st, err = w.WriteSnapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("snapshot at %d: copy %s (under the lock), archive %d replicas and %d ledger entries %s, write %s, trimmed before %d", st.Seq, st.Copy, st.Archived, st.Entries, st.Archive.Round(time.Millisecond), st.Write.Round(time.Millisecond), st.Trimmed)
		h.write(b, w, *coldTasks+*coldTasks/25, 50) // and a tail after it
		load("snapshot")
	}
}

// A store loads a stream shorter than one fetch as soon as its messages
// arrive, not when the fetch's timeout (here an hour) expires: the
// node that takes over, or starts, serves at once.
func TestStoreLoadShortStream(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	open := func() *Store {
		s, err := OpenStore(context.Background(), node.JetStream(), StoreConfig{Replicas: 1, Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w := open()
	if _, err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	newHistory().write(t, w, 20, 5)
	// Patience, not a verdict: before, the load waited out its fetch's
	// time (most of the hour) for messages that were not coming.
	s := open()
	done := make(chan error, 1)
	go func() { _, err := s.Load(context.Background()); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("load: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the load of a few batches still waits after two minutes")
	}
	if s.LastSeq() != w.LastSeq() {
		t.Fatalf("loaded up to %d, want %d", s.LastSeq(), w.LastSeq())
	}
}

// Snapshots writes a snapshot once every messages were applied since the
// last, and trims the stream behind the one before, as the node in
// charge runs it.
func TestStoreSnapshotsLoop(t *testing.T) {
	t.Parallel()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	w := openStore(t, node, 1)
	if _, err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu    sync.Mutex
		stats []SnapshotStats
	)
	trimmed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stats) > 0 && stats[len(stats)-1].Trimmed > 0
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Snapshots(ctx, 3, 10*time.Millisecond, func(err error) { t.Errorf("snapshot: %v", err) },
			func(st SnapshotStats) { mu.Lock(); stats = append(stats, st); mu.Unlock() })
	}()
	h := newHistory()
	// Patience, not a verdict: each step waits for the loop's next check.
	deadline := time.Now().Add(2 * time.Minute)
	for tasks := 5; !trimmed(); tasks += 5 {
		h.write(t, w, tasks, 5)
		if time.Now().After(deadline) {
			t.Fatal("no snapshot trimmed the stream within two minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if lo, _ := streamBounds(t, node); lo <= 1 {
		t.Fatalf("the stream starts at %d after a snapshot trimmed it", lo)
	}
	if len(stats) < 2 || stats[0].Trimmed != 0 || stats[len(stats)-1].Trimmed == 0 {
		t.Fatalf("snapshots %+v: want a first that trims nothing and a later that trims", stats)
	}
}
