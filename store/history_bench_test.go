//go:build unix

package store_test

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

var historyTasks = flag.Int("restart.tasks", 100_000, "decided tasks in BenchmarkRestartHistory's history")

// historyInPlay is how many tasks BenchmarkRestartHistory leaves leased
// after its history: the work in play a restart must bring back.
const historyInPlay = 500

// BenchmarkRestartHistory measures a one-node coordinator's restart after
// a long history: a SQLite store that decided -restart.tasks tasks of one
// job at quorum 2 (50 tasks per commit: two leases per task, both agreed
// with the task's outcome in the next commit, the merger acknowledging
// each commit's outcomes), with 500 tasks leased at the end. "full" is a
// store never compacted, which loads every replica and outcome ever;
// "compacted" the same after DB.Compact, which loads the work in play and
// a summary per job. It reports seconds per restart (Load and
// NewScheduler), wall and CPU, and the heap the restarted Scheduler keeps
// (MiB, after a collection); "compacted" also the compaction's seconds.
//
//	go test -run '^$' -bench RestartHistory -benchtime 1x ./store/ -restart.tasks 1000000
func BenchmarkRestartHistory(b *testing.B) {
	db, blobs, path := historyStore(b, *historyTasks)
	restart := func(b *testing.B, db *store.DB) {
		var s *pool.Scheduler
		b.ResetTimer()
		cpu0 := cpuTime()
		for range b.N {
			s = nil
			var err error
			s, err = pool.NewScheduler(context.Background(), pool.SchedulerConfig{
				Pool: "bench", Key: pooltest.Key(b, "coordinator"), Store: db, Blobs: blobs.Path})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/restart")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/restart")
		b.StopTimer()
		jobs := s.Jobs()
		if len(jobs) != 1 || jobs[0].Accepted != int64(*historyTasks) || jobs[0].Leased != 2*historyInPlay {
			b.Fatalf("restored jobs: %+v; want one with %d accepted and %d leased", jobs, *historyTasks, 2*historyInPlay)
		}
		if fp := s.Footprint(); fp.Replicas != 2*historyInPlay {
			b.Fatalf("restored %d replicas in play, want %d", fp.Replicas, 2*historyInPlay)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
		runtime.KeepAlive(s)
		b.ReportMetric(0, "ns/op")
	}
	b.Run("full", func(b *testing.B) { restart(b, db) })
	db.Close()
	db, err := store.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	c, err := db.Compact(context.Background(), farFuture) // the history's clock, not the wall's: every chunk may pass
	if err != nil {
		b.Fatal(err)
	}
	compact := time.Since(start)
	b.Logf("compaction: %+v in %v", c, compact)
	b.Run("compacted", func(b *testing.B) {
		b.ReportMetric(compact.Seconds(), "compact-s")
		restart(b, db)
	})
}

// historyStore writes the history BenchmarkRestartHistory describes into
// a new SQLite store and returns it, the job's blobs and the store's
// path.
func historyStore(b *testing.B, tasks int) (*store.DB, *pooltest.Blobs, string) {
	b.Helper()
	dir := b.TempDir()
	path := filepath.Join(dir, "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	j, blobs := benchJob(b, dir, "history", 4096, tasks+historyInPlay+1)
	owner := pooltest.Key(b, "owner/sub")
	sub := pooltest.Device(b, owner, "sub-1")
	peers := []pool.Peer{sub}
	for i := range 16 {
		peers = append(peers, pooltest.Device(b, pooltest.Key(b, fmt.Sprintf("owner/donor%d", i%8)), fmt.Sprintf("donor-%d", i)))
	}
	at := time.UnixMilli(1_767_000_000_000)
	ctx := context.Background()
	if err := db.Commit(ctx, &pool.Batch{Peers: peers, Jobs: []pool.JobRecord{{ID: j.ID, Canonical: j.Canonical,
		Owner: sub.Owner, Merger: sub.ID, Order: 1, Added: at}}}); err != nil {
		b.Fatal(err)
	}
	result := []byte(`{"x":1}`)
	digest := pool.ReplicaDigest(result, false, "")
	var (
		inFlight []pool.ReplicaRecord
		next     int64
		seq      int64
	)
	lease := func(n int) {
		for range n {
			for k := range 2 {
				p := peers[1+(int(next)*2+k)%16]
				inFlight = append(inFlight, pool.ReplicaRecord{Lease: pool.NewLeaseID(), Job: j.ID, Task: next,
					Peer: p.ID, Owner: p.Owner, State: pool.ReplicaLeased, Created: at, Deadline: at.Add(time.Hour), Version: 1})
			}
			next++
		}
	}
	const perBatch = 50
	for next < int64(tasks) || len(inFlight) > 0 {
		bt := &pool.Batch{}
		for i, r := range inFlight {
			r.State, r.Digest, r.Version, r.Prev = pool.ReplicaAgreed, digest, 2, 1
			bt.Replicas = append(bt.Replicas, r)
			if i%2 == 1 {
				seq++
				bt.Outcomes = append(bt.Outcomes, pool.OutcomeRecord{Job: j.ID, Digest: digest,
					Verified: pool.Verified{Seq: seq, Task: r.Task, Status: pool.OutcomeOK}})
			}
		}
		if n := int64(len(inFlight) / 2); n > 0 {
			bt.Acks = []pool.AckRecord{{Job: j.ID, Prev: seq - n, Upto: seq}}
		}
		inFlight = inFlight[:0]
		lease(min(perBatch, tasks-int(next)))
		bt.Replicas = append(bt.Replicas, inFlight...)
		if err := db.Commit(ctx, bt); err != nil {
			b.Fatalf("commit history at task %d: %v", next, err)
		}
		at = at.Add(10 * time.Millisecond)
	}
	lease(historyInPlay)
	if err := db.Commit(ctx, &pool.Batch{Replicas: inFlight}); err != nil {
		b.Fatal(err)
	}
	return db, blobs, path
}
