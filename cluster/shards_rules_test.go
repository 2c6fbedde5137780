package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
)

// A pool's shard count is fixed by its first node: a node with the same
// count starts, one with another is refused with both counts named, and
// a count out of range is refused before anything is stored.
func TestClaimShards(t *testing.T) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := OpenRules(ctx, node.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ClaimShards(ctx, 0); !errors.Is(err, ErrShard) {
		t.Fatalf("ClaimShards(0) = %v, want ErrShard", err)
	}
	if err := r.ClaimShards(ctx, 4); err != nil {
		t.Fatalf("first ClaimShards(4): %v", err)
	}
	if err := r.ClaimShards(ctx, 4); err != nil {
		t.Fatalf("second ClaimShards(4): %v", err)
	}
	err = r.ClaimShards(ctx, 3)
	if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), "shard count is 3") || !strings.Contains(err.Error(), "started with 4") {
		t.Fatalf("ClaimShards(3) after 4 = %v, want ErrShards naming both counts", err)
	}
}

// A pool that ran undivided (its state stream holds a batch) is not
// divided later: its jobs are all in shard 0's stream, whatever their
// shard among K. A first count of 1 is recorded as for a new pool.
func TestClaimShardsAfterUndividedState(t *testing.T) {
	node, w := oneNodeStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Commit(ctx, &pool.Batch{Jobs: []pool.JobRecord{{ID: job.ID{1}, Canonical: []byte("{}"), Owner: "o", Order: 1, Added: time.Unix(1, 0)}}}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRules(ctx, node.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	err = r.ClaimShards(ctx, 2)
	if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), "ran undivided") {
		t.Fatalf("ClaimShards(2) over an undivided pool's state = %v, want ErrShards", err)
	}
	if err := r.ClaimShards(ctx, 1); err != nil {
		t.Fatalf("ClaimShards(1) over an undivided pool's state: %v", err)
	}
}
