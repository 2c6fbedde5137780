//go:build unix

package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

const (
	crashEnv   = "IDLEPOOL_STORE_CRASH_DIR"
	crashTasks = 1000
	crashPeers = 6
)

// crashSetup opens the database in dir and builds the job every process
// of the test agrees on.
func crashSetup(t *testing.T, dir string) (*store.DB, *pooltest.Blobs, *job.Job) {
	db, err := store.Open(filepath.Join(dir, "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	blobs := &pooltest.Blobs{}
	j := pooltest.Job(t, blobs, dir, "crash", crashTasks, pooltest.Policy{LeaseTimeout: time.Second})
	return db, blobs, j
}

// crashPeer leases and submits until the job completes, calling ok after
// every submission the scheduler acknowledged.
func crashPeer(ctx context.Context, s *pool.Scheduler, peer string, id job.ID, ok func(pool.Lease)) error {
	for {
		ls, err := s.Lease(ctx, peer, 4)
		if err != nil {
			return err
		}
		if len(ls) == 0 {
			if st, _ := s.Status(id); st.Complete {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, l := range ls {
			err := s.Submit(ctx, peer, l.ID, pooltest.Good(l.Task))
			switch {
			case err == nil:
				ok(l)
			case errors.Is(err, pool.ErrTaskDecided), errors.Is(err, pool.ErrLeaseExpired):
			default:
				return err
			}
		}
	}
}

// TestDBKill9 kills a coordinator process (this test binary, re-executed)
// with SIGKILL while eight peers lease and submit as fast as they can, then
// opens its database in a new scheduler: every submission the dead process
// acknowledged is there, the ledger verifies, and finishing the job gives
// every task exactly one outcome and exactly two receipts.
func TestDBKill9(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a subprocess")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDBKill9$", "-test.count=1")
	// The child's own temporary directories (its harness's) go under
	// dir too: killed, it cannot remove them.
	cmd.Env = append(os.Environ(), crashEnv+"="+dir, "TMPDIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{} // lease → task, acknowledged by the dead process
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	for sc.Scan() && len(acked) < 400 {
		var lease string
		var task int64
		if n, _ := fmt.Sscanf(sc.Text(), "ok %s %d", &lease, &task); n == 2 {
			acked[lease] = task
		}
	}
	deadline.Stop()
	cmd.Process.Kill() // SIGKILL: no deferred function, no flush, no close
	cmd.Wait()
	if len(acked) < 400 {
		t.Fatalf("the child acknowledged only %d submissions before it ended", len(acked))
	}

	db, blobs, j := crashSetup(t, dir)
	snap, err := db.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]pool.ReplicaRecord{}
	for _, r := range snap.Replicas {
		found[r.Lease] = r
	}
	for lease, task := range acked {
		r, ok := found[lease]
		if !ok || r.Task != task || r.Digest != pooltest.Good(task).Digest || r.State == pool.ReplicaLeased {
			t.Fatalf("acknowledged submission %s (task %d) lost: %+v", lease, task, r)
		}
	}
	h := pooltest.NewHarness(t, db, func(c *pool.SchedulerConfig) { c.Now, c.Blobs = time.Now, blobs.Path })
	// The scheduler stops before the store closes: its last batch (the
	// trust records it holds back) commits then.
	t.Cleanup(func() { h.Stop(); db.Close() })
	before := h.Ledger() // verifies
	t.Logf("killed after %d acknowledged submissions; %d ledger entries, %d outcomes survived", len(acked), len(before), len(snap.Outcomes))

	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, crashPeers)
	for i := range crashPeers {
		id := h.Device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i))
		wg.Go(func() {
			if err := crashPeer(ctx, h.S, id, j.ID, func(pool.Lease) {}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	merger := pooltest.Device(t, pooltest.Key(t, "owner/alice"), "alice-1").ID
	outcomes := map[int64]int{}
	for after := int64(0); ; {
		vs, err := h.S.Results(ctx, merger, j.ID, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) == 0 {
			break
		}
		for _, v := range vs {
			if v.Status != pool.OutcomeOK {
				t.Errorf("task %d: %s", v.Task, v.Status)
			}
			outcomes[v.Task]++
		}
		after = vs[len(vs)-1].Seq
	}
	receipts := map[int64]int{}
	for _, e := range h.Ledger() {
		if e.Kind != pool.KindReceipt {
			t.Errorf("entry %d is a %s", e.Seq, e.Kind)
		}
		receipts[e.Task]++
	}
	for task := range int64(crashTasks) {
		if outcomes[task] != 1 || receipts[task] != 2 {
			t.Fatalf("task %d: %d outcomes and %d receipts, want 1 and 2", task, outcomes[task], receipts[task])
		}
	}
}

// crashChild is the coordinator that gets killed.
func crashChild(t *testing.T, dir string) {
	db, blobs, j := crashSetup(t, dir)
	h := pooltest.NewHarness(t, db, func(c *pool.SchedulerConfig) { c.Now, c.Blobs = time.Now, blobs.Path })
	alice := h.Device("alice", "alice-1")
	if _, err := h.S.AddJob(context.Background(), j, alice); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	ok := func(l pool.Lease) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "ok %s %d\n", l.ID, l.Task)
		w.Flush()
	}
	var wg sync.WaitGroup
	for i := range crashPeers {
		id := h.Device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i))
		wg.Go(func() {
			if err := crashPeer(context.Background(), h.S, id, j.ID, ok); err != nil && !errors.Is(err, pool.ErrStopped) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
