package coord

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/cluster"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// placedRouter serves over shards a ShardRouter that places jobs with p,
// the shards for which up is false having no node in charge (nil: all
// have one).
func placedRouter(t *testing.T, shards []*testServer, p JobPlacements, up func(int) bool) *routerClient {
	t.Helper()
	rc, _ := placedRouterAnd(t, shards, p, up)
	return rc
}

// placedRouterAnd is placedRouter, returning the router too.
func placedRouterAnd(t *testing.T, shards []*testServer, p JobPlacements, up func(int) bool) (*routerClient, *ShardRouter) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: len(shards), Key: poolKeyOf(t, shards), Transport: tr, Placements: p,
		Target: func(s int) (string, bool) { return shards[s].URL(), up == nil || up(s) }})
	if err != nil {
		t.Fatal(err)
	}
	// However slow this machine, a shard's word on its tasks holds for
	// the test (TestPlaceJobForgetsAStaleWord tries placeStale itself).
	rt.placeStale = time.Hour
	hs := httptest.NewServer(rt)
	t.Cleanup(hs.Close)
	return &routerClient{url: hs.URL, client: hs.Client()}, rt
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
// is, and that router passes the job's requests to its shard; one job
// submitted through both routers at once is added in one shard. A
// request not signed by a device the pool knows records nothing, nor
// does a job its shard refuses as malformed; a shard with no node in
// charge takes no new job while another has one.
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

	// One job through both routers at once, four times each.
	twice := testJob(t, "twice", 4)
	d := job.Digest(sha256.Sum256(programBytes(t, twice)))
	if ans := a.do(t, alice, "PUT", "/v1/blobs/"+d.String(), programBytes(t, twice), ""); ans.status != http.StatusCreated && ans.status != http.StatusOK {
		t.Fatalf("upload: %d %s", ans.status, ans.body)
	}
	var wg sync.WaitGroup
	status := make([]int, 8)
	for i := range status {
		rc := a
		if i%2 == 1 {
			rc = b
		}
		wg.Go(func() {
			status[i] = rc.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: twice.Canonical}, "").status
		})
	}
	wg.Wait()
	if on := onShards(shards, twice.ID); len(on) != 1 {
		t.Errorf("one job submitted 8 times at once through two routers: on shards %v (answers %v), want one", on, status)
	}

	// A manifest no shard can plan: refused, and its record forgotten.
	broken := []byte(`{"name":"broken"}`)
	if ans := a.do(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: broken}, ""); ans.status != http.StatusBadRequest || answerCode(ans.body) != "bad_job" {
		t.Errorf("a job that does not plan: %d %s; want 400 bad_job", ans.status, ans.body)
	}
	if s, ok, err := placements().Shard(ctx, job.ID(sha256.Sum256(broken))); ok || err != nil {
		t.Errorf("a job its shard refused is still placed in shard %d (%v)", s, err)
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

// Jobs placed at once through one router, before any shard says how
// many tasks it has, go round the shards: each choice counts one task
// on its shard until the shard's answer says more.
func TestPlaceJobSpreadsABurst(t *testing.T) {
	const k = 3
	shards := startShards(t, k)
	_, rt := placedRouterAnd(t, shards, nil, nil)
	count := make([]int, k)
	for i := range 2 * k {
		count[rt.placeJob(testJob(t, fmt.Sprintf("burst-%d", i), 4).ID)]++
	}
	if !slices.Equal(count, []int{2, 2, 2}) {
		t.Errorf("six jobs placed before any answer: %v on shards 0 to 2, want two on each", count)
	}
}

// countingPlacements counts the reads a router asks of its placements.
type countingPlacements struct {
	JobPlacements
	reads atomic.Int64
}

func (c *countingPlacements) Shard(ctx context.Context, id job.ID) (int, bool, error) {
	c.reads.Add(1)
	return c.JobPlacements.Shard(ctx, id)
}

// A work request of a device the pool does not know, naming 64 jobs in
// its transfer reports, is refused before the router reads any job's
// placement; a known device's is answered, each job's placement read
// once and then remembered.
func TestShardRouterReadsPlacementsForKnownDevices(t *testing.T) {
	const k = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startOneNode(ctx, t)
	p, err := cluster.OpenPlacements(ctx, node.JetStream(), k, 1)
	if err != nil {
		t.Fatal(err)
	}
	cp := &countingPlacements{JobPlacements: p}
	shards := startShards(t, k)
	rc, rt := placedRouterAnd(t, shards, cp, nil)
	rt.absentFor = time.Hour // however slow the machine, the second request comes within it
	alice, stranger := newPeer(t, nil), newPeer(t, nil)
	rc.register(t, alice)
	var req WorkRequest
	for i := range MaxWorkTransfers {
		req.Transfers = append(req.Transfers, TransferReport{Job: HexDigest{byte(i), 1}, Transfer: pool.Transfer{Direct: 1}})
	}
	if a := rc.do(t, stranger, "POST", "/v1/work", req, ""); a.status != http.StatusUnauthorized {
		t.Errorf("a stranger's work request: %d %s; want 401", a.status, a.body)
	}
	if n := cp.reads.Load(); n != 0 {
		t.Errorf("a stranger's work request cost %d reads of placements, want none", n)
	}
	for range 2 {
		rc.work(t, alice, req, "")
	}
	if n := cp.reads.Load(); n != MaxWorkTransfers {
		t.Errorf("two work requests naming %d jobs cost %d reads of placements, want %d", MaxWorkTransfers, n, MaxWorkTransfers)
	}
}

// A shard's word on its waiting tasks counts for placeStale: a shard
// that said it had 5,000 a minute ago, and nothing since to this
// router, counts none, and takes the next job over two that said 10
// just now; until then it takes none.
func TestPlaceJobForgetsAStaleWord(t *testing.T) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 23, 59, 30, 0, time.UTC)
	rt, err := NewShardRouter(ShardRouterConfig{Shards: 3, Key: key, Now: func() time.Time { return now },
		Target: func(int) (string, bool) { return "http://127.0.0.1:9", true }})
	if err != nil {
		t.Fatal(err)
	}
	said := func(s int, n int64) {
		rt.noteQueued(s, http.Header{QueuedHeader: {strconv.FormatInt(n, 10)}})
	}
	said(0, 5000)
	for i := range 4 {
		now = now.Add(placeStale / 4)
		said(1, 10)
		said(2, 10)
		j := testJob(t, fmt.Sprintf("stale-%d", i), 4)
		s := rt.placeJob(j.ID)
		if fresh := i < 3; fresh && s == 0 || !fresh && s != 0 {
			t.Errorf("%v after shard 0 said 5000 and shards 1 and 2 said 10: job placed in shard %d", placeStale/4*time.Duration(i+1), s)
		}
	}
}
