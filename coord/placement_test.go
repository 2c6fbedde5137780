package coord

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"idlepool/cluster"
	"idlepool/job"
)

// placedRouter serves over shards a ShardRouter that places jobs with p,
// the shards for which up is false having no node in charge (nil: all
// have one).
func placedRouter(t *testing.T, shards []*testServer, p JobPlacements, up func(int) bool) *routerClient {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: len(shards), Key: poolKeyOf(t, shards), Transport: tr, Placements: p,
		Target: func(s int) (string, bool) { return shards[s].URL(), up == nil || up(s) }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	return &routerClient{url: hs.URL, client: hs.Client()}
}

// onShards returns the shards of shards that hold job id.
func onShards(shards []*testServer, id job.ID) []int {
	var out []int
	for s, sh := range shards {
		if _, err := sh.sched.Status(id); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// A divided pool that places jobs by load, its placements in JetStream
// (cluster.Placements on a one-node cluster) and two nodes' routers over
// three shard coordinators: six jobs of equal size whose IDs all fall
// on one shard (which placement by hash would give all six) go two to
// each shard, each in the shard recorded for it and in no other; the
// job submitted again through the other node's router stays where it
// is, and that router passes the job's requests to its shard. A request
// not signed by a device the pool knows records nothing; a shard with
// no node in charge takes no new job while another has one.
func TestShardRouterPlacesJobsByLoad(t *testing.T) {
	const k = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startOneNode(ctx, t)
	placements := func() *cluster.Placements {
		p, err := cluster.OpenPlacements(ctx, node.JetStream(), k, 1)
		if err != nil {
			t.Fatalf("OpenPlacements: %v", err)
		}
		return p
	}
	pa, pb := placements(), placements()
	shards := startShards(t, k)
	a, b := placedRouter(t, shards, pa, nil), placedRouter(t, shards, pb, nil)
	alice, bob := newPeer(t, nil), newPeer(t, nil)
	a.register(t, alice)

	var jobs []*job.Job
	for i := 0; len(jobs) < 2*k; i++ {
		if j := testJob(t, fmt.Sprintf("placed-%d", i), 4); cluster.ShardOf(j.ID, k) == 1 {
			jobs = append(jobs, j)
		}
	}
	count := make([]int, k)
	for _, j := range jobs {
		a.submit(t, alice, j)
		on := onShards(shards, j.ID)
		s, ok, err := pb.Shard(ctx, j.ID)
		if err != nil || !ok || !slices.Equal(on, []int{s}) {
			t.Fatalf("job %s: on shards %v, recorded %d (%v, %v); want on the recorded one only", j.Manifest.Name, on, s, ok, err)
		}
		count[s]++
	}
	if !slices.Equal(count, []int{2, 2, 2}) {
		t.Errorf("six jobs of 4 tasks each, all of shard 1 by hash: %v on shards 0 to 2, want two on each", count)
	}

	j := jobs[0]
	s, _, _ := pa.Shard(ctx, j.ID)
	if ans := b.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}, ""); ans.status != http.StatusOK {
		t.Errorf("the job submitted again through the other router: %d %s; want 200, the job as it is", ans.status, ans.body)
	}
	if on := onShards(shards, j.ID); !slices.Equal(on, []int{s}) {
		t.Errorf("the job submitted again: on shards %v, want %d only", on, s)
	}
	for _, j := range jobs {
		if ans := b.do(t, alice, "GET", "/v1/jobs/"+j.ID.String(), nil, ""); ans.status != http.StatusOK {
			t.Errorf("status of %s through the other router: %d %s", j.Manifest.Name, ans.status, ans.body)
		}
	}

	// Bob never registered: his job is refused, and placed nowhere.
	stray := testJob(t, "stray", 4)
	if ans := a.do(t, bob, "POST", "/v1/jobs", JobRequest{Canonical: stray.Canonical}, ""); ans.status != http.StatusUnauthorized {
		t.Errorf("a job of a device the pool does not know: %d %s; want 401", ans.status, ans.body)
	}
	if s, ok, err := pb.Shard(ctx, stray.ID); ok || err != nil {
		t.Errorf("a refused job was placed in shard %d (%v)", s, err)
	}

	// With shard 2 leaderless, two more jobs go to shards 0 and 1.
	c := placedRouter(t, shards, placements(), func(s int) bool { return s != 2 })
	for i := range 2 {
		j := testJob(t, fmt.Sprintf("shard-2-down-%d", i), 4)
		c.submit(t, alice, j)
		if on := onShards(shards, j.ID); len(on) != 1 || on[0] == 2 {
			t.Errorf("a job placed while shard 2 has no node in charge: on shards %v", on)
		}
	}
}
