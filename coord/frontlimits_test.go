package coord

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/cluster"
	"idlepool/identity"
)

// metricValue reads one sample of name from node n's /metrics; ok is
// false when it is absent.
func metricValue(t *testing.T, n *testNode, name string) (float64, bool) {
	t.Helper()
	resp, err := n.client.Get(n.url + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// A node that is not in charge applies its own limits on its public
// port, as the coordinator in charge does on its own: a body larger than
// the route takes is refused there (413, never forwarded), and at its
// connection limit idle connections are closed to make room. A third node
// whose pool key is not the one the first node recorded refuses to
// start, naming both keys.
func TestClusterNodeLimitsAndPoolKey(t *testing.T) {
	t.Parallel() // a cluster: runs beside the package's other long tests
	dir := t.TempDir()
	// Ports from outside the ephemeral range (freeAddr): one taken from
	// it and freed here was once taken again, by another test's
	// connection, before the node bound it, and the test waited for a
	// node in charge until its deadline.
	var specs []cluster.InitNode
	for i := range 3 {
		specs = append(specs, cluster.InitNode{Name: fmt.Sprintf("node%d", i+1), Listen: freeAddr(t), RouteListen: freeAddr(t)})
	}
	cfgs, err := cluster.Init(dir, "test", 0, specs)
	if err != nil {
		t.Fatal(err)
	}
	// node3 holds another key than the one Init gave every node.
	other := filepath.Join(cfgs[2].DataDir, cluster.PoolKeyFile)
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.LoadOrCreate(other); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
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
		t.Cleanup(func() { nodes[i].Close() })
	}
	tns := make([]*testNode, 3)
	serve := func(i int, base Config) <-chan error {
		tr := &http.Transport{}
		tns[i] = &testNode{name: cfgs[i].Name, url: cfgs[i].URL, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
		sctx, stop := context.WithCancel(context.Background())
		done, finished := make(chan error, 1), make(chan struct{})
		go func() {
			done <- ServeCluster(sctx, nodes[i], base)
			close(finished)
		}()
		t.Cleanup(func() {
			stop()
			<-finished
			tr.CloseIdleConnections()
		})
		return done
	}
	serve(0, Config{DataDir: "unused", Logger: testLogger()})
	waitUntil(t, patience(t), "node1 in charge", func() bool { n, ok := tns[0].inCharge(t); return ok && n == "node1" })

	// A result of 2 MiB to node1, in charge with its default limits: taken
	// in, and refused only as unsigned. Asked while node1 is the only node
	// that serves, so no other node can take charge; on a busy machine its
	// lease may still lapse for a moment (503 no_leader): then it is asked
	// again once it leads again (doLed).
	if a := tns[0].doLed(t, nil, "POST", "/v1/leases/nolease/result", make([]byte, 2<<20)); a.status != http.StatusUnauthorized {
		t.Errorf("a result of 2 MiB via node1, in charge, with its default limits: %d %s, want 401", a.status, a.body)
	}
	const maxConns = 3
	serve(1, Config{DataDir: "unused", Logger: testLogger(), MaxConns: maxConns, MaxBodyMemory: maxJSONBody})
	waitUntil(t, patience(t), "node2 forwarding", func() bool { _, ok := tns[1].inCharge(t); return ok })

	// A result of 2 MiB where node2 holds at most 1 MiB in memory: node2
	// refuses it itself (node1 took it above, and asked who sent it).
	a := tns[1].do(t, nil, "POST", "/v1/leases/nolease/result", make([]byte, 2<<20))
	var body ErrorBody
	if json.Unmarshal(a.body, &body); a.status != http.StatusRequestEntityTooLarge || body.Code != "too_large" {
		t.Errorf("2 MiB result via node2: %d %s, want 413 too_large", a.status, a.body)
	}

	// Idle connections past node2's limit: the oldest is closed.
	tns[1].client.Transport.(*http.Transport).CloseIdleConnections()
	var idle []net.Conn
	for range maxConns + 1 {
		c, err := net.Dial("tcp", strings.TrimPrefix(tns[1].url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
		time.Sleep(10 * time.Millisecond) // accepted in order, so the first is the oldest
	}
	idle[0].SetReadDeadline(time.Now().Add(patience(t)))
	if n, err := idle[0].Read(make([]byte, 1)); err == nil {
		t.Fatalf("the oldest idle connection read %d bytes, want it closed", n)
	}
	waitUntil(t, patience(t), "node2 counting shed connections", func() bool {
		v, ok := metricValue(t, tns[1], "idlepool_cluster_connections_shed_total")
		return ok && v >= 1
	})

	// node3, with another key, refuses to start.
	select {
	case err := <-serve(2, Config{DataDir: "unused", Logger: testLogger()}):
		if !errors.Is(err, cluster.ErrPoolKey) {
			t.Fatalf("node3 with another pool key: ServeCluster = %v, want ErrPoolKey", err)
		}
		k, _ := identity.Load(other)
		if !strings.Contains(err.Error(), identity.EncodePublic(k.Public())) {
			t.Errorf("the error does not name node3's key: %v", err)
		}
	case <-time.After(patience(t)):
		t.Fatal("node3 with another pool key kept serving")
	}
}
