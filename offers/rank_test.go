package offers

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
)

func TestRankPeers(t *testing.T) {
	mk := func(peer string, memMiB int64, cores int, gpuMiB ...int64) Offer {
		o := Offer{Peer: peer, Capacity: idle.Capacity{MemoryMiB: memMiB, Cores: cores}}
		for _, g := range gpuMiB {
			o.Capacity.GPUs = append(o.Capacity.GPUs, idle.GPUOffer{MemoryMiB: g})
		}
		return o
	}
	offers := []Offer{mk("idc", 4096, 16), mk("ida", 8192, 4, 4096, 24576), mk("idb", 8192, 8, 8192), mk("idd", 2048, 2)}
	tests := []struct {
		prefer string
		want   []string
	}{
		{"", []string{"ida", "idb", "idc", "idd"}},
		{"memory", []string{"ida", "idb", "idc", "idd"}},
		{"cores", []string{"idc", "idb", "ida", "idd"}},
		{"gpu_memory", []string{"ida", "idb", "idc", "idd"}},
	}
	for _, tc := range tests {
		t.Run("prefer="+tc.prefer, func(t *testing.T) {
			l := Listing{Requirements: job.Requirements{Prefer: tc.prefer}}
			var got []string
			for _, o := range RankPeers(l, offers) {
				got = append(got, o.Peer)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
	if offers[0].Peer != "idc" {
		t.Error("RankPeers reordered its argument")
	}
}

func TestRankJobs(t *testing.T) {
	ls := []Listing{
		{Job: job.ID{1}, Name: "small", Owner: "idx", TasksLeft: 5},
		{Job: job.ID{2}, Name: "big", Owner: "idx", TasksLeft: 500},
		{Job: job.ID{3}, Name: "friend", Owner: "idfriend", TasksLeft: 1},
		{Job: job.ID{4}, Name: "chosen", Owner: "idrefused", TasksLeft: 1},
		{Job: job.ID{5}, Name: "refused owner", Owner: "idrefused", TasksLeft: 900},
		{Job: job.ID{6}, Name: "refused job", Owner: "idx", TasksLeft: 900},
		{Job: job.ID{7}, Name: "small, dearer", Owner: "idx", TasksLeft: 5, CostPerTask: 3},
		{Job: job.ID{8}, Name: "small twin", Owner: "idx", TasksLeft: 5},
	}
	o := Offer{Accept: Accept{AcceptJobs: []job.ID{{4}}, PreferOwners: []string{"idfriend"},
		RefuseOwners: []string{"idrefused"}, RefuseJobs: []job.ID{{6}}}}
	var got []string
	for _, l := range RankJobs(o, ls) {
		got = append(got, l.Name)
	}
	want := []string{"chosen", "friend", "big", "small, dearer", "small", "small twin", "refused owner", "refused job"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// PreferJobs keeps the pool's order (fair share) within each of the
// donor's groups: more tasks left is no reason to go first.
func TestPreferJobs(t *testing.T) {
	ls := []Listing{
		{Job: job.ID{1}, Name: "small", Owner: "idx", TasksLeft: 5},
		{Job: job.ID{2}, Name: "huge", Owner: "idy", TasksLeft: 1 << 32},
		{Job: job.ID{3}, Name: "friend", Owner: "idfriend", TasksLeft: 1},
		{Job: job.ID{4}, Name: "refused", Owner: "idrefused", TasksLeft: 900},
		{Job: job.ID{5}, Name: "chosen", Owner: "idrefused", TasksLeft: 1},
	}
	o := Offer{Accept: Accept{AcceptJobs: []job.ID{{5}}, PreferOwners: []string{"idfriend"}, RefuseOwners: []string{"idrefused"}}}
	var got []string
	for _, l := range PreferJobs(o, ls) {
		got = append(got, l.Name)
	}
	want := []string{"chosen", "friend", "small", "huge", "refused"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
