package offers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/job"
)

func TestPreferencesAccept(t *testing.T) {
	p := Preferences{
		Global: PoolPreferences{Weight: 1, MaxMemoryMiB: 4096, RefuseOwners: []string{"idbad", "idmeh"}, AcceptJobs: []job.ID{jobC}},
		Pools: []PoolPreferences{
			{URL: "http://a", Weight: 3, GPUPrograms: true, MaxMemoryMiB: 2048, MaxTaskTime: time.Hour,
				AcceptOwners: []string{"idmeh", "idfriend"}, RefuseJobs: []job.ID{jobC, jobA}},
			{URL: "http://b", Weight: 1},
		},
	}
	tests := []struct {
		url  string
		want Accept
	}{
		{"http://a", Accept{GPUPrograms: true, MaxMemoryMiB: 2048, MaxTaskTime: time.Hour,
			PreferOwners: []string{"idfriend", "idmeh"}, RefuseOwners: []string{"idbad"},
			RefuseJobs: []job.ID{jobA, jobC}, Weight: 0.75}},
		{"http://b", Accept{MaxMemoryMiB: 4096, RefuseOwners: []string{"idbad", "idmeh"}, AcceptJobs: []job.ID{jobC}, Weight: 0.25}},
		{"http://new", Accept{MaxMemoryMiB: 4096, RefuseOwners: []string{"idbad", "idmeh"}, AcceptJobs: []job.ID{jobC}, Weight: 0.2}},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, p.Accept(tc.url)); diff != "" {
				t.Errorf("Accept (-want +got):\n%s", diff)
			}
		})
	}
	if got := (Preferences{}).Accept("http://only").Weight; got != 1 {
		t.Errorf("the only pool's weight = %v, want 1", got)
	}
}

func TestBuild(t *testing.T) {
	now := monday
	o := Build(Spec{Pool: "lab", PoolURL: "http://a", Peer: "idp", Owner: "ido",
		Capacity: idle.Capacity{Cores: 3, MemoryMiB: 1024}, State: idle.StateWaiting, Hold: idle.HoldOwner,
		Preferences: Preferences{Pools: []PoolPreferences{{URL: "http://a", Weight: 1, GPUPrograms: true}}}, Issued: now})
	want := Offer{Peer: "idp", Owner: "ido", Pool: "lab",
		Capacity: idle.Capacity{Cores: 3, MemoryMiB: 1024, GPUs: []idle.GPUOffer{}, Schedule: idle.Schedule{}},
		State:    idle.StateWaiting, Hold: idle.HoldOwner, Accept: Accept{GPUPrograms: true, Weight: 1},
		Issued: now, Expires: now.Add(DefaultTTL)}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("Build (-want +got):\n%s", diff)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("built offer does not validate: %v", err)
	}
}
