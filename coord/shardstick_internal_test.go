package coord

import "testing"

// A device's leases come from one shard for stickFor requests in a row,
// then from the next in turn, so that over a window every shard with
// work gets its share of the device; a shard with no work left is left
// at once; devices are followed apart, and one not known ("") goes by
// the turn alone.
func TestShardStick(t *testing.T) {
	var st shardStick
	work := map[int]bool{0: true, 1: true}
	may := func(s int) bool { return work[s] }
	turn := 0
	next := func() []int { turn++; return []int{turn % 2, (turn + 1) % 2} }
	count := map[int]int{}
	var seq []int
	for range 4 * stickFor {
		s := st.choose("alice", next(), may)
		count[s]++
		seq = append(seq, s)
	}
	if count[0] != 2*stickFor || count[1] != 2*stickFor {
		t.Errorf("alice's leases by shard: %v over %d requests, want %d each", count, 4*stickFor, 2*stickFor)
	}
	for i := 1; i < len(seq); i++ {
		if (seq[i] != seq[i-1]) != (i%stickFor == 0) {
			t.Fatalf("alice's shards %v: a change at request %d, want one every %d", seq, i, stickFor)
		}
	}
	// Bob starts where the turn is, whatever alice's shard.
	if got, want := st.choose("bob", []int{1, 0}, may), 1; got != want {
		t.Errorf("bob's first shard %d, want %d", got, want)
	}
	// Alice's shard runs dry: she moves on at once.
	cur := st.m["alice"].shard
	work[cur] = false
	if got := st.choose("alice", []int{cur, 1 - cur}, may); got != cur {
		t.Logf("alice left shard %d for %d", cur, got)
	}
	if got := st.choose("alice", []int{1 - cur, cur}, may); got != 1-cur {
		t.Errorf("alice kept to shard %d, which has no work", got)
	}
	if got := st.choose("", []int{1, 0}, may); got != 1 {
		t.Errorf("an unknown device got shard %d, want the turn's 1", got)
	}
}
