package cluster

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// summarised returns the Upto of each outcome summary in s's memory
// and how many of the outcomes it holds are acknowledged.
func summarised(t *testing.T, s *Store) (uptos []int64, acked int) {
	t.Helper()
	s.mu.Lock()
	mem := s.mem
	s.mu.Unlock()
	snap, err := mem.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	marks := map[[32]byte]int64{}
	for _, j := range snap.Jobs {
		marks[j.ID] = j.Acked
	}
	for _, sum := range snap.Summaries {
		uptos = append(uptos, sum.Upto)
	}
	for _, o := range snap.Outcomes {
		if o.Seq <= marks[o.Job] {
			acked++
		}
	}
	return uptos, acked
}

// A scheduler moved to a fresh store after each snapshot, while its
// job's merger acknowledges outcomes, reports the same status and
// leases and decides no decided task again; each snapshot carries
// summaries in place of the acknowledged outcomes, which leave the
// memory of the node that wrote it, of the fresh node that loads it and
// of a node that follows the stream.
func TestClusterAckedRestartSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	follower := openStore(t, node, 1)
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	follower.Release()
	h := pooltest.NewHarness(t, openStore(t, node, 1), nil)
	var got [][]int64
	h.Reopen = func(old pool.Store) pool.Store {
		o := old.(*Store)
		follow := func() {
			follower.mu.Lock()
			err := follower.catchUp(ctx)
			follower.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
		}
		follow() // before the snapshot: it goes on from its own state
		loads := follower.loads
		if _, err := o.WriteSnapshot(ctx); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if _, acked := summarised(t, o); acked != 0 {
			t.Errorf("the node that wrote the snapshot holds %d acknowledged outcomes", acked)
		}
		follow()
		if follower.loads != loads {
			t.Errorf("the following node loaded the snapshot")
		}
		if _, acked := summarised(t, follower); acked != 0 {
			t.Errorf("a following node holds %d acknowledged outcomes after the snapshot", acked)
		}
		fresh := openStore(t, node, 1)
		if _, err := fresh.Load(ctx); err != nil || fresh.loads != 1 {
			t.Fatalf("a fresh store loaded %d snapshots: %v", fresh.loads, err)
		}
		uptos, acked := summarised(t, fresh)
		if acked != 0 {
			t.Errorf("the snapshot holds %d acknowledged outcomes", acked)
		}
		got = append(got, uptos)
		fresh.Release()
		return fresh
	}
	pooltest.RunAckedRestart(h)
	if diff := cmp.Diff([][]int64{{4}, {8}}, got); diff != "" {
		t.Errorf("outcomes summarised in each snapshot (-want +got):\n%s", diff)
	}
}

// A snapshot written before outcome summaries (format v3: every
// outcome) still loads, and a scheduler on it goes on; the next
// snapshot summarises the acknowledged outcomes.
func TestStoreLoadsSnapshotV3Outcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	h := pooltest.NewHarness(t, openStore(t, node, 1), nil)
	var got [][]int64
	reopens := 0
	h.Reopen = func(old pool.Store) pool.Store {
		o := old.(*Store)
		reopens++
		if reopens == 1 {
			// As v3 wrote it: every replica and outcome (nothing
			// archived, nothing summarised).
			o.mu.Lock()
			seq, img := o.applied.Load(), o.mem.Image()
			o.mu.Unlock()
			if len(img.Summaries) != 0 {
				t.Fatalf("the store summarised before any snapshot: %+v", img.Summaries)
			}
			if err := o.snaps.writeFormat(ctx, seq, img, snapFormatV3); err != nil {
				t.Fatal(err)
			}
		} else if _, err := o.WriteSnapshot(ctx); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		fresh := openStore(t, node, 1)
		if _, err := fresh.Load(ctx); err != nil || fresh.loads != 1 {
			t.Fatalf("a fresh store loaded %d snapshots: %v", fresh.loads, err)
		}
		uptos, acked := summarised(t, fresh)
		got = append(got, append(uptos, int64(acked)))
		fresh.Release()
		return fresh
	}
	pooltest.RunAckedRestart(h)
	// The v3 snapshot: no summary, 4 acknowledged outcomes; the next:
	// a summary of 8, none.
	if diff := cmp.Diff([][]int64{{4}, {8, 0}}, got); diff != "" {
		t.Errorf("summaries and acknowledged outcomes after each load (-want +got):\n%s", diff)
	}
}
