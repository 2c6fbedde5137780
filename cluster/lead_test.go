package cluster

import (
	"slices"
	"testing"
	"time"
)

// leaders returns the server names leading the streams of s's shard, in
// Shard.Streams' order ("" for one that could not be read).
func leaders(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for _, name := range s.shard.Streams() {
		st, err := s.js.Stream(t.Context(), name)
		if err != nil || st.CachedInfo().Cluster == nil {
			out = append(out, "")
			continue
		}
		out = append(out, st.CachedInfo().Cluster.Leader)
	}
	return out
}

// The streams of a shard (its state stream, snapshots, replica and ledger
// archives, lease bucket) come to be led by the node that asks for them, one node after
// another; asking again leaves them there, and a name that holds no
// replica moves nothing. Another shard's streams stay where they were.
func TestLeadStreams(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	sh1, sh0 := Shard{Index: 1, Count: 2}, Shard{Index: 0, Count: 2}
	stores := make([]*Store, 3)
	for i, n := range nodes {
		stores[i] = openShardStore(t, n, 3, sh1)
	}
	other := openShardStore(t, nodes[0], 3, sh0)
	newLeadership(t, nodes[0], 3, 5*time.Second, ShardLeases, 2)
	patience(t, 2*time.Minute, "every stream to have a leader", func() bool {
		for _, s := range []*Store{stores[0], other} {
			for _, l := range leaders(t, s) {
				if l == "" {
					return false
				}
			}
		}
		return true
	})
	before := leaders(t, other)
	// lead asks s to lead its streams for name until an answer comes
	// whole (each look at a stream waits 200 ms at most, which a loaded
	// machine may pass: patience, not a verdict on speed), and returns
	// the last.
	type result struct{ led, of, all int }
	lead := func(s *Store, name string, want result) (result, error) {
		var got result
		var err error
		patience(t, 2*time.Minute, name+" to lead its streams", func() bool {
			got.led, got.of, got.all, err = s.LeadStreams(t.Context(), name, 30*time.Second)
			return err == nil && got == want
		})
		return got, err
	}
	for i, s := range stores {
		name := nodes[i].Config().Name
		lead(s, name, result{5, 5, 5})
		for j, l := range leaders(t, s) {
			if l != name {
				t.Errorf("%s: %s is led by %q", name, sh1.Streams()[j], l)
			}
		}
		// Asking again moves nothing and says all are led.
		lead(s, name, result{5, 5, 5})
	}
	lead(stores[0], "node9", result{0, 0, 5})
	for j, l := range leaders(t, stores[0]) {
		if l != "node3" {
			t.Errorf("after asking for node9: %s is led by %q, want node3 still", sh1.Streams()[j], l)
		}
	}
	if got := leaders(t, other); !slices.Equal(got, before) {
		t.Errorf("shard 0's streams moved: led by %v, were %v", got, before)
	}
}

// A node of a one-node cluster leads every stream it has.
func TestLeadStreamsOneNode(t *testing.T) {
	t.Parallel()
	node, s := oneNodeStore(t)
	if led, of, _, err := s.LeadStreams(t.Context(), node.Config().Name, time.Second); err != nil || led != of {
		t.Errorf("%d of %d led, %v; want all, nil", led, of, err)
	}
}
