package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// testLogger logs to stderr at debug when IDLEPOOL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("IDLEPOOL_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// freeAddr returns a 127.0.0.1 address whose port is free right now,
// never the same twice in this process, and outside the system's range
// of ephemeral ports: the NATS servers of the nodes bind their client
// ports to port 0, from that range, after the test chose its ports, and
// one once took a node's HTTP port before the node listened there (the
// test then talked HTTP to NATS until its deadline).
func freeAddr(t testing.TB) string {
	t.Helper()
	lo := ephemeralLow()
	for range 1000 {
		port := 10000 + rand.IntN(lo-10000)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		l.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
	t.Fatalf("no free port on 127.0.0.1 between 10000 and %d after 1000 tries", lo)
	return ""
}

// handedOut holds the addresses freeAddr returned in this process.
var handedOut sync.Map

// ephemeralLow is the lowest port the system hands out for port 0
// (Linux: /proc/sys/net/ipv4/ip_local_port_range; 32768 where it cannot
// be read or leaves too few below it).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 12000 {
		return 32768
	}
	return lo
}

// testConfigs returns n node configs on 127.0.0.1 routed to each other,
// with the TLS material and credentials Init makes, under dir.
func testConfigs(t testing.TB, dir string, n int) []NodeConfig {
	t.Helper()
	if n == 1 {
		return []NodeConfig{{Name: "node1", Pool: "test", Listen: freeAddr(t), RouteListen: freeAddr(t), Dir: filepath.Join(dir, "node1"), LeaderTTL: Duration{time.Second}}}
	}
	var specs []InitNode
	for i := range n {
		specs = append(specs, InitNode{Name: fmt.Sprintf("node%d", i+1), Listen: freeAddr(t), RouteListen: freeAddr(t)})
	}
	cfgs, err := Init(dir, "test", 0, specs)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	for i := range cfgs {
		cfgs[i].LeaderTTL = Duration{time.Second}
	}
	return cfgs
}

// startNodes starts the nodes of cfgs together (a cluster's JetStream
// needs a majority up) and closes them when the test ends.
func startNodes(t testing.TB, cfgs []NodeConfig) []*Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := make([]*Node, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() { nodes[i], errs[i] = StartNode(ctx, c, testLogger()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", cfgs[i].Name, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	return nodes
}

// openStore opens the pool's store on n, retrying while the cluster is
// not ready yet (untilOpen).
func openStore(t testing.TB, n *Node, replicas int) *Store {
	t.Helper()
	return openShardStore(t, n, replicas, Shard{})
}

// openShardStore opens shard sh's store on n as openStore does.
func openShardStore(t testing.TB, n *Node, replicas int, sh Shard) *Store {
	t.Helper()
	return untilOpen(t, "the store on "+n.Config().Name, func(ctx context.Context) (*Store, error) {
		// As the coordinator does: a cluster that has just formed may not
		// yet know its peers are up ("no suitable peers for placement").
		return OpenStore(ctx, n.JetStream(), StoreConfig{Replicas: replicas, Shard: sh})
	})
}

// untilOpen calls open until it succeeds, trying again while JetStream
// does not answer (pool.ErrStoreUnavailable), with a patience of four
// minutes (a loaded machine), and fails t on any other error. As the
// coordinator does (openAll), each try has its own timeout, from 2 s
// doubling to 16 s while tries time out: a request that JetStream drops
// (a cluster just formed, a new bucket's stream leader not elected yet)
// is never answered, and a try on the whole patience's context once
// waited all of it for one such request. Each wait is logged, so a
// failure shows what the cluster answered.
func untilOpen[T any](t testing.TB, what string, open func(context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	timeout := 2 * time.Second
	for try := 1; ; try++ {
		tctx, tcancel := context.WithTimeout(ctx, timeout)
		v, err := open(tctx)
		tcancel()
		if err == nil {
			return v
		}
		if !errors.Is(err, pool.ErrStoreUnavailable) || ctx.Err() != nil {
			t.Fatalf("open %s, try %d: %v", what, try, err)
		}
		t.Logf("open %s, try %d (%v each): %v; trying again", what, try, timeout, err)
		if errors.Is(err, context.DeadlineExceeded) {
			timeout = min(2*timeout, 16*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// oneNodeStore starts a one-node cluster and returns it with a store
// on it that has loaded the (empty) state: a writer, as the node in
// charge holds one.
func oneNodeStore(t testing.TB) (*Node, *Store) {
	t.Helper()
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	w := openStore(t, node, 1)
	if _, err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return node, w
}

// The JetStream store keeps the pool.Store contract on one node; reopening
// restarts the node on the same files.
func TestStoreConformanceOneNode(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		cfgs := testConfigs(t, t.TempDir(), 1)
		node := startNodes(t, cfgs)[0]
		return openStore(t, node, 1), func(pool.Store) pool.Store {
			node.Close()
			node = startNodes(t, cfgs)[0]
			return openStore(t, node, 1)
		}
	})
}

// The same contract holds on a three-node cluster with three replicas, and
// a store opened on another node sees everything committed.
func TestStoreConformanceThreeNodes(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
		i := 0
		return openStore(t, nodes[0], 3), func(pool.Store) pool.Store {
			i++
			return openStore(t, nodes[i%3], 3)
		}
	})
}

// A scheduler on the cluster store, moved to another node (as after the
// node in charge died) three times in the middle of a job, loses and
// duplicates nothing.
func TestClusterRestart(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	nodes := startNodes(t, testConfigs(t, t.TempDir(), 3))
	h := pooltest.NewHarness(t, openStore(t, nodes[0], 3), nil)
	i := 0
	h.Reopen = func(pool.Store) pool.Store {
		i++
		return openStore(t, nodes[i%3], 3)
	}
	pooltest.RunRestart(h)
}

// Machine failures, cancellation, archived replicas and trust survive a
// restart of the node on its JetStream files.
func TestClusterScenarios(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	for name, run := range map[string]func(*pooltest.Harness){
		"machine-failures": pooltest.RunMachineFailures, "cancel": pooltest.RunCancel,
		"archive": pooltest.RunArchive, "trust": pooltest.RunTrustRestart,
	} {
		t.Run(name, func(t *testing.T) {
			cfgs := testConfigs(t, t.TempDir(), 1)
			node := startNodes(t, cfgs)[0]
			h := pooltest.NewHarness(t, openStore(t, node, 1), nil)
			h.Reopen = func(pool.Store) pool.Store {
				node.Close()
				node = startNodes(t, cfgs)[0]
				return openStore(t, node, 1)
			}
			run(h)
		})
	}
}

// TestUnavailable: JetStream's "temporarily unavailable" (503) means no
// answer came, whichever of its two client APIs returned it: the object
// store lists files and snapshots through the older one, and a node that
// takes the lease during an election must wait for the answer, not give
// its term up at once (it then took and dropped the lease dozens of
// times a second). "No suitable peers for placement" is a cluster that
// has not heard from all its nodes yet (one just formed or restarting):
// a fresh three-node cluster refused its first store so; it also says
// ErrTooFewNodes, so that a node waiting can say what for. "Duplicate
// message id is in process" is an append retried while its first try is
// still being decided: the node in charge stopped its scheduler on it
// (CI, a cluster test on a busy machine) where it should try again.
// Other API errors stay what they are.
func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
		// tooFew: the error also wraps ErrTooFewNodes.
		tooFew bool
	}{
		{"jetstream 503", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true, false},
		{"older API 503", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true, false},
		{"older API 408", &nats.APIError{Code: 408, Description: "request timeout"}, true, false},
		{"older API 503, wrapped", fmt.Errorf("list: %w", &nats.APIError{Code: 503, ErrorCode: 10008}), true, false},
		{"no peers for placement yet", &jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, true, true},
		{"older API, no peers for placement yet", &nats.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"}, true, true},
		{"older API 400", &nats.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}, false, false},
		{"jetstream 404", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}, false, false},
		{"the same message ID still in process", &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}, true, false},
		{"older API, the same message ID still in process", &nats.APIError{Code: 409, ErrorCode: 10158}, true, false},
		{"jetstream 409 of another kind", &jetstream.APIError{Code: 409, ErrorCode: 10148, Description: "consumer already exists"}, false, false},
		{"timeout", context.DeadlineExceeded, true, false},
		{"other", errors.New("disk full"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(unavailable(tc.err), pool.ErrStoreUnavailable); got != tc.want {
				t.Errorf("unavailable(%v) is ErrStoreUnavailable: %v, want %v", tc.err, got, tc.want)
			}
			if got := errors.Is(unavailable(tc.err), ErrTooFewNodes); got != tc.tooFew {
				t.Errorf("unavailable(%v) is ErrTooFewNodes: %v, want %v", tc.err, got, tc.tooFew)
			}
		})
	}
}

// stalledObjects is an object store whose listing never sees its end, as
// jetstream's does when its watcher's consumer is cut off mid-way (a
// partition healing): List returns only when its context ends, with the
// context's error, like jetstream's. Such a stall cannot be brought about
// on demand in a real cluster.
type stalledObjects struct{ jetstream.ObjectStore }

func (stalledObjects) List(ctx context.Context, _ ...jetstream.ListObjectsOpt) ([]*jetstream.ObjectInfo, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestListStalled: a listing of snapshots or files that never ends
// returns pool.ErrStoreUnavailable after listTimeout, whatever the
// caller's context. A node following the pool's state lists snapshots
// under its Store's lock on a context without deadline: the listing
// waited forever, and so did the node that had taken the lease, for that
// lock, with no coordinator in charge of the pool.
func TestListStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if _, err := (&snapshots{obs: stalledObjects{}}).list(context.Background()); !errors.Is(err, pool.ErrStoreUnavailable) {
			t.Errorf("snapshots: %v, want pool.ErrStoreUnavailable", err)
		}
		if _, err := (&Blobs{obs: stalledObjects{}}).List(context.Background()); !errors.Is(err, pool.ErrStoreUnavailable) {
			t.Errorf("files: %v, want pool.ErrStoreUnavailable", err)
		}
		if d := time.Since(start); d != 2*listTimeout {
			t.Errorf("the listings took %s, want %s", d, 2*listTimeout)
		}
	})
}

// stalledStreams is a JetStream whose streams never answer: what an
// election under way looks like to a request sent to a dead leader.
// Each call to Stream records how long its context gave it.
type stalledStreams struct {
	jetstream.JetStream
	mu    sync.Mutex
	given []time.Duration // -1: no deadline
	calls chan struct{}   // if set, told of each call
}

func (s *stalledStreams) Stream(ctx context.Context, _ string) (jetstream.Stream, error) {
	d, ok := ctx.Deadline()
	s.mu.Lock()
	if ok {
		s.given = append(s.given, time.Until(d))
	} else {
		s.given = append(s.given, -1)
	}
	s.mu.Unlock()
	if s.calls != nil {
		s.calls <- struct{}{}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLoadStopsAStalledCatchUp: a node that takes charge loads at once,
// even while its Follow is stalled on a stream that does not answer:
// Load cancels that catch-up rather than wait for the lock it holds.
// (The catch-up here would be bounded at two hours.)
func TestLoadStopsAStalledCatchUp(t *testing.T) {
	js := &stalledStreams{calls: make(chan struct{}, 4)}
	s := &Store{js: js, stream: "IDLEPOOL_STATE", mem: pool.NewMemStore(), timeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reported []error
	followed := make(chan struct{})
	go func() {
		s.Follow(ctx, time.Hour, func(err error) { reported = append(reported, err) })
		close(followed)
	}()
	called := func(what string) {
		t.Helper()
		select {
		case <-js.calls:
		case <-time.After(time.Minute): // the call comes in microseconds; a bound, not a verdict on speed
			t.Fatalf("%s did not ask for the stream", what)
		}
	}
	called("Follow")
	lctx, lcancel := context.WithCancel(context.Background())
	loaded := make(chan error, 1)
	go func() { _, err := s.Load(lctx); loaded <- err }()
	called("Load, while Follow's catch-up stalled,")
	lcancel()
	if err := <-loaded; !errors.Is(err, context.Canceled) {
		t.Errorf("Load: %v, want context.Canceled (its own)", err)
	}
	cancel()
	<-followed
	if len(reported) != 0 {
		t.Errorf("Follow reported %v: a catch-up that Load stopped is no error", reported)
	}
}

// TestFollowBoundsItsCatchUp: a following node's catch-up, which holds
// the Store's lock that Load waits for, is bounded: twice the interval
// at first, doubling while the stream does not answer, at most
// maxFollowTry. Unbounded, a request to a stream whose leader had just
// died held the lock for its whole timeout, and the node taking over the
// pool waited as long before it started to load.
func TestFollowBoundsItsCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &stalledStreams{}
		s := &Store{js: js, stream: "IDLEPOOL_STATE", mem: pool.NewMemStore(), timeout: 5 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		var errs int
		done := make(chan struct{})
		go func() {
			s.Follow(ctx, time.Second, func(err error) {
				if !errors.Is(err, pool.ErrStoreUnavailable) {
					t.Errorf("follow: %v, want pool.ErrStoreUnavailable", err)
				}
				errs++
			})
			close(done)
		}()
		time.Sleep(70 * time.Second)
		cancel()
		<-done
		want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second, 16 * time.Second}
		if len(js.given) < len(want) {
			t.Fatalf("%d catch-ups in 70 s: %v, want at least %d", len(js.given), js.given, len(want))
		}
		for i, w := range want {
			if js.given[i] != w {
				t.Errorf("catch-up %d was given %v, want %v (all: %v)", i+1, js.given[i], w, js.given)
			}
		}
		if errs < len(want) {
			t.Errorf("%d errors reported, want one per cut catch-up", errs)
		}
	})
}

// TestFollowRests: a Store set not to follow (a shard this node does
// not stand by for) asks nothing of its stream however long it waits,
// and catches up again at the next interval once set to follow.
func TestFollowRests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		js := &stalledStreams{}
		s := &Store{js: js, stream: "IDLEPOOL_STATE_1", mem: pool.NewMemStore(), timeout: 5 * time.Second}
		s.SetFollowing(false)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			s.Follow(ctx, time.Second, nil)
			close(done)
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		js.mu.Lock()
		asked := len(js.given)
		js.mu.Unlock()
		if asked != 0 {
			t.Errorf("a resting Store asked for its stream %d times in a minute", asked)
		}
		s.SetFollowing(true)
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		js.mu.Lock()
		asked = len(js.given)
		js.mu.Unlock()
		if asked != 1 {
			t.Errorf("once set to follow, it asked %d times within the next interval, want 1", asked)
		}
		cancel()
		<-done
	})
}

// A resting Store holds none of the pool's state while no Scheduler uses
// it: Release empties it, and so does Follow once it is set to rest;
// its next Load loads the whole state again, the same as the writer's.
func TestRestingStoreHoldsNothing(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	h := newHistory()
	h.write(t, w, 40, 10)
	ctx := t.Context()
	r := openStore(t, node, 1)
	r.SetFollowing(false)
	if _, err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Applied() == 0 {
		t.Fatal("Load applied nothing")
	}
	r.Release()
	if got := r.Applied(); got != 0 {
		t.Fatalf("a resting Store released holds the state up to %d, want none", got)
	}
	if _, err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	sameState(t, "loaded again after resting", w, r)
	// Following, released: it keeps what it holds; set to rest, Follow
	// empties it.
	r.SetFollowing(true)
	r.Release()
	if r.Applied() == 0 {
		t.Fatal("a following Store released emptied its memory")
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		r.Follow(fctx, 10*time.Millisecond, nil)
		close(done)
	}()
	r.SetFollowing(false)
	patience(t, time.Minute, "Follow to empty a resting Store", func() bool { return r.Applied() == 0 })
	cancel()
	<-done
}
