package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/coord"
	"idlepool/identity"
)

// clusterPatience bounds each wait of the cluster test: a cluster that
// does not get there within it is broken, and the package's other tests
// keep their share of the deadline.
const clusterPatience = 4 * time.Minute

// clusterDeadline is the earlier of patient(t) and clusterPatience from
// now.
func clusterDeadline(t *testing.T) time.Time {
	d := time.Now().Add(clusterPatience)
	if p := patient(t); p.Before(d) {
		return p
	}
	return d
}

// freeAddrs returns n 127.0.0.1 addresses whose ports are free right now.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// testCluster is a pool of three `idlepool serve --cluster` processes.
type testCluster struct {
	t     *testing.T
	files []string // each node's cluster.toml
	urls  []string
	nodes []*daemon
}

// startCluster makes a three-node cluster with `idlepool cluster init`
// and starts its nodes. The ports freeAddrs found free can be taken by
// another listener before a node binds its own (a node's internal
// listener on an ephemeral port once took another node's, which then
// exited while the others answered its URL): a cluster whose nodes do
// not each answer as themselves is stopped and made again on new
// ports, three times at most.
func startCluster(t *testing.T) *testCluster {
	t.Helper()
	for try := 1; ; try++ {
		c := startClusterOnce(t)
		if c.eachAnswers() {
			return c
		}
		for _, d := range c.nodes {
			d.kill()
		}
		if try == 3 {
			t.Fatal("three clusters in a row had a node that did not answer as itself")
		}
		t.Logf("a node of the cluster did not answer as itself (its port was taken?): making the cluster again on new ports")
	}
}

// eachAnswers reports whether every node runs and answers GET /v1/cluster
// at its own URL as itself, waiting (bounded) while one starts.
func (c *testCluster) eachAnswers() bool {
	c.t.Helper()
	deadline := clusterDeadline(c.t)
	for i, d := range c.nodes {
		want := fmt.Sprintf("node%d", i+1)
		// A node says it serves only once its port listens: a script
		// that waits for the line and then joins must not be refused.
		if !c.saysServing(i, deadline) {
			return false
		}
		if _, err := c.state(i); errors.Is(err, syscall.ECONNREFUSED) {
			c.t.Fatalf("%s said it serves at %s, and refused a connection: %v", want, c.urls[i], err)
		}
		for {
			select {
			case <-d.done:
				return false
			default:
			}
			if st, err := c.state(i); err == nil && st.Node == want {
				break
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Millisecond) // polling a condition
		}
	}
	return true
}

func startClusterOnce(t *testing.T) *testCluster {
	t.Helper()
	addrs := freeAddrs(t, 6)
	dir := t.TempDir()
	args := []string{"cluster", "init", dir, "--pool", "lab-c"}
	c := &testCluster{t: t}
	for i := range 3 {
		args = append(args, "--node", fmt.Sprintf("node%d,%s,%s", i+1, addrs[2*i], addrs[2*i+1]))
		c.files = append(c.files, filepath.Join(dir, fmt.Sprintf("node%d", i+1), "cluster.toml"))
		c.urls = append(c.urls, "http://"+addrs[2*i])
	}
	if out := idlepool(t, t.TempDir(), args...); out.code != 0 {
		t.Fatalf("cluster init: exit %d\n%s", out.code, out.stderr)
	}
	c.nodes = make([]*daemon, 3)
	for i := range 3 {
		c.start(i)
	}
	for i := range 3 {
		c.waitHealthy(i)
	}
	return c
}

// url is the comma-separated list of the nodes' URLs that clients take.
func (c *testCluster) url() string { return strings.Join(c.urls, ",") }

func (c *testCluster) start(i int) {
	c.nodes[i] = startDaemon(c.t, fmt.Sprintf("node%d", i+1), c.t.TempDir(), "serve", "--cluster", c.files[i])
}

// waitHealthy waits until node i answers /healthz with 200 (it forwards to
// a node in charge).
func (c *testCluster) waitHealthy(i int) {
	c.t.Helper()
	deadline := clusterDeadline(c.t)
	for {
		resp, err := http.Get(c.urls[i] + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node%d not healthy: %v", i+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// saysServing waits until node i prints that it serves at its URL, and
// reports whether it did before it exited or deadline passed.
func (c *testCluster) saysServing(i int, deadline time.Time) bool {
	line := fmt.Sprintf("idlepool: pool lab-c node node%d serving at %s\n", i+1, c.urls[i])
	return c.nodes[i].awaitStdout(deadline, func(b []byte) bool { return bytes.Contains(b, []byte(line)) })
}

// state reads GET /v1/cluster from node i.
func (c *testCluster) state(i int) (coord.ClusterState, error) {
	var st coord.ClusterState
	resp, err := http.Get(c.urls[i] + "/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// leader returns the index of the node in charge, as a live node says,
// waiting for one.
func (c *testCluster) leader(skip int) int {
	c.t.Helper()
	deadline := clusterDeadline(c.t)
	for {
		for i := range c.nodes {
			if i == skip {
				continue
			}
			st, err := c.state(i)
			if err == nil && st.LeaderKnown && st.Leader.Internal != "" {
				for j, f := range c.files {
					if strings.Contains(f, st.Leader.Node+string(filepath.Separator)) {
						return j
					}
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatal("no node in charge")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterSurvivesNodeLoss: a job of 2,000 tasks (make check-cluster
// runs it, with IDLEPOOL_FULL_CLUSTER=1) on a three-node cluster, with four agents of three
// owners: the node in charge is killed with SIGKILL mid-run (after 15% of
// the tasks were decided), then, after it came back and another 20% were
// decided, the next node in charge. The job finishes, its result is
// byte-identical to run --json, the ledger verifies from every node, and
// no (job, task, peer) has two entries.
func TestClusterSurvivesNodeLoss(t *testing.T) {
	// Out of make test: over a minute alone, several beside other tests;
	// make check-cluster runs it. (Beside other tests a node once waited
	// for good for its buckets at the cluster's start, four minutes of
	// "pool key bucket: store unavailable": ServeCluster kept the first
	// error of a part for good; coord's TestClusterNodeWaitsForANewBucket
	// covers it.)
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("a three-node cluster losing its node in charge twice during a job: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	const tasks = int64(2000)
	m := writeManifest(t, "pi", piManifest(int(tasks), 2000)+"lease_timeout = \"5s\"\n")
	r, want := runJSON(t, t.TempDir(), m)
	c := startCluster(t)
	url := c.url()

	shared := filepath.Join(t.TempDir(), "owner.key")
	if _, err := identity.LoadOrCreate(shared); err != nil {
		t.Fatal(err)
	}
	var homes []string
	for i := range 4 {
		home := filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		homes = append(homes, home)
		var extra []string
		if i >= 2 {
			extra = []string{"--owner-key", shared}
		}
		startJoin(t, home, url, extra...)
	}
	subHome := t.TempDir()
	sub := startDaemon(t, "submit", subHome, "submit", m, "--pool", url, "--follow", "--json")

	jobID := ""
	decided := func() int64 {
		if jobID == "" {
			matches, _ := filepath.Glob(filepath.Join(subHome, "data", "merges", "*"))
			if len(matches) != 1 {
				return 0
			}
			jobID = filepath.Base(matches[0])
		}
		out := idlepool(t, subHome, "status", jobID, "--pool", url, "--json")
		var st struct{ Accepted, Failed int64 }
		if out.code != 0 || json.Unmarshal([]byte(out.stdout), &st) != nil {
			return -1
		}
		return st.Accepted + st.Failed
	}
	waitFor := func(what string, n int64) time.Duration {
		t.Helper()
		start := time.Now()
		deadline := clusterDeadline(t)
		for {
			if d := decided(); d >= n {
				t.Logf("%s: %d tasks decided after %s", what, d, time.Since(start).Round(10*time.Millisecond))
				return time.Since(start)
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: want %d tasks decided", what, n)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	waitFor("the first kill", tasks*15/100)
	first := c.leader(-1)
	before := decided()
	c.nodes[first].kill()
	t.Logf("killed node%d (in charge) with SIGKILL at %d tasks decided", first+1, before)
	waitFor("leases flowing again after the first kill", before+20)
	c.start(first)
	c.waitHealthy(first)

	waitFor("the second kill", before+tasks/5)
	second := c.leader(-1)
	before = decided()
	c.nodes[second].kill()
	t.Logf("killed node%d (in charge) with SIGKILL at %d tasks decided", second+1, before)
	waitFor("leases flowing again after the second kill", before+20)
	c.start(second)

	select {
	case <-sub.done:
	case <-time.After(time.Until(clusterDeadline(t))):
		t.Fatal("submit --follow did not finish")
	}
	out, _ := os.ReadFile(sub.stdout)
	if code := sub.cmd.ProcessState.ExitCode(); code != 0 {
		errb, _ := os.ReadFile(sub.stderr)
		t.Fatalf("submit --follow: exit %d\n%s", code, errb)
	}
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Fatalf("submit --follow --json on the cluster differs from run --json (-run +submit):\n%s", diff)
	}
	c.waitHealthy(second)
	for i, u := range c.urls {
		// Every node answers the same ledger.
		checkLedgerAndHistories(t, u, map[string]int64{r.Job: tasks}, 2, homes)
		t.Logf("node%d: ledger verified", i+1)
	}
}
