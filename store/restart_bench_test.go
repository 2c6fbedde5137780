//go:build unix

package store_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// restartJobs is how many jobs BenchmarkRestartManyJobs restores: the
// case found by trying it (10,001 jobs took 148 s to come back).
const restartJobs = 10_001

// restartProgramBytes is the size of the benchmark's program, which every
// job names (the size of a small Go or Rust WebAssembly module).
const restartProgramBytes = 1 << 20

// BenchmarkRestartManyJobs measures a coordinator restart: NewScheduler on
// a SQLite store holding 10,001 unfinished jobs of one 1 MiB program, each
// with one decided task, one returned replica and one live lease. It
// reports seconds per restart, wall and CPU (robust on a busy machine).
//
//	go test -run '^$' -bench RestartManyJobs -benchtime 3x ./store/
func BenchmarkRestartManyJobs(b *testing.B) {
	db, blobs := restartStore(b, restartJobs)
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		s, err := pool.NewScheduler(context.Background(), pool.SchedulerConfig{
			Pool: "bench", Key: pooltest.Key(b, "coordinator"), Store: db, Blobs: blobs.Path})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(s.Jobs()); n != restartJobs {
			b.Fatalf("%d jobs restored, want %d", n, restartJobs)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/restart")
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/restart")
}

// restartStore writes n jobs straight into a new SQLite store, in one
// batch, with the state described on BenchmarkRestartManyJobs.
func restartStore(b testing.TB, n int) (*store.DB, *pooltest.Blobs) {
	b.Helper()
	dir := b.TempDir()
	db, err := store.Open(filepath.Join(dir, "coordinator.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	owner, dev := pooltest.Key(b, "owner/sub"), pooltest.Key(b, "owner/donor")
	sub := pooltest.Device(b, owner, "sub-1")
	donor := pooltest.Device(b, dev, "donor-1")
	batch := &pool.Batch{Peers: []pool.Peer{sub, donor}}
	at := time.UnixMilli(1_767_000_000_000)
	// Plan one job from a manifest, then vary its name in the encoding
	// without hashing the program again: setting up stays quick.
	j, blobs := benchJob(b, dir, "j", restartProgramBytes, 4)
	for i := range n {
		canon := renamed(b, j.Canonical, fmt.Sprintf("job %d", i))
		id := job.ID(sha256.Sum256(canon))
		batch.Jobs = append(batch.Jobs, pool.JobRecord{ID: id, Canonical: canon, Owner: sub.Owner, Merger: sub.ID, Order: int64(i + 1), Added: at})
		result := []byte(`{"x":1}`)
		d := pool.ReplicaDigest(result, false, "")
		batch.Outcomes = append(batch.Outcomes, pool.OutcomeRecord{Job: id, Digest: d, Verified: pool.Verified{Seq: 1, Task: 0, Status: pool.OutcomeOK, Result: result}})
		batch.Replicas = append(batch.Replicas,
			pool.ReplicaRecord{Lease: fmt.Sprintf("r%d", i), Job: id, Task: 1, Peer: donor.ID, Owner: donor.Owner, State: pool.ReplicaReturned,
				Created: at, Deadline: at.Add(time.Hour), Digest: d, Result: result, Version: 1},
			pool.ReplicaRecord{Lease: fmt.Sprintf("l%d", i), Job: id, Task: 2, Peer: donor.ID, Owner: donor.Owner, State: pool.ReplicaLeased,
				Created: at, Deadline: at.Add(time.Hour), Version: 1})
	}
	if err := db.Commit(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	return db, blobs
}

// benchJob writes a program of size bytes into dir (a WebAssembly header,
// then random bytes) and plans a job named name of tasks tasks (rule
// range) on it, its program in the returned blobs.
func benchJob(b testing.TB, dir, name string, size, tasks int) (*job.Job, *pooltest.Blobs) {
	b.Helper()
	prog := make([]byte, size)
	rand.Read(prog)
	copy(prog, "\x00asm\x01\x00\x00\x00")
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o600); err != nil {
		b.Fatal(err)
	}
	m, err := job.ParseManifest("bench.toml", dir, fmt.Appendf(nil,
		"name = %q\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = %d\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n", name, tasks))
	if err != nil {
		b.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		b.Fatal(err)
	}
	blobs := &pooltest.Blobs{}
	blobs.Put(j.Program.SHA256, j.Program.Path)
	return j, blobs
}

// renamed is canonical with another name, encoded as job's canonical
// encoding is (core deterministic CBOR).
func renamed(b testing.TB, canonical []byte, name string) []byte {
	b.Helper()
	var doc map[string]any
	if err := cbor.Unmarshal(canonical, &doc); err != nil {
		b.Fatal(err)
	}
	doc["name"] = name
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		b.Fatal(err)
	}
	out, err := em.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// Found by trying it: a coordinator loading 10,001 jobs ignored SIGTERM.
// A restart whose context ends (serve's, at SIGTERM) stops loading and
// says so, instead of rebuilding every job first.
func TestRestartStopsWhenCancelled(t *testing.T) {
	db, blobs := restartStore(t, 200)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pool.NewScheduler(ctx, pool.SchedulerConfig{Pool: "bench", Key: pooltest.Key(t, "coordinator"), Store: db, Blobs: blobs.Path})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("NewScheduler with an ended context: %v, want context.Canceled", err)
	}
}
