//go:build unix

package coord

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// BenchmarkLeaseManyJobs measures one lease (and its release) in a pool of
// 10,001 unfinished jobs, with the coordinator's matchmaking (Select
// against the device's live offer): found by trying it, a lease took
// 0.75 s at the median there. It reports wall and CPU time per lease.
//
//	go test -run '^$' -bench LeaseManyJobs -benchtime 200x ./coord/
func BenchmarkLeaseManyJobs(b *testing.B) {
	const jobs = 10_001
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Pool: "test"})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	peer := func() *testPeer {
		k, err := identity.Generate()
		if err != nil {
			b.Fatal(err)
		}
		o, err := identity.Generate()
		if err != nil {
			b.Fatal(err)
		}
		p := &testPeer{key: k, owner: o}
		if err := srv.sched.RegisterPeer(ctx, pool.Peer{ID: k.ID(), Owner: o.ID(), Key: k.Public(), OwnerKey: o.Public(),
			Endorsement: o.Sign(pool.EndorsementMessage(k.Public()))}); err != nil {
			b.Fatal(err)
		}
		return p
	}
	owner, donor := peer(), peer()
	ts := &testServer{Server: srv}
	ts.offers.put(testOffer(donor, ts.cfg.Now(), time.Hour))
	dir := b.TempDir()
	prog := []byte("\x00asm\x01\x00\x00\x00")
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o600); err != nil {
		b.Fatal(err)
	}
	if _, err := ts.blobs.putBytes(prog); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	sem := make(chan struct{}, 256) // many AddJob calls share a commit
	for i := range jobs {
		m, err := job.ParseManifest("b.toml", dir, []byte(fmt.Sprintf(
			"name = \"job %d\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n", i)))
		if err != nil {
			b.Fatal(err)
		}
		j, err := job.Plan(m)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := ts.sched.AddJob(ctx, j, owner.ID()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := leaseCPU()
	for range b.N {
		ls, err := ts.sched.Lease(ctx, donor.ID(), 1)
		if err != nil || len(ls) != 1 {
			b.Fatalf("lease: %v %v", ls, err)
		}
		if err := ts.sched.Release(ctx, donor.ID(), ls[0].ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/lease")
	b.ReportMetric(float64((leaseCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/lease")
}

func leaseCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
