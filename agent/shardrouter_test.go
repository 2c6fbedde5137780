package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/cluster"
	"idlepool/coord"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// dirMirror is a coord.BlobMirror in a directory, shared by the shard
// coordinators of one machine as a cluster's object store is by its nodes.
type dirMirror struct{ dir string }

func (m dirMirror) Put(_ context.Context, d job.Digest, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tmp := filepath.Join(m.dir, ".put-"+d.String())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(m.dir, d.String()))
}

func (m dirMirror) List(context.Context) ([]job.Digest, error) {
	es, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, err
	}
	var out []job.Digest
	for _, e := range es {
		if d, err := job.ParseDigest(e.Name()); err == nil {
			out = append(out, d)
		}
	}
	return out, nil
}

func (m dirMirror) Open(_ context.Context, d job.Digest) (io.ReadCloser, error) {
	return os.Open(filepath.Join(m.dir, d.String()))
}

var _ coord.BlobMirror = dirMirror{}

// localCalls counts the requests startShardedPool's router handed its
// shard 0 in process.
var localCalls atomic.Int64

// startShardedPool starts k coordinators, shards 0 to k-1 of one pool
// (each its own data directory and SQLite store, all the same pool key,
// one mirror of files), and a coord.ShardRouter over them on 127.0.0.1.
// It returns the router's URL, the pool's public key and the shards.
func startShardedPool(t *testing.T, k int) (string, []byte, []*coord.Server) {
	t.Helper()
	return startShardedPoolWith(t, k, nil)
}

// startShardedPoolWith is startShardedPool whose router finds no node in
// charge of shard s (and answers 503 no_leader for it) while up(s) is
// false; nil: every shard is up.
func startShardedPoolWith(t *testing.T, k int, up func(s int) bool) (string, []byte, []*coord.Server) {
	t.Helper()
	keyPath := filepath.Join(t.TempDir(), "pool.key")
	key, err := identity.LoadOrCreate(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	keyBytes, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	mirror := dirMirror{t.TempDir()}
	var shards []*coord.Server
	for s := range k {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "coordinator.key"), keyBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: dir, Pool: "test", Shard: s, Shards: k,
			Cluster: &coord.ClusterHooks{Blobs: mirror}, Logger: quietLogger(t).With("side", "coordinator", "shard", s)})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("shard %d: %v", s, err)
				}
			case <-time.After(patience(t)):
				t.Errorf("shard %d did not stop", s)
			}
		})
		shards = append(shards, srv)
	}
	tr := &http.Transport{}
	// Shard 0 runs "here", as a node's own shard does: the router hands
	// it its requests in process.
	rt, err := coord.NewShardRouter(coord.ShardRouterConfig{Shards: k, Key: key, Transport: tr,
		Target: func(s int) (string, bool) {
			if up != nil && !up(s) {
				return "", false
			}
			return shards[s].URL(), true
		}, Logger: quietLogger(t).With("side", "router"),
		Local: func(s int, w http.ResponseWriter, r *http.Request) bool {
			if s != 0 || !shards[0].ServeDirect(w, r) {
				return false
			}
			localCalls.Add(1)
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rt)
	// Cleanups run last first: the router closes before the shards stop.
	t.Cleanup(func() { hs.Close(); tr.CloseIdleConnections() })
	return hs.URL, key.Public(), shards
}

// spreadJobsMatchSolo runs jobs of empty tasks named name-0, name-1, ...
// on the divided pool of k shards at url until at least three of them
// sit on at least two shards: three agents of two slots each
// compute them, a submitter submits and follows them all at once, and
// each must end with the result it has solo. It returns the jobs, the
// shards they sit on, the agents' devices and the submitter.
func spreadJobsMatchSolo(t *testing.T, url string, k int, name string) ([]*job.Job, map[int]bool, []*device, *submitter) {
	t.Helper()
	exec := &fakeExec{Delay: time.Millisecond}
	var jobs []*job.Job
	onShard := map[int]bool{}
	for i := 0; len(jobs) < 3 || len(onShard) < 2; i++ {
		j := planJob(t, fmt.Sprintf("%s-%d", name, i), 12, "")
		onShard[cluster.ShardOf(j.ID, k)] = true
		jobs = append(jobs, j)
	}
	var devs []*device
	for range 3 {
		dev := newDevice(t, nil)
		devs = append(devs, dev)
		startAgent(t, url, dev, exec, 2, nil)
	}
	sub := newSubmitter(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	got := make([]*pool.Outcome, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		if err := sub.c.Submit(ctx, j); err != nil {
			t.Fatalf("submit %s: %v", j.Manifest.Name, err)
		}
		wg.Go(func() {
			got[i], errs[i] = agent.Follow(ctx, sub.c, j, agent.FollowConfig{
				Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 20 * time.Millisecond,
				MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
			})
		})
	}
	wg.Wait()
	// Where each job is, as the pool's page says: its ID's shard, or
	// (a cluster that places jobs by load) the one its router chose.
	shardOf := jobShards(t, strings.Split(url, ",")[0])
	onShard = map[int]bool{}
	for i, j := range jobs {
		s, ok := shardOf[j.ID.String()]
		if !ok {
			t.Fatalf("job %s is not on the pool's page", j.Manifest.Name)
		}
		if errs[i] != nil {
			t.Fatalf("job %s (shard %d): %v", j.Manifest.Name, s, errs[i])
		}
		onShard[s] = true
		same(t, got[i], solo(t, j, exec))
	}
	if len(onShard) < 2 {
		t.Fatalf("%d jobs all on one shard: %v", len(jobs), shardOf)
	}
	return jobs, onShard, devs, sub
}

// jobShards returns the shard of each job the pool at url shows on its
// page (GET /v1/dashboard), by job ID.
func jobShards(t *testing.T, url string) map[string]int {
	t.Helper()
	d := dashboardOf(t, url)
	out := map[string]int{}
	for _, j := range d.Jobs {
		if j.Shard == nil {
			t.Fatalf("dashboard: job %s names no shard", j.Name)
		}
		out[j.Job] = *j.Shard
	}
	return out
}

// Real agents join a pool of three shards through one router URL; jobs
// submitted through it land on at least two shards, and each finishes
// with the result it has solo.
func TestShardedPoolMatchesSolo(t *testing.T) {
	const k = 3
	url, poolKey, _ := startShardedPool(t, k)
	jobs, onShard, devs, sub := spreadJobsMatchSolo(t, url, k, "sharded")
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	if localCalls.Load() == 0 {
		t.Error("no request was handed to shard 0 in process (ShardRouterConfig.Local)")
	}
	// The pool says it has k shards, and each keeps a ledger of its own,
	// signed with the pool's key: every one verifies with the key the
	// pool announces, and the devices' receipts come from all of them:
	// each device's history agrees with the k ledgers together.
	info, err := sub.c.Pool(ctx)
	if err != nil || info.Shards != k {
		t.Fatalf("GET /v1/pool: shards %d, %v; want %d", info.Shards, err, k)
	}
	var all []pool.Entry
	withEntries := 0
	for s := range k {
		es := shardLedger(t, sub.c, s)
		if err := pool.VerifyLedger(es, poolKey); err != nil {
			t.Errorf("ledger of shard %d: %v", s, err)
		}
		if len(es) > 0 {
			withEntries++
		}
		all = append(all, es...)
	}
	if withEntries != len(onShard) {
		t.Errorf("%d shards' ledgers have entries, the jobs are on %d shards", withEntries, len(onShard))
	}
	settle(t, devs...)
	for _, d := range devs {
		checkHistory(t, d, all)
	}
	// The pool's page shows every shard's jobs, each device once, and
	// the entries of all the ledgers.
	d := dashboardOf(t, url)
	names := map[string]bool{}
	for _, j := range d.Jobs {
		names[j.Name] = j.Complete
		id, err := job.ParseDigest(j.Job)
		if err != nil || j.Shard == nil || *j.Shard != cluster.ShardOf(id, k) {
			t.Errorf("dashboard: job %s says shard %v, its ID's is %d", j.Name, j.Shard, cluster.ShardOf(id, k))
		}
	}
	for _, j := range jobs {
		if done, ok := names[j.Manifest.Name]; !ok || !done {
			t.Errorf("dashboard: job %s listed %v, complete %v", j.Manifest.Name, ok, done)
		}
	}
	seen := map[string]bool{}
	for _, p := range d.Peers {
		if seen[p.Peer] {
			t.Errorf("dashboard: device %s listed twice", p.Peer)
		}
		seen[p.Peer] = true
	}
	for _, dev := range devs {
		if !seen[dev.key.ID()] {
			t.Errorf("dashboard: device %s not listed", dev.key.ID())
		}
	}
	if d.Ledger.Entries != uint64(len(all)) || !strings.Contains(d.Ledger.Head, "shard 2: ") {
		t.Errorf("dashboard ledger: %d entries, head %q; want %d entries, each shard's head", d.Ledger.Entries, d.Ledger.Head, len(all))
	}
}

// shardLedger downloads shard s's whole ledger.
func shardLedger(t testing.TB, c *agent.Client, s int) []pool.Entry {
	t.Helper()
	var all []pool.Entry
	for {
		page, err := c.LedgerOf(context.Background(), s, uint64(len(all)), 0)
		if err != nil {
			t.Fatalf("ledger of shard %d: %v", s, err)
		}
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
	}
}

// A device that registered while one shard of a divided pool had no
// node in charge (the router passed the registration to the others) is
// unknown to that shard: its first signed request there is refused 401,
// and the client registers again and asks once more. So a job that
// sits on that shard is submitted and looked up as on any other.
func TestRegistersAgainWithAShardThatMissedIt(t *testing.T) {
	t.Parallel()
	const k = 2
	var down atomic.Bool
	down.Store(true)
	url, _, _ := startShardedPoolWith(t, k, func(s int) bool { return s == 0 || !down.Load() })
	sub := newSubmitter(t, url, nil) // shard 1 does not answer its registration
	down.Store(false)
	var j *job.Job
	for i := 0; ; i++ {
		if j = planJob(t, fmt.Sprintf("missed-%d", i), 4, ""); cluster.ShardOf(j.ID, k) == 1 {
			break
		}
	}
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatalf("submit a job on the shard that missed the registration: %v", err)
	}
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil || st.Tasks != 4 {
		t.Fatalf("the job's status: %+v, %v", st, err)
	}
}

// dashboardOf returns what the pool at url shows on its page (GET
// /v1/dashboard).
func dashboardOf(t *testing.T, url string) coord.Dashboard {
	t.Helper()
	resp, err := http.Get(url + "/v1/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d coord.Dashboard
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}
