package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"idlepool/cluster"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// testLogger logs to stderr at debug when IDLEPOOL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("IDLEPOOL_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// nodeLogs keeps what a test's cluster nodes log at info and above, the
// first keepHead lines and the last keepTail, and gives them to the
// test's log only if it fails: a wait that ran out of patience in CI
// said what it waited for but not what the nodes did meanwhile.
type nodeLogs struct {
	mu   sync.Mutex
	head []string
	tail []string // a ring of keepTail lines from next
	next int
	cut  int // lines dropped between head and tail
}

const (
	keepHead = 60
	keepTail = 240
)

// failureLogger is the logger of the nodes of t's cluster: IDLEPOOL_TEST_LOG's
// (testLogger) when set, else one into a nodeLogs that t logs at cleanup
// if it failed.
func failureLogger(t *testing.T) *slog.Logger {
	if l := testLogger(); l != nil {
		return l.With("test", t.Name())
	}
	nl := &nodeLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("what the nodes logged (first %d and last %d lines):\n%s", keepHead, keepTail, nl.String())
		}
	})
	return slog.New(slog.NewTextHandler(nl, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Write keeps p, one record of a slog.TextHandler.
func (nl *nodeLogs) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	nl.mu.Lock()
	defer nl.mu.Unlock()
	switch {
	case len(nl.head) < keepHead:
		nl.head = append(nl.head, line)
	case len(nl.tail) < keepTail:
		nl.tail = append(nl.tail, line)
	default:
		nl.tail[nl.next] = line
		nl.next = (nl.next + 1) % keepTail
		nl.cut++
	}
	return len(p), nil
}

// String is the kept lines in order, with how many were dropped.
func (nl *nodeLogs) String() string {
	nl.mu.Lock()
	defer nl.mu.Unlock()
	var b strings.Builder
	for _, l := range nl.head {
		b.WriteString(l + "\n")
	}
	if nl.cut > 0 {
		fmt.Fprintf(&b, "... %d lines left out ...\n", nl.cut)
	}
	for i := range nl.tail {
		b.WriteString(nl.tail[(nl.next+i)%len(nl.tail)] + "\n")
	}
	return b.String()
}

// routeProxy forwards TCP connections to a node's route port until cut;
// cut closes every connection it carries and refuses new ones until heal.
type routeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cutOff bool
	conns  map[net.Conn]bool
}

func newRouteProxy(t *testing.T, target string) *routeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &routeProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *routeProxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cutOff {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	// From 127.0.0.1, which is not the target's address (routeHost).
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	u, err := d.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cutOff {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { io.Copy(u, c); u.Close(); c.Close() }()
	io.Copy(c, u)
	c.Close()
	u.Close()
}

func (p *routeProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOff = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *routeProxy) heal() {
	p.mu.Lock()
	p.cutOff = false
	p.mu.Unlock()
}

// testNode is one in-process node of a test cluster, reached over HTTP
// on 127.0.0.1 like any client would.
type testNode struct {
	name   string
	url    string
	client *http.Client
	stop   func()
	node   *cluster.Node
	// gossiped counts connections to this node's route port on
	// 127.0.0.1, where it does not listen (routeHost): routes other
	// nodes learnt by gossip, which a cut does not cover.
	gossiped *atomic.Int32
}

// decoy listens on addr, counting and closing what connects, until the
// test ends; it does nothing where addr cannot be bound.
func decoy(t *testing.T, addr string, n *atomic.Int32) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
}

// routedTo returns the names of the nodes n has a NATS route to.
func (n *testNode) routedTo(t *testing.T) []string {
	t.Helper()
	rz, err := n.node.Server().Routez(nil)
	if err != nil {
		t.Fatalf("%s: routes: %v", n.name, err)
	}
	var out []string
	for _, r := range rz.Routes {
		out = append(out, r.RemoteName)
	}
	return out
}

func (n *testNode) do(t *testing.T, p *testPeer, method, path string, v any) answer {
	t.Helper()
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	if b, ok := v.([]byte); ok {
		body = b
	}
	req, err := http.NewRequest(method, n.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if p != nil {
		SignRequest(req, body, p.key, time.Now())
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return answer{status: 0, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, header: resp.Header}
}

// doLed is do for a request that needs a node in charge: while n answers
// 503 no_leader (on a busy machine the lease of the node in charge may
// lapse for a moment, and an agent then asks again too) it asks again,
// bounded by patience. Any other answer is returned as it is.
func (n *testNode) doLed(t *testing.T, p *testPeer, method, path string, v any) answer {
	t.Helper()
	var a answer
	waitUntil(t, patience(t), fmt.Sprintf("%s to answer %s %s with a node in charge", n.name, method, path), func() bool {
		a = n.do(t, p, method, path, v)
		return !a.noLeader()
	})
	return a
}

// noLeader reports whether a is a node's 503 no_leader answer.
func (a answer) noLeader() bool {
	var e ErrorBody
	return a.status == http.StatusServiceUnavailable && json.Unmarshal(a.body, &e) == nil && e.Code == CodeNoLeader
}

// inCharge reports whether node n says it knows a node in charge, and
// which.
func (n *testNode) inCharge(t *testing.T) (string, bool) {
	a := n.do(t, nil, "GET", "/v1/cluster", nil)
	var st ClusterState
	if a.status != 200 || json.Unmarshal(a.body, &st) != nil || !st.LeaderKnown || st.Leader.Internal == "" {
		return "", false
	}
	return st.Leader.Node, true
}

// routeHost returns the loopback address node i (0-based) of a test
// cluster takes its NATS routes on: 127.0.0.(11+i), an address of its
// own, where the system routes all of 127.0.0.0/8 to loopback (Linux);
// own is false where it does not, and the address is 127.0.0.1.
//
// An address of its own keeps a cut between proxies a cut. A NATS server
// tells the nodes it is routed to of each new route it gets (route
// gossip), naming the new peer by the IP its connection came from and the
// peer's route port, and a node that hears of a peer it has no route to
// connects there at once, whatever its config says. Through the proxies
// that IP is 127.0.0.1: with every node on 127.0.0.1 the named address is
// the peer's very route port, so such a route bypasses the proxies and a
// cut leaves it standing (the node cut off kept reaching one node of the
// majority side, and took the lease again). On an address of its own
// the node has no port on 127.0.0.1 and a gossiped route finds nothing.
func routeHost(t *testing.T, i int) (host string, own bool) {
	t.Helper()
	host = fmt.Sprintf("127.0.0.%d", 11+i)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "127.0.0.1", false
	}
	l.Close()
	return host, true
}

// startTestCluster starts three nodes whose routes pass through proxies
// (proxies[i][j] carries node i's connection to node j; the pairs in
// cutFirst, node indexes, are cut before the nodes start) and runs each
// node's ServeCluster; start says which nodes start serving now (the
// others' ServeCluster begins when the returned function is called, with
// the versions of the Config given, if any). own is false where the
// nodes' routes cannot listen on addresses of their own (routeHost): a
// cut may then not hold.
func startTestCluster(t *testing.T, cutFirst ...[2]int) (_ []*testNode, _ [3][3]*routeProxy, _ func(i int, base ...Config), own bool) {
	return startTestClusterWith(t, clusterOpts{cutFirst: cutFirst})
}

// clusterOpts are startTestClusterWith's choices: the routes cut before
// the nodes start, and the shards the pool's work is divided into (0:
// cluster.Init's, one).
type clusterOpts struct {
	cutFirst [][2]int
	shards   int
}

// startTestClusterWith is startTestCluster with the choices of o.
func startTestClusterWith(t *testing.T, o clusterOpts) (_ []*testNode, _ [3][3]*routeProxy, _ func(i int, base ...Config), own bool) {
	t.Helper()
	var specs []cluster.InitNode
	// Route ports are reserved while the proxies pick theirs, so no
	// proxy takes a node's port; they are freed just before the nodes
	// bind them. The HTTP ports are bound seconds later, once JetStream
	// answers, so they come from outside the ephemeral range (freeAddr):
	// an ephemeral one was once taken meanwhile, by a connection of
	// another test.
	addrs := make([]string, 6)
	var held []net.Listener
	own = true
	for i := range addrs {
		if i%2 == 0 {
			addrs[i] = freeAddr(t)
			continue
		}
		host, ok := routeHost(t, i/2)
		own = own && ok
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = l.Addr().String()
		held = append(held, l)
	}
	gossiped := make([]*atomic.Int32, 3)
	for i := range 3 {
		gossiped[i] = new(atomic.Int32)
		if _, port, _ := net.SplitHostPort(addrs[2*i+1]); own {
			decoy(t, net.JoinHostPort("127.0.0.1", port), gossiped[i])
		}
	}
	for i := range 3 {
		specs = append(specs, cluster.InitNode{Name: fmt.Sprintf("node%d", i+1), Listen: addrs[2*i], RouteListen: addrs[2*i+1]})
	}
	cfgs, err := cluster.Init(t.TempDir(), "test", 0, specs)
	if err != nil {
		t.Fatal(err)
	}
	var proxies [3][3]*routeProxy
	for i := range 3 {
		// node3 is a cold standby (it applies nothing of the state while
		// another node is in charge), the others warm (the default): a
		// pool may mix both, and a test that takes over may see either.
		cfgs[i].ColdStandby = i == 2
		if o.shards > 0 {
			cfgs[i].Shards = o.shards
		}
		// The nodes keep Init's leader_ttl, the default 3 s: a busy
		// machine (the whole suite on two cores) needs the slack more than
		// the test needs a quick takeover.
		cfgs[i].Routes = nil
		for j := range 3 {
			if i != j {
				proxies[i][j] = newRouteProxy(t, specs[j].RouteListen)
				cfgs[i].Routes = append(cfgs[i].Routes, proxies[i][j].ln.Addr().String())
			}
		}
	}
	for _, c := range o.cutFirst {
		proxies[c[0]][c[1]].cut()
		proxies[c[1]][c[0]].cut()
	}
	for _, l := range held {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := make([]*cluster.Node, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { nodes[i], errs[i] = cluster.StartNode(ctx, cfgs[i], nil) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start node%d: %v", i+1, err)
		}
	}
	tns := make([]*testNode, 3)
	for i := range 3 {
		tr := &http.Transport{}
		tns[i] = &testNode{name: cfgs[i].Name, url: cfgs[i].URL, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, node: nodes[i], gossiped: gossiped[i]}
		t.Cleanup(func() {
			if tns[i].stop != nil {
				tns[i].stop()
			}
			tr.CloseIdleConnections()
			nodes[i].Close()
		})
	}
	logger := failureLogger(t)
	serve := func(i int, base ...Config) {
		cfg := Config{DataDir: "unused", Logger: logger.With("testNode", tns[i].name)}
		for _, b := range base {
			cfg.MinAgentVersion, cfg.MinAPIVersion, cfg.LatestAgentVersion = b.MinAgentVersion, b.MinAPIVersion, b.LatestAgentVersion
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			err := ServeCluster(sctx, nodes[i], cfg)
			if err != nil {
				t.Logf("node%d: ServeCluster: %v", i+1, err) // at once, not only at cleanup
			}
			// The test's waits would wait for this node until the
			// deadline (twice, in CI, 9 and 12 minutes): they fail at
			// once instead. Every test that serves a node this way wants
			// it serving until it stops it (stop fails the test on any
			// error).
			switch {
			case errors.Is(err, syscall.EADDRINUSE):
				unservable.Store(t, fmt.Errorf("node%d cannot listen: %w", i+1, err))
			case sctx.Err() == nil:
				unservable.Store(t, fmt.Errorf("node%d stopped serving before the test stopped it: %v", i+1, err))
			}
			done <- err
		}()
		tns[i].stop = func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("node%d: ServeCluster: %v", i+1, err)
			}
		}
	}
	return tns, proxies, serve, own
}

// waitUntil polls cond every 50 ms until it holds, failing the test after
// limit (a bound on a liveness wait, not a verdict on speed).
//
// patience(t) is the limit of the cluster tests' waits for the cluster to
// react: until a minute before the test binary's deadline (go test
// -timeout), so that a busy machine makes a test slow, never wrong. On a
// quiet machine each wait takes 5 to 12 s; the whole suite on two busy
// cores has taken over 90 s.
func patience(t *testing.T) time.Duration {
	if d, ok := t.Deadline(); ok {
		return time.Until(d) - time.Minute
	}
	return 20 * time.Minute
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if err, ok := unservable.Load(t); ok {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A partition between nodes: the node in charge is cut off from the other
// two. On its side, leases stop (nothing can be committed without a
// majority, and it gives up its lease); the majority elects another node
// and goes on. After the partition heals, the cut-off node follows the
// majority's state, the job finishes, and the ledger, read from every
// node, names no (job, task, peer) twice and gives every task exactly its
// quorum of receipts.
func TestClusterPartition(t *testing.T) {
	// Its hangs on a loaded machine were the cut not holding (routeHost)
	// and a stalled listing of snapshots (cluster's listObjects): 25 to
	// 40 s on a loaded 2-core machine, mostly waiting.
	t.Parallel() // long: runs beside the package's other long tests
	nodes, proxies, serve, own := startTestCluster(t)
	if !own {
		t.Skip("a cut between the nodes holds only where their routes listen on loopback addresses of their own (127.0.0.11-13): this system has only 127.0.0.1")
	}
	// node3 serves first, so it is the one in charge when the cut comes.
	serve(2)
	waitUntil(t, patience(t), "node3 in charge", func() bool { n, ok := nodes[2].inCharge(t); return ok && n == "node3" })
	serve(0)
	serve(1)
	for _, n := range nodes {
		waitUntil(t, patience(t), n.name+" forwarding", func() bool { _, ok := n.inCharge(t); return ok })
	}

	alice, bob, carol := newPeer(t, nil), newPeer(t, nil), newPeer(t, nil)
	// Alice's owner gives a name, to node3 in charge: the node that
	// takes over shows it too.
	adas, err := identity.NewProfile(alice.owner, "Ada's lab", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*testPeer{alice, bob, carol} {
		reg := p.registration("")
		if p == alice {
			reg.Profile = &adas
		}
		// Registering, uploading and submitting are idempotent (200 for
		// what exists): a lapse of the lease in charge on a busy machine
		// is waited out (doLed), and an attempt whose answer it lost may
		// have been taken.
		if a := nodes[0].doLed(t, p, "POST", "/v1/peers", reg); a.status != http.StatusCreated && a.status != http.StatusOK {
			t.Fatalf("register via node1: %d %s", a.status, a.body)
		}
	}
	const tasks = 40
	// A lease whose answer was lost while the node in charge changed
	// hands expires and is leased again; 10 s leaves a busy machine time
	// to answer the leases it did grant.
	j := testJobWith(t, "partition", tasks, `lease_timeout = "10s"`)
	d := job.Digest(sha256.Sum256(programBytes(t, j)))
	if a := nodes[1].doLed(t, alice, "PUT", "/v1/blobs/"+d.String(), programBytes(t, j)); a.status != http.StatusCreated && a.status != http.StatusOK {
		t.Fatalf("upload via node2: %d %s", a.status, a.body)
	}
	if a := nodes[0].doLed(t, alice, "POST", "/v1/jobs", JobRequest{Canonical: j.Canonical}); a.status != http.StatusCreated && a.status != http.StatusOK {
		t.Fatalf("job via node1: %d %s", a.status, a.body)
	}
	offer := func(n *testNode, p *testPeer) int {
		body, _ := json.Marshal(testOffer(p, time.Now(), 10*time.Minute))
		return n.do(t, p, "POST", "/v1/offers", body).status
	}
	lease := func(n *testNode, p *testPeer, max int) (int, []LeaseGrant) {
		a := n.do(t, p, "POST", "/v1/leases", LeaseRequest{Max: max})
		if a.status != http.StatusOK {
			return a.status, nil
		}
		var lr LeaseResponse
		a.decode(t, &lr)
		return a.status, lr.Leases
	}
	result := func(task int64) []byte { return fmt.Appendf(nil, `{"x":%d}`, task+1) }
	submission := func(g LeaseGrant) []byte {
		r := result(g.Task)
		body, _ := json.Marshal(ResultSubmission{Digest: HexDigest(pool.ReplicaDigest(r, false, "")), Result: r})
		return body
	}
	submit := func(n *testNode, p *testPeer, g LeaseGrant) int {
		return n.do(t, p, "POST", "/v1/leases/"+g.Lease+"/result", submission(g)).status
	}
	// Before the cut: bob and carol decide tasks through node3. A lapse of
	// the lease in charge on a busy machine is waited out (doLed); the
	// cut may then come with another node in charge, which the rest of
	// the test allows.
	for _, p := range []*testPeer{bob, carol} {
		body, _ := json.Marshal(testOffer(p, time.Now(), 10*time.Minute))
		if a := nodes[2].doLed(t, p, "POST", "/v1/offers", body); a.status != 200 {
			t.Fatalf("offer via node3: %d %s", a.status, a.body)
		}
		a := nodes[2].doLed(t, p, "POST", "/v1/leases", LeaseRequest{Max: 5})
		var lr LeaseResponse
		if a.status == http.StatusOK {
			a.decode(t, &lr)
		}
		if a.status != http.StatusOK || len(lr.Leases) != 5 {
			t.Fatalf("lease via node3 before the cut: %d %s, %d leases", a.status, a.body, len(lr.Leases))
		}
		for _, g := range lr.Leases {
			// A lapse in charge that doLed waits out can outlast the
			// lease's 10 s on a busy machine: the task is then leased
			// again and finished after the heal, as a lost answer's is.
			a := nodes[2].doLed(t, p, "POST", "/v1/leases/"+g.Lease+"/result", submission(g))
			if a.status == http.StatusGone && strings.Contains(string(a.body), `"lease_expired"`) {
				t.Logf("result via node3 before the cut: lease %s expired while the node in charge changed hands: %s", g.Lease, a.body)
				continue
			}
			if a.status != http.StatusOK {
				t.Fatalf("result via node3: %d %s", a.status, a.body)
			}
		}
	}

	// The cut: node3 reaches neither node1 nor node2, nor they it.
	for i := range 3 {
		for j := range 3 {
			if (i == 2) != (j == 2) {
				proxies[i][j].cut()
			}
		}
	}
	cut := time.Now()
	// The cut holds: node3 is routed to no node, nor any node to it.
	waitUntil(t, patience(t), "node3 cut off from the other nodes", func() bool {
		return len(nodes[2].routedTo(t)) == 0 && !slices.Contains(nodes[0].routedTo(t), "node3") && !slices.Contains(nodes[1].routedTo(t), "node3")
	})
	cutHolds := func() {
		t.Helper()
		if r := nodes[2].routedTo(t); len(r) > 0 {
			t.Fatalf("the cut does not hold: node3 is routed to %v", r)
		}
	}
	// The minority side stops granting leases: within a bound node3
	// answers 503, and keeps answering so.
	var refused answer
	waitUntil(t, patience(t), "node3 to refuse leases", func() bool {
		refused = nodes[2].do(t, carol, "POST", "/v1/leases", LeaseRequest{Max: 1})
		if refused.status == http.StatusServiceUnavailable {
			return true
		}
		t.Logf("node3 after the cut: %d %.200s; /v1/cluster: %.600s", refused.status, refused.body, nodes[2].do(t, nil, "GET", "/v1/cluster", nil).body)
		time.Sleep(2 * time.Second)
		return false
	})
	t.Logf("node3 refused leases %s after the cut", time.Since(cut).Round(10*time.Millisecond))
	// The majority side elects another node and goes on.
	var (
		majority []LeaseGrant
		last     answer
	)
	limit := patience(t)
	deadline := time.Now().Add(limit)
	for {
		offer(nodes[0], bob)
		last = nodes[0].do(t, bob, "POST", "/v1/leases", LeaseRequest{Max: 5})
		if last.status == http.StatusOK {
			var lr LeaseResponse
			last.decode(t, &lr)
			if majority = lr.Leases; len(majority) > 0 {
				break
			}
		}
		cutHolds()
		if time.Now().After(deadline) {
			st := nodes[0].do(t, nil, "GET", "/v1/cluster", nil)
			t.Fatalf("no leases on the majority side within %s: last answer %d %s; node1 sees %s", limit, last.status, last.body, st.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("leases flowing on the majority side %s after the cut", time.Since(cut).Round(10*time.Millisecond))
	// node1's word on who is in charge may lag the leases it grants by a
	// moment on a busy machine: wait for it to name a node of its side.
	var leader string
	waitUntil(t, patience(t), "node1 to name a node of the majority side in charge", func() bool {
		var known bool
		cutHolds()
		leader, known = nodes[0].inCharge(t)
		if known && leader != "node3" {
			return true
		}
		time.Sleep(100 * time.Millisecond)
		return false
	})
	t.Logf("%s in charge on the majority side, %s after the cut", leader, time.Since(cut).Round(10*time.Millisecond))
	var ji JobInfo
	waitUntil(t, patience(t), "node1 to answer for the job after the cut", func() bool {
		a := nodes[0].do(t, alice, "GET", "/v1/jobs/"+j.ID.String(), nil)
		if a.status != http.StatusOK {
			t.Logf("job via node1 after the cut: %d %.200s", a.status, a.body)
			time.Sleep(time.Second)
			return false
		}
		a.decode(t, &ji)
		return true
	})
	if ji.OwnerProfile == nil || ji.OwnerProfile.Name != "Ada's lab" {
		t.Errorf("job owner's profile via %s, in charge after the cut: %+v, want Ada's lab", leader, ji.OwnerProfile)
	}
	for range 5 {
		if s, _ := lease(nodes[2], carol, 1); s == http.StatusOK {
			t.Fatal("node3, cut off, granted a lease")
		}
	}
	// Cut off, node3 cannot read the live nodes: it says its list is
	// stale rather than list them as live (GET /v1/cluster, /healthz).
	listState := func(n *testNode) (ok, stale bool) {
		var st ClusterState
		a := n.do(t, nil, "GET", "/v1/cluster", nil)
		ok = a.status == 200 && json.Unmarshal(a.body, &st) == nil
		return ok, ok && st.NodesStale
	}
	stale := func(n *testNode) bool { _, s := listState(n); return s }
	waitUntil(t, patience(t), "node3, cut off, to say its list of live nodes is stale", func() bool { return stale(nodes[2]) })
	if h := nodes[2].do(t, nil, "GET", "/healthz", nil); !strings.Contains(string(h.body), "live nodes unknown") {
		t.Errorf("node3's /healthz, cut off: %d %s", h.status, h.body)
	}
	// The majority side reads its live nodes again once the nodes
	// bucket's stream has a leader on its side: on a busy machine that
	// election can outlast three lease TTLs, and node1 says its list is
	// stale meanwhile, as it should.
	waitUntil(t, patience(t), "node1, on the majority side, to read its live nodes again", func() bool {
		ok, stale := listState(nodes[0])
		return ok && !stale
	})
	// A result is idempotent: a 503 while the majority's lease in charge
	// settles on a busy machine (no node in charge for a moment, or a
	// commit that timed out) is sent again, bounded by patience.
	for _, g := range majority {
		var a answer
		waitUntil(t, patience(t), "node1 to take a result of the majority side", func() bool {
			a = nodes[0].do(t, bob, "POST", "/v1/leases/"+g.Lease+"/result", submission(g))
			return a.status != http.StatusServiceUnavailable
		})
		if a.status != 200 {
			t.Fatalf("result via node1: %d %s", a.status, a.body)
		}
	}
	_ = carol

	// Heal; finish the job through every node in turn.
	for i := range 3 {
		for j := range 3 {
			if proxies[i][j] != nil {
				proxies[i][j].heal()
			}
		}
	}
	waitUntil(t, patience(t), "node3 forwarding again", func() bool { _, ok := nodes[2].inCharge(t); return ok })
	waitUntil(t, patience(t), "node3 to read the live nodes again", func() bool { ok, stale := listState(nodes[2]); return ok && !stale })
	// Results whose answer was lost (a node changing hands) are sent
	// again until answered: the pool answers a result sent twice alike.
	limit = patience(t)
	finish := time.Now().Add(limit)
	pending := map[*testPeer][]LeaseGrant{}
	for round := 0; ; round++ {
		if round > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		n := nodes[round%3]
		var st JobInfo
		a := n.do(t, alice, "GET", "/v1/jobs/"+j.ID.String(), nil)
		if a.status == 200 {
			a.decode(t, &st)
			if st.Accepted+st.Failed == tasks {
				break
			}
		}
		if time.Now().After(finish) {
			t.Fatalf("the job did not finish within %s of the heal: %d %s; results unanswered: %d", limit, a.status, a.body, len(pending[bob])+len(pending[carol]))
		}
		for _, p := range []*testPeer{bob, carol} {
			offer(n, p)
			if _, ls := lease(n, p, 10); len(ls) > 0 {
				pending[p] = append(pending[p], ls...)
			}
			var keep []LeaseGrant
			for _, g := range pending[p] {
				if s := submit(n, p, g); s == 0 || s >= 500 {
					keep = append(keep, g)
				}
			}
			pending[p] = keep
		}
	}
	var heads []job.Digest
	for _, n := range nodes {
		var a answer
		waitUntil(t, patience(t), "the ledger from "+n.name, func() bool {
			a = n.do(t, nil, "GET", "/v1/ledger", nil)
			return a.status == 200
		})
		var es []pool.Entry
		for line := range bytes.Lines(a.body) {
			var e pool.Entry
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("ledger via %s: %v", n.name, err)
			}
			es = append(es, e)
		}
		// The pool's key, from the node in charge: a node that has just
		// lost sight of it answers 503 a moment.
		var info PoolInfo
		waitUntil(t, patience(t), "the pool's key from "+n.name, func() bool {
			a := n.do(t, nil, "GET", "/v1/pool", nil)
			return a.status == 200 && json.Unmarshal(a.body, &info) == nil
		})
		if err := pool.VerifyLedger(es, info.Key); err != nil {
			t.Errorf("ledger via %s does not verify: %v", n.name, err)
		}
		type rk struct {
			task int64
			peer string
		}
		seen := map[rk]bool{}
		receipts := map[int64]int{}
		for _, e := range es {
			k := rk{e.Task, e.Peer}
			if seen[k] {
				t.Errorf("%s: task %d and peer %s appear twice in the ledger", n.name, e.Task, e.Peer)
			}
			seen[k] = true
			if e.Kind == pool.KindReceipt {
				receipts[e.Task]++
			}
		}
		for task := range int64(tasks) {
			if receipts[task] != 2 {
				t.Errorf("%s: task %d has %d receipts, want 2", n.name, task, receipts[task])
			}
		}
		heads = append(heads, es[len(es)-1].Hash())
	}
	if heads[0] != heads[1] || heads[1] != heads[2] {
		t.Errorf("the nodes answer different ledgers: heads %v", heads)
	}
}

// testJobWith writes a tiny program and a manifest of tasks tasks at
// quorum 2, with more [policy] lines, into a temporary directory and
// plans it.
func testJobWith(t *testing.T, name string, tasks int, policy string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	prog := append([]byte("\x00asm\x01\x00\x00\x00"), name...)
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), prog, 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf("name = %q\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = %d\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n[policy]\nredundancy = 2\nquorum = 2\n%s\n", name, tasks, policy)
	m, err := job.ParseManifest("test.toml", dir, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestClusterNodesAgreeOnVersions: node2 is in charge and was started
// without version rules; node1 joins with --min-agent-version 1.4.0 and
// --latest-agent-version 1.5.0. Every node then states those versions in
// GET /v1/pool and answers a device of 1.3.0 426 agent_too_old, whichever
// node it asks, while one of 1.4.0 registers. That registration is in
// the state stream: node1, a warm standby, applies it; node3, a
// cold one (NodeConfig.ColdStandby), applies nothing while not in charge.
// Every node's answers name node2 as the node in charge
// (InChargeHeader).
func TestClusterNodesAgreeOnVersions(t *testing.T) {
	nodes, _, serve, _ := startTestCluster(t)
	serve(1)
	waitUntil(t, patience(t), "node2 in charge", func() bool { n, ok := nodes[1].inCharge(t); return ok && n == "node2" })
	serve(0, Config{MinAgentVersion: "1.4.0", LatestAgentVersion: "1.5.0"})
	serve(2)
	for _, n := range nodes {
		var a answer
		waitUntil(t, patience(t), n.name+" stating the versions node1 was given", func() bool {
			var info PoolInfo
			a = n.do(t, nil, "GET", "/v1/pool", nil)
			return a.status == 200 && json.Unmarshal(a.body, &info) == nil && info.MinAgent == "1.4.0" && info.LatestAgent == "1.5.0"
		})
		// Every node's answer names the node in charge, node2 (which
		// answered it itself, the others through it).
		if got := a.header.Get(InChargeHeader); got != nodes[1].url {
			t.Errorf("%s: %s %q, want node2's URL %q", n.name, InChargeHeader, got, nodes[1].url)
		}
	}
	if n, ok := nodes[1].inCharge(t); !ok || n != "node2" {
		t.Fatalf("node in charge: %q, %v; want node2 still (started without versions)", n, ok)
	}
	register := func(n *testNode, v string) answer {
		t.Helper()
		p := newPeer(t, nil)
		body, err := json.Marshal(p.registration(""))
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequest("POST", n.url+"/v1/peers", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		SignRequest(req, body, p.key, time.Now())
		req.Header.Set(VersionHeader, v)
		req.Header.Set(APIHeader, strconv.Itoa(APIVersion))
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, body: b}
	}
	// A 503 (no node in charge for a moment, a commit that timed out, on
	// a busy machine) is a registration not taken: a new device tries
	// again, bounded by patience.
	registerTaken := func(n *testNode, v string) answer {
		t.Helper()
		var a answer
		waitUntil(t, patience(t), n.name+" to answer a registration of "+v, func() bool {
			if a = register(n, v); a.status == http.StatusServiceUnavailable {
				t.Logf("%s: a registration of %s: %d %s", n.name, v, a.status, a.body)
				time.Sleep(500 * time.Millisecond)
				return false
			}
			return true
		})
		return a
	}
	for _, n := range nodes {
		a := registerTaken(n, "1.3.0")
		var e ErrorBody
		if a.status != http.StatusUpgradeRequired || json.Unmarshal(a.body, &e) != nil || e.Code != CodeAgentTooOld || e.Error != "this pool needs idlepool 1.4 or newer" {
			t.Errorf("%s: a device of 1.3.0 got %d %s; want 426 agent_too_old", n.name, a.status, a.body)
		}
	}
	if a := registerTaken(nodes[2], "1.4.0"); a.status != http.StatusCreated {
		t.Errorf("node3: a device of 1.4.0 got %d %s; want 201", a.status, a.body)
	}
	// The registration was committed to the state stream. node1, a warm
	// standby, applies it while node2 is in charge; node3, a cold one,
	// applies nothing until it takes charge.
	var led float64
	waitUntil(t, patience(t), "node2's state to hold the registration", func() bool {
		v, ok := metricValue(t, nodes[1], "idlepool_cluster_state_applied")
		led = v
		return ok && v > 0
	})
	waitUntil(t, patience(t), "node1, a warm standby, to apply what node2 committed", func() bool {
		v, ok := metricValue(t, nodes[0], "idlepool_cluster_state_applied")
		return ok && v >= led
	})
	if terms, ok := metricValue(t, nodes[2], "idlepool_cluster_terms"); ok && terms == 0 {
		if v, ok := metricValue(t, nodes[2], "idlepool_cluster_state_applied"); !ok || v != 0 {
			t.Errorf("node3, a cold standby never in charge, applied the state up to %v (%v); want 0", v, ok)
		}
	}
}

// TestClusterCutHolds: a cut between the test cluster's nodes holds,
// though NATS tells nodes of each other's routes. node2 and node3 are cut
// apart before they start and node1 reaches both, so node1 may tell one
// of them of the other (route gossip) and that one connects where it was
// told, outside the proxies: with every node's routes on 127.0.0.1 it
// reached the other's route port, and the cut did not hold (in the
// partition test the node cut off then kept a route to the majority side
// and took the lease again). Here the gossiped address finds nothing.
//
// Whether node1 gossips depends on which side of each route dialled
// (nats-server forwards a new route's address only in some of those
// cases), so a run may see none: the test then checks that node2 and
// node3 stay apart for cutWatch after node1 reaches both, and says that
// no gossip came. It never waits for gossip longer than that.
func TestClusterCutHolds(t *testing.T) {
	t.Parallel() // a cluster: runs beside the package's other long tests
	nodes, _, _, own := startTestCluster(t, [2]int{1, 2})
	if !own {
		t.Skip("a cut between the nodes holds only where their routes listen on loopback addresses of their own (127.0.0.11-13): this system has only 127.0.0.1")
	}
	apart := func() {
		t.Helper()
		for _, p := range [][2]int{{1, 2}, {2, 1}} {
			if r := nodes[p[0]].routedTo(t); slices.Contains(r, nodes[p[1]].name) {
				t.Fatalf("the cut does not hold: %s is routed to %s (routes: %v)", nodes[p[0]].name, nodes[p[1]].name, r)
			}
		}
	}
	waitUntil(t, patience(t), "node1 to be routed to node2 and node3", func() bool {
		apart()
		return len(nodes[0].routedTo(t)) == 2
	})
	const cutWatch = 20 * time.Second
	gossiped := func() bool { return nodes[1].gossiped.Load() > 0 || nodes[2].gossiped.Load() > 0 }
	for end := time.Now().Add(cutWatch); !gossiped() && time.Now().Before(end); {
		apart()
		time.Sleep(50 * time.Millisecond)
	}
	apart()
	if !gossiped() {
		t.Logf("node1 told neither node2 nor node3 of the other within %s of reaching both; the cut held that long", cutWatch)
	}
	if r := nodes[0].routedTo(t); len(r) != 2 {
		t.Errorf("node1 is routed to %v, want node2 and node3", r)
	}
}

// freeAddr returns a 127.0.0.1 address whose port is free right now,
// never the same twice in this process, and outside the system's range
// of ephemeral ports: the NATS servers of the nodes bind their client
// ports to port 0, from that range, after the test chose its ports, and
// one once took a node's HTTP port before the node listened there (the
// test then talked HTTP to NATS until its deadline).
func freeAddr(t *testing.T) string {
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

// unservable holds, by test, why a node of its cluster could not serve
// (its HTTP port taken) or stopped serving by itself, for waitUntil.
var unservable sync.Map

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

// logLines keeps what a slog.JSONHandler writes, for a test to read.
type logLines struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// find returns the records logged with message msg, each as its JSON
// object.
func (l *logLines) find(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range bytes.Lines(l.b.Bytes()) {
		var r map[string]any
		if json.Unmarshal(line, &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestClusterNodeWaitsForANewBucket: the whole cluster restarts on a
// version that adds a bucket (the pool key's) to those an older version
// made, while node3 stays down. The new bucket cannot be placed on three
// nodes before node3 is back, so node1 waits and says for what; once
// node3 is back, node1 serves. ServeCluster once kept the first error of
// a part past the first one (the leader lease's buckets) for good: node1
// then waited forever with the cluster whole again, every try answered at
// once by the error of the first.
func TestClusterNodeWaitsForANewBucket(t *testing.T) {
	t.Parallel() // a cluster: runs beside the package's other long tests
	var specs []cluster.InitNode
	for i := range 3 {
		specs = append(specs, cluster.InitNode{Name: fmt.Sprintf("node%d", i+1), Listen: freeAddr(t), RouteListen: freeAddr(t)})
	}
	cfgs, err := cluster.Init(t.TempDir(), "test", 0, specs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	nodes := make([]*cluster.Node, 3)
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	// start starts the nodes which (a majority at least) together.
	start := func(which ...int) {
		t.Helper()
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for _, i := range which {
			wg.Go(func() { nodes[i], errs[i] = cluster.StartNode(ctx, cfgs[i], nil) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("start node%d: %v", i+1, err)
			}
		}
	}
	start(0, 1, 2)
	// The buckets of the older version, made while every node was up.
	js := nodes[0].JetStream()
	waitUntil(t, patience(t), "the older version's buckets", func() bool {
		_, err1 := cluster.NewLeadership(ctx, js, 3, 3*time.Second, cluster.SharedLeases, 1)
		_, err2 := cluster.OpenBlobs(ctx, js, 3)
		_, err3 := cluster.OpenProfiles(ctx, js, 3)
		for _, err := range []error{err1, err2, err3} {
			if err != nil && !errors.Is(err, pool.ErrStoreUnavailable) {
				t.Fatal(err)
			}
		}
		return err1 == nil && err2 == nil && err3 == nil
	})
	for i, n := range nodes {
		n.Close()
		nodes[i] = nil
	}
	// Restarted, node1 and node2 have not heard from node3: JetStream
	// places no new replica there until it has.
	start(0, 1)

	lines := &logLines{}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeCluster(sctx, nodes[0], Config{DataDir: "unused", Logger: slog.New(slog.NewJSONHandler(lines, nil))})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("node1: ServeCluster: %v", err)
		}
		if t.Failed() {
			lines.mu.Lock()
			t.Logf("node1's log:\n%s", lines.b.String())
			lines.mu.Unlock()
		}
	})
	const waiting = "Waiting for the cluster's JetStream"
	const needThree = "3 nodes up and routed to this one: the bucket is new and keeps a replica on each of 3 nodes"
	// Every wait that JetStream answered (it could not place the
	// bucket's replicas) says 3 nodes are needed. A try that JetStream
	// did not answer in time (a busy machine) cannot know why, and says
	// it needs a majority's answer: those are not held to it.
	waitUntil(t, patience(t), "node1 waiting for the pool key bucket, saying it needs 3 nodes up", func() bool {
		for _, r := range lines.find(waiting) {
			what, _ := r["waitingFor"].(string)
			need, _ := r["need"].(string)
			if strings.Contains(what, cluster.PoolKeyBucket) && need == needThree {
				return true
			}
		}
		return false
	})
	for _, r := range lines.find(waiting) {
		what, _ := r["waitingFor"].(string)
		need, _ := r["need"].(string)
		why, _ := r["err"].(string)
		if strings.Contains(what, cluster.PoolKeyBucket) && strings.Contains(why, "too few nodes up to place") && need != needThree {
			t.Errorf("node1 waits for %s and says it needs %q; want it to say it needs 3 nodes up", what, need)
		}
	}
	start(2)
	client := &http.Client{Timeout: 10 * time.Second}
	waitUntil(t, patience(t), "node1 serving once node3 is back", func() bool {
		resp, err := client.Get(cfgs[0].URL + "/v1/cluster")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if r := lines.find("Cluster node ready"); len(r) != 1 {
		t.Errorf("node1 said it was ready %d times, want once", len(r))
	}
}

// TestOpenAllWaitsLongerForASlowCluster: a node whose answers from
// JetStream take longer than a try's first timeout (a node starved of
// CPU) gets them on a later try, each try that ran out of time giving the
// next twice as long, and logs meanwhile what it waits for; an error
// that is not a lack of answer ends the wait at once.
func TestOpenAllWaitsLongerForASlowCluster(t *testing.T) {
	nc := cluster.NodeConfig{Name: "node1", Replicas: 3}
	synctest.Test(t, func(t *testing.T) {
		const answer = 5 * time.Second // how long JetStream takes to answer
		var tries []time.Duration
		open := func(ctx context.Context) (string, error) {
			deadline, _ := ctx.Deadline()
			tries = append(tries, time.Until(deadline))
			select {
			case <-time.After(answer):
				return "", nil
			case <-ctx.Done():
				return "the pool key bucket", fmt.Errorf("cluster: pool key bucket: %w: %w", pool.ErrStoreUnavailable, ctx.Err())
			}
		}
		lines := &logLines{}
		// A bound on the wait (in the bubble's time), should it never end.
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if err := openAll(ctx, slog.New(slog.NewJSONHandler(lines, nil)), nc, open); err != nil || ctx.Err() != nil {
			t.Fatalf("openAll: %v; after the wait's bound: %v", err, ctx.Err() != nil)
		}
		want := []time.Duration{firstTryTimeout, 2 * firstTryTimeout, 4 * firstTryTimeout}
		if !slices.Equal(tries, want) {
			t.Errorf("tries with timeouts %v, want %v", tries, want)
		}
		waits := lines.find("Waiting for the cluster's JetStream")
		if len(waits) != 2 {
			t.Fatalf("logged %d waits, want 2", len(waits))
		}
		if what := waits[0]["waitingFor"]; what != "the pool key bucket" {
			t.Errorf("waiting for %v, want the pool key bucket", what)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		err := openAll(context.Background(), slog.New(slog.DiscardHandler), nc, func(context.Context) (string, error) {
			tries++
			return "the pool key bucket", cluster.ErrPoolKey
		})
		if !errors.Is(err, cluster.ErrPoolKey) || tries != 1 {
			t.Errorf("openAll: %v after %d tries, want cluster.ErrPoolKey after 1", err, tries)
		}
	})
}
