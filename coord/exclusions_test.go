package coord

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"idlepool/cluster"
	"idlepool/pool"
)

// startOneNode starts a cluster node alone on 127.0.0.1, its JetStream
// for the buckets the test's coordinators share; it stops when the test
// ends.
func startOneNode(ctx context.Context, t *testing.T) *cluster.Node {
	t.Helper()
	node, err := cluster.StartNode(ctx, cluster.NodeConfig{Name: "node1", Pool: "test", Listen: freeAddr(t), RouteListen: freeAddr(t),
		Dir: filepath.Join(t.TempDir(), "node1")}, nil)
	if err != nil {
		t.Fatalf("StartNode: %v", err)
	}
	t.Cleanup(node.Close)
	return node
}

// Two coordinators, as two shards of one pool, share a cluster.Exclusions
// bucket on a one-node JetStream: a device caught lying on A's known
// answer (ExcludeAfter = 1) is excluded on A, and B, where it registered
// too, refuses it and its owner's other device work once A's exclusion
// reaches it through the bucket.
func TestExclusionsReachAnotherShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startOneNode(ctx, t)
	shard := func(c *Config) {
		x, err := cluster.OpenExclusions(ctx, node.JetStream(), 1)
		if err != nil {
			t.Fatalf("OpenExclusions: %v", err)
		}
		c.Trust.ExcludeAfter = 1
		c.Cluster = &ClusterHooks{Store: pool.NewMemStore(), Exclusions: x}
	}
	a, b := startServer(t, shard), startServer(t, shard)

	owner, honest := newPeer(t, nil), newPeer(t, nil)
	liar := newPeer(t, nil)
	liar2 := newPeer(t, liar.owner)
	for _, p := range []*testPeer{owner, honest, liar} {
		a.register(t, p, "", http.StatusCreated)
		a.offer(t, p)
	}
	for _, p := range []*testPeer{liar, liar2} {
		b.register(t, p, "", http.StatusCreated)
		b.offer(t, p)
	}
	leaseStatus := func(ts *testServer, p *testPeer) (int, string) {
		a := ts.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: 1})
		if a.status == http.StatusOK {
			return a.status, ""
		}
		return a.status, a.errorBody(t).Code
	}
	if st, code := leaseStatus(b, liar); st != http.StatusOK {
		t.Fatalf("B's lease for the liar before: %d %s", st, code)
	}

	const right, wrong = `{"x":1}`, `{"x":666}`
	j := knownJob(t, "known", 1, "", map[int64]string{0: right})
	a.submitKnown(t, owner, j)
	ls := a.leaseSome(t, liar, 1)
	if len(ls) != 1 {
		t.Fatalf("the liar was leased %d tasks on A, want 1", len(ls))
	}
	a.returnResult(t, liar, ls[0], wrong)
	if st, code := leaseStatus(a, liar); st != http.StatusForbidden || code != "excluded" {
		t.Fatalf("A's lease for the liar after its wrong known answer: %d %s, want 403 excluded", st, code)
	}

	waitUntil(t, patience(t), "B to exclude the liar", func() bool {
		st, _ := leaseStatus(b, liar)
		return st == http.StatusForbidden
	})
	for _, p := range []*testPeer{liar, liar2} {
		if st, code := leaseStatus(b, p); st != http.StatusForbidden || code != "excluded" {
			t.Errorf("B's lease for %s: %d %s, want 403 excluded", p.ID(), st, code)
		}
	}
}

// Two coordinators, as two shards of one pool, share a
// cluster.Deviations bucket on a one-node JetStream (ExcludeAfter = 2): a
// device caught lying once on A's known answer is counted on B once A's
// deviation reaches it through the bucket, and one more lie on B then
// excludes it there, where its own lie alone would not.
func TestDeviationsReachAnotherShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startOneNode(ctx, t)
	shard := func(c *Config) {
		x, err := cluster.OpenDeviations(ctx, node.JetStream(), 1)
		if err != nil {
			t.Fatalf("OpenDeviations: %v", err)
		}
		c.Trust.ExcludeAfter = 2
		c.Cluster = &ClusterHooks{Store: pool.NewMemStore(), Deviations: x}
	}
	a, b := startServer(t, shard), startServer(t, shard)
	owner, liar := newPeer(t, nil), newPeer(t, nil)
	for _, ts := range []*testServer{a, b} {
		for _, p := range []*testPeer{owner, liar} {
			ts.register(t, p, "", http.StatusCreated)
			ts.offer(t, p)
		}
	}
	const right, wrong = `{"x":1}`, `{"x":666}`
	lie := func(ts *testServer, name string) {
		t.Helper()
		j := knownJob(t, name, 1, "", map[int64]string{0: right})
		ts.submitKnown(t, owner, j)
		ls := ts.leaseSome(t, liar, 1)
		if len(ls) != 1 {
			t.Fatalf("the liar was leased %d tasks on %s, want 1", len(ls), name)
		}
		ts.returnResult(t, liar, ls[0], wrong)
	}
	lie(a, "on-a")
	if n := a.sched.DeviationCount(liar.ID()); n != 1 {
		t.Fatalf("A counts %d deviations of the liar, want 1", n)
	}
	waitUntil(t, patience(t), "B to count A's deviation", func() bool { return b.sched.DeviationCount(liar.ID()) == 1 })
	if n := a.sched.DeviationCount(liar.ID()); n != 1 {
		t.Fatalf("A counts %d deviations of the liar after its own came back, want 1", n)
	}
	lie(b, "on-b")
	a2 := b.do(t, liar, "POST", "/v1/leases", LeaseRequest{Max: 1})
	if a2.status != http.StatusForbidden || a2.errorBody(t).Code != "excluded" {
		t.Fatalf("B's lease for the liar after A's lie and its own: %d %s, want 403 excluded", a2.status, a2.body)
	}
}

// Two coordinators, as two shards of one pool, share a cluster.Secrets
// bucket on a one-node JetStream. Z, in the part of shard 0, holds a copy
// of every file (uploads go to shard 0) and served a job's known-answers
// file as any other; once shard A takes the job, whose known answers
// those are, Z refuses the file and its chunks, as A does.
func TestSecretsReachAnotherShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := startOneNode(ctx, t)
	shard := func(c *Config) {
		x, err := cluster.OpenSecrets(ctx, node.JetStream(), 1)
		if err != nil {
			t.Fatalf("OpenSecrets: %v", err)
		}
		c.Cluster = &ClusterHooks{Store: pool.NewMemStore(), Secrets: x}
	}
	a, z := startServer(t, shard), startServer(t, shard)
	owner, other := newPeer(t, nil), newPeer(t, nil)
	for _, ts := range []*testServer{a, z} {
		for _, p := range []*testPeer{owner, other} {
			ts.register(t, p, "", http.StatusCreated)
		}
	}
	j := knownJob(t, "secret", 1, "", map[int64]string{0: `{"x":1}`})
	answers, err := os.ReadFile(j.KnownAnswers.Path)
	if err != nil {
		t.Fatal(err)
	}
	z.upload(t, owner, answers)
	d := j.KnownAnswers.SHA256.String()
	if got := z.do(t, other, "GET", "/v1/blobs/"+d, nil); got.status != http.StatusOK {
		t.Fatalf("Z before the job: %d %s, want the file (200)", got.status, got.body)
	}
	a.submitKnown(t, owner, j)
	waitUntil(t, patience(t), "Z to refuse the known answers", func() bool {
		return z.do(t, other, "GET", "/v1/blobs/"+d, nil).status == http.StatusNotFound
	})
	if got := z.do(t, other, "GET", "/v1/blobs/"+d+"/chunks", nil); got.status != http.StatusNotFound {
		t.Errorf("Z's chunk manifest of the known answers: %d %s, want 404", got.status, got.body)
	}
}

// flakyBoard is an ExclusionBoard that does not answer its first calls
// of each kind (pool.ErrStoreUnavailable), then keeps what is published
// and hands it to watchers.
type flakyBoard struct {
	mu        sync.Mutex
	failsLeft map[string]int // by "publish" and "watch"
	stored    []pool.Exclusion
	changed   chan struct{} // closed and replaced at each Publish
}

func (f *flakyBoard) fail(kind string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failsLeft[kind] > 0 {
		f.failsLeft[kind]--
		return true
	}
	return false
}

func (f *flakyBoard) Publish(ctx context.Context, e pool.Exclusion) error {
	if f.fail("publish") {
		return fmt.Errorf("publish: %w", pool.ErrStoreUnavailable)
	}
	f.mu.Lock()
	f.stored = append(f.stored, e)
	close(f.changed) // every watcher looks again
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return nil
}

func (f *flakyBoard) Watch(ctx context.Context, fn func(pool.Exclusion)) error {
	if f.fail("watch") {
		return fmt.Errorf("watch: %w", pool.ErrStoreUnavailable)
	}
	seen := 0
	for {
		f.mu.Lock()
		news, changed := f.stored[seen:], f.changed
		seen = len(f.stored)
		f.mu.Unlock()
		for _, e := range news {
			fn(e)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// A board that does not answer at first: the exclusion A decides is
// published once it answers, and B's watch, started again, applies it.
func TestExclusionsBoardUnavailable(t *testing.T) {
	board := &flakyBoard{failsLeft: map[string]int{"publish": 3, "watch": 2}, changed: make(chan struct{})}
	shard := func(c *Config) {
		c.Trust.ExcludeAfter = 1
		c.Cluster = &ClusterHooks{Store: pool.NewMemStore(), Exclusions: board}
	}
	a, b := startServer(t, shard), startServer(t, shard)
	owner, liar := newPeer(t, nil), newPeer(t, nil)
	for _, p := range []*testPeer{owner, liar} {
		a.register(t, p, "", http.StatusCreated)
		a.offer(t, p)
	}
	b.register(t, liar, "", http.StatusCreated)
	b.offer(t, liar)
	j := knownJob(t, "known", 1, "", map[int64]string{0: `{"x":1}`})
	a.submitKnown(t, owner, j)
	ls := a.leaseSome(t, liar, 1)
	if len(ls) != 1 {
		t.Fatalf("the liar was leased %d tasks on A, want 1", len(ls))
	}
	a.returnResult(t, liar, ls[0], `{"x":666}`)
	waitUntil(t, patience(t), "B to exclude the liar", func() bool {
		return b.do(t, liar, "POST", "/v1/leases", LeaseRequest{Max: 1}).status == http.StatusForbidden
	})
	board.mu.Lock()
	defer board.mu.Unlock()
	if len(board.stored) != 1 || board.stored[0].Device != liar.ID() {
		t.Errorf("the board holds %+v, want the liar's exclusion once", board.stored)
	}
}
