package coord

import (
	"testing"
	"time"

	"idlepool/cluster"
)

// The shards' leases as a read gave them are kept unless a read that
// began later gave some already: watch's slow read must not undo a
// refresh that saw a hand-over. A miss wakes the refresh without
// blocking, however many come.
func TestSetLeadersKeepsTheLaterRead(t *testing.T) {
	f := &front{}
	f.stale = make(chan struct{}, 1)
	t0 := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	old := map[int]cluster.LeaderInfo{1: {Node: "node1"}}
	moved := map[int]cluster.LeaderInfo{1: {Node: "node3"}}
	f.setLeaders(moved, t0.Add(time.Second))
	f.setLeaders(old, t0) // began before: stale
	if got := f.leaders[1].Node; got != "node3" {
		t.Fatalf("shard 1 led by %q after an older read, want node3", got)
	}
	f.setLeaders(old, t0.Add(2*time.Second))
	if got := f.leaders[1].Node; got != "node1" {
		t.Fatalf("shard 1 led by %q after a newer read, want node1", got)
	}
	for range 3 {
		f.missedShard(1)
	}
	select {
	case <-f.stale:
	default:
		t.Fatal("no refresh woken by a miss")
	}
}
