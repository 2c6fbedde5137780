//go:build unix

package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// BenchmarkCommitBatch commits batches shaped like the scheduler's at
// quorum 2 with agents leasing ahead (11 tasks per batch): each batch
// inserts 22 new leases, moves the previous batch's 22 replicas to
// returned and 7 older ones to agreed, adds 11 outcomes and 22 ledger
// entries of 8 peers. Its leases have the scheduler's IDs (pool.NewLeaseID). It
// reports the store's CPU time per task:
//
//	go test -run '^$' -bench CommitBatch -benchtime 2000x ./store/
func BenchmarkCommitBatch(b *testing.B) {
	const tasks = 11
	db, err := store.Open(filepath.Join(b.TempDir(), "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	jobID := job.ID(sha256.Sum256([]byte("bench")))
	t0 := time.UnixMilli(1_767_000_000_000)
	if err := db.Commit(ctx, &pool.Batch{Jobs: []pool.JobRecord{{ID: jobID, Canonical: []byte("c"), Owner: "o", Merger: "m", Order: 1, Added: t0}}}); err != nil {
		b.Fatal(err)
	}
	key := pooltest.Key(b, "coordinator")
	var (
		prev   job.Digest
		seq    uint64
		last   []pool.ReplicaRecord // the previous batch's new leases
		oldest []pool.ReplicaRecord // returned, waiting to be decided
	)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		var batch pool.Batch
		for k := range 2 * tasks {
			task := int64(i*tasks + k/2)
			batch.Replicas = append(batch.Replicas, pool.ReplicaRecord{Lease: pool.NewLeaseID(), Job: jobID, Task: task,
				Peer: fmt.Sprint("p", k%8), Owner: fmt.Sprint("o", k%8), State: pool.ReplicaLeased, Created: t0, Deadline: t0.Add(time.Minute), Version: 1})
		}
		for _, r := range last {
			r.Prev, r.Version, r.State = r.Version, r.Version+1, pool.ReplicaReturned
			batch.Replicas = append(batch.Replicas, r)
			oldest = append(oldest, r)
		}
		for k := 0; k < 7 && len(oldest) > 0; k++ {
			r := oldest[0]
			oldest = oldest[1:]
			r.Prev, r.Version, r.State = r.Version, r.Version+1, pool.ReplicaAgreed
			batch.Replicas = append(batch.Replicas, r)
		}
		if len(oldest) > 4*tasks {
			// Keep the newest: an ever longer slice would charge its
			// copying to the store's CPU time.
			oldest = append(oldest[:0:0], oldest[len(oldest)-2*tasks:]...)
		}
		last = batch.Replicas[: 2*tasks : 2*tasks]
		for k := range int64(tasks) {
			task := int64(i*tasks) + k
			batch.Outcomes = append(batch.Outcomes, pool.OutcomeRecord{Job: jobID, Verified: pool.Verified{Seq: task + 1, Task: task, Status: "ok"}})
			for r := range 2 {
				seq++
				p := (2*int(k) + r) % 8 // the peers of the replicas above
				batch.Entries = append(batch.Entries, pool.Entry{Seq: seq, Kind: pool.KindReceipt, Pool: "bench", Job: jobID, Task: task,
					Peer: fmt.Sprint("p", p), Owner: fmt.Sprint("o", p), Lease: fmt.Sprint("l", seq), Cost: 1, Time: 1_767_000_000_000})
			}
		}
		prev = pool.SignBatch(batch.Entries, prev, key.Sign)
		if err := db.Commit(ctx, &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*tasks), "cpu-µs/task")
}
