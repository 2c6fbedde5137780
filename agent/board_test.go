package agent_test

import (
	"context"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/store"
)

// closedURL returns the URL of a port on 127.0.0.1 that nothing listens
// on: a pool that cannot be reached.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	return url
}

// TestBoard reads the board of a real coordinator on 127.0.0.1 where a
// CPU job and a GPU job are listed, and of a pool nobody answers at: the
// CPU job matches this GPU-less machine and comes first, the GPU job says
// why not, and the unreachable pool has an error for people.
func TestBoard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	gpuJob := planJob(t, "gpu-squares", 6, "redundancy = 1\nquorum = 1\n[requirements]\ngpu = true\ngpu_memory_mib = 8000")
	cpuJob := planJob(t, "cpu-squares", 4, "redundancy = 2\nquorum = 2")
	if err := sub.c.Submit(ctx, gpuJob); err != nil {
		t.Fatal(err)
	}
	if err := sub.c.Submit(ctx, cpuJob); err != nil {
		t.Fatal(err)
	}

	dev := newDevice(t, nil)
	down := closedURL(t)
	m := idle.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUModel: "test CPU", LogicalCPUs: 4, MemoryTotalMiB: 8192, TimeZone: "UTC"}
	prefs, err := dev.local.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	boards := agent.Board(ctx, agent.BoardConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor",
		Pools:       []store.JoinedPool{{URL: co.url}, {URL: down, Name: "gone"}},
		Capacity:    idle.NewCapacity(m, idle.Defaults(), idle.Reading[[]idle.GPU]{Known: true}),
		Preferences: prefs, HTTP: httpClient(t),
	})
	if len(boards) != 2 {
		t.Fatalf("%d boards, want 2", len(boards))
	}

	b := boards[0]
	if b.Error != "" || b.URL != co.url || b.Name != "test" || b.Offer == nil {
		t.Fatalf("board of the live pool: error %q, URL %q, name %q, offer %v", b.Error, b.URL, b.Name, b.Offer)
	}
	if b.Offer.Peer != dev.key.ID() || b.Offer.Owner != dev.owner.ID() || b.Offer.Pool != "test" {
		t.Errorf("offer: peer %s owner %s pool %s", b.Offer.Peer, b.Offer.Owner, b.Offer.Pool)
	}
	if len(b.Jobs) != 2 {
		t.Fatalf("%d jobs on the board, want 2: %+v", len(b.Jobs), b.Jobs)
	}
	first, second := b.Jobs[0], b.Jobs[1]
	if first.Listing.Job != cpuJob.ID || !first.Match || len(first.Why) != 0 {
		t.Errorf("first job %s (match %v, why %q), want the CPU job, matching", first.Listing.Name, first.Match, first.Why)
	}
	if first.Listing.Quorum != 2 || first.Listing.TasksLeft != 4 || first.Listing.Owner != sub.dev.owner.ID() {
		t.Errorf("CPU job listing: quorum %d, %d tasks left, owner %s", first.Listing.Quorum, first.Listing.TasksLeft, first.Listing.Owner)
	}
	if second.Listing.Job != gpuJob.ID || second.Match || len(second.Why) == 0 || !strings.Contains(second.Why[0], "GPU") {
		t.Errorf("second job %s (match %v, why %q), want the GPU job, not matching for want of a GPU", second.Listing.Name, second.Match, second.Why)
	}

	// The device registered and pinned the pool's key as an agent does.
	if _, err := agent.PoolKey(ctx, agentClient(t, co.url, dev), dev.dirs.Config); err != nil {
		t.Errorf("the pinned key: %v", err)
	}

	d := boards[1]
	if d.URL != down || d.Offer != nil || len(d.Jobs) != 0 || !strings.HasPrefix(d.Error, "cannot reach the pool at "+down) {
		t.Errorf("board of the unreachable pool: error %q, offer %v, %d jobs", d.Error, d.Offer, len(d.Jobs))
	}
	if d.Name != "gone" {
		t.Errorf("unreachable pool's name %q, want the one the store knows", d.Name)
	}
}

// TestBoardRefusedJob: a job the donor refused in the pool is listed
// after the one it did not, with the refusal as its reason, and the
// invite token of the joined pool is used to register.
func TestBoardRefusedJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	big := planJob(t, "big", 9, "")
	small := planJob(t, "small", 2, "")
	for _, j := range []*job.Job{big, small} {
		if err := sub.c.Submit(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	dev := newDevice(t, nil)
	if err := dev.local.RefuseJob(ctx, co.url, big.ID); err != nil {
		t.Fatal(err)
	}
	prefs, err := dev.local.Preferences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := idle.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, LogicalCPUs: 2, MemoryTotalMiB: 4096, TimeZone: "UTC"}
	boards := agent.Board(ctx, agent.BoardConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor",
		Pools:       []store.JoinedPool{{URL: co.url}},
		Capacity:    idle.NewCapacity(m, idle.Defaults(), idle.Reading[[]idle.GPU]{Known: true}),
		Preferences: prefs, HTTP: httpClient(t),
	})
	if len(boards) != 1 || boards[0].Error != "" {
		t.Fatalf("boards %+v", boards)
	}
	var names []string
	for _, j := range boards[0].Jobs {
		names = append(names, j.Listing.Name)
	}
	if diff := cmp.Diff([]string{"small", "big"}, names); diff != "" {
		t.Fatalf("jobs (-want +got):\n%s", diff)
	}
	refused := boards[0].Jobs[1]
	if refused.Match || len(refused.Why) == 0 || !strings.Contains(refused.Why[0], "refused") {
		t.Errorf("refused job: match %v, why %q", refused.Match, refused.Why)
	}
	if !slices.Contains(boards[0].Offer.Accept.RefuseJobs, big.ID) {
		t.Errorf("offer accepts %+v, want the big job refused", boards[0].Offer.Accept)
	}
}
