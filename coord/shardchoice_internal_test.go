package coord

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"idlepool/identity"
)

// choiceRouter is a router over three shards whose clock is at and
// whose node runs shard here, with queued tasks as given.
func choiceRouter(t *testing.T, at *time.Time, here int, queued ...int64) *ShardRouter {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewShardRouter(ShardRouterConfig{Shards: 3, Key: key,
		Target: func(int) (string, bool) { return "", false },
		Now:    func() time.Time { return *at },
		Here:   func(s int) bool { return s == here },
		Public: func(s int) string { return fmt.Sprintf("http://node-of-shard-%d:7420", s) }})
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range queued {
		rt.queued[s].Store(n)
	}
	return rt
}

// A device's leases come from one shard through a window, the same shard
// whichever node it asks (every router chooses alike), and over many
// windows from every shard in about equal share; a preferred shard with
// no work gives way to this node's shard with work, then to the first of
// the order with work; a device not known goes by the order alone; and
// the node named is the chosen shard's.
func TestShardChoice(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	a, b := choiceRouter(t, &at, 0, 5, 5, 5), choiceRouter(t, &at, 2, 5, 5, 5)
	count := map[int]int{}
	const windows = 600
	for range windows {
		first := a.leaseShard("alice", []int{0, 1, 2})
		for _, rt := range []*ShardRouter{a, b} {
			for range 3 {
				if got := rt.leaseShard("alice", []int{2, 1, 0}); got != first {
					t.Fatalf("at %s alice's shard is %d on one node and %d on another, or moved within the window", at, first, got)
				}
			}
		}
		count[first]++
		at = at.Add(stickWindow)
	}
	for s := range 3 {
		if n := count[s]; n < windows/3*7/10 || n > windows/3*13/10 {
			t.Errorf("alice's shards over %d windows: %v, want about %d each", windows, count, windows/3)
		}
	}

	// Alice's preferred shard now, and a router where it has no work.
	p := a.preferred("alice")
	queued := []int64{5, 5, 5}
	queued[p] = 0
	other := (p + 1) % 3
	dry := choiceRouter(t, &at, other, queued...)
	if got := dry.leaseShard("alice", []int{p, (p + 2) % 3, other}); got != other {
		t.Errorf("alice's shard %d has no work: got shard %d, want this node's %d", p, got, other)
	}
	queued[other] = 0
	dryHere := choiceRouter(t, &at, other, queued...)
	last := (p + 2) % 3
	if got := dryHere.leaseShard("alice", []int{p, other, last}); got != last {
		t.Errorf("neither alice's shard nor this node's has work: got shard %d, want %d", got, last)
	}
	if got := a.leaseShard("", []int{2, 0, 1}); got != 2 {
		t.Errorf("an unknown device got shard %d, want the order's first, 2", got)
	}

	w := httptest.NewRecorder()
	a.nameNode(w, 1)
	if got := w.Header().Get(InChargeHeader); got != "http://node-of-shard-1:7420" {
		t.Errorf("node named for shard 1: %q", got)
	}
}
