package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/cluster"
	"idlepool/coord"
	"idlepool/identity"
	"idlepool/pool"
)

// freeLoopback returns n distinct free TCP addresses on 127.0.0.1 (each
// listened on and closed; another process may take one meanwhile, which
// the test then reports as a failed listen).
func freeLoopback(t *testing.T, n int) []string {
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

// startDividedCluster starts a cluster of three nodes on 127.0.0.1 whose
// pool's work is divided into k shards (cluster.Init with k, each node's
// coord.ServeCluster), and waits until every node's /healthz says every
// shard has a node in charge. It returns the nodes' URLs, comma-separated
// as clients take them, the pool's public key, and a function that stops
// node i (its ServeCluster, then its NATS server), as a node's machine
// going away would.
func startDividedCluster(t *testing.T, k int) (string, []byte, func(i int)) {
	t.Helper()
	addrs := freeLoopback(t, 6)
	var specs []cluster.InitNode
	for i := range 3 {
		specs = append(specs, cluster.InitNode{Name: fmt.Sprintf("node%d", i+1), Listen: addrs[2*i], RouteListen: addrs[2*i+1]})
	}
	cfgs, err := cluster.Init(t.TempDir(), "test", k, specs)
	if err != nil {
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
	}
	var urls []string
	stops := make([]func(), 3)
	for i := range 3 {
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- coord.ServeCluster(sctx, nodes[i], coord.Config{DataDir: "unused", Logger: quietLogger(t).With("side", "node", "node", i+1),
				Cluster: &coord.ClusterHooks{ExchangeEvery: testExchangeEvery}})
		}()
		stops[i] = sync.OnceFunc(func() {
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("node%d: %v", i+1, err)
				}
			case <-time.After(patience(t)):
				t.Errorf("node%d did not stop", i+1)
			}
			nodes[i].Close()
		})
		t.Cleanup(stops[i])
		urls = append(urls, cfgs[i].URL)
	}
	// The first node to start leads every shard until the others are
	// live, then hands shards over (cluster.Leadership.Campaign): the
	// test starts once the shards are spread, each node seeing every
	// shard led by a node that leads no more than its share.
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(patience(t))
	for _, u := range urls {
		for !spread(hc, u, k, len(urls)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the %d shards not spread over the %d nodes within %s", u, k, len(urls), patience(t))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	key, err := identity.Load(filepath.Join(cfgs[0].DataDir, cluster.PoolKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(urls, ","), key.Public(), func(i int) { stops[i]() }
}

// spread reports whether node u says that each of k shards has a node in
// charge that answers, and that no node leads more than its share of
// them among nodes.
func spread(hc *http.Client, u string, k, nodes int) bool {
	resp, err := hc.Get(u + "/v1/cluster")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st coord.ClusterState
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Shards) != k {
		return false
	}
	by := map[string]int{}
	for _, sh := range st.Shards {
		if !sh.LeaderKnown || sh.Leader.Internal == "" {
			return false
		}
		by[sh.Leader.Node]++
	}
	for _, n := range by {
		if n > cluster.FairShare(k, nodes) {
			return false
		}
	}
	return true
}

// testExchangeEvery is how often the test clusters' shards anchor one
// another's ledgers (coord.ClusterHooks.ExchangeEvery).
const testExchangeEvery = 100 * time.Millisecond

// A pool divided into three shards on three nodes, each node in charge
// of one: agents join through the nodes' URLs, jobs spread over the
// shards, and every job finishes with the result it has solo; every
// shard's ledger verifies with the pool's key, each anchors the heads of
// the others that have work (agent.VerifyShardLedgers), and each
// device's history agrees with the three ledgers together.
func TestDividedClusterMatchesSolo(t *testing.T) {
	const k = 3
	url, poolKey, _ := startDividedCluster(t, k)
	_, onShard, devs, sub := spreadJobsMatchSolo(t, url, k, "divided")
	busy := 0
	for _, on := range onShard {
		if on {
			busy++
		}
	}
	// The shards anchor one another's heads every testExchangeEvery: wait
	// until each busy shard's ledger names the final head of every other
	// busy shard, the ledgers then being still.
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	var sl *agent.ShardLedgers
	for {
		var err error
		sl, err = agent.VerifyShardLedgers(ctx, sub.c, k, poolKey)
		if err != nil {
			t.Fatalf("VerifyShardLedgers: %v", err)
		}
		if tiedToHeads(sl, onShard) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the shards' ledgers were not anchored to one another's heads within %s: %d anchors by shard", patience(t), sl.Anchors)
		}
		time.Sleep(testExchangeEvery)
	}
	var all []pool.Entry
	for s, es := range sl.Chains {
		if (len(es) > 0) != onShard[s] {
			t.Errorf("shard %d: %d ledger entries, jobs on it: %v", s, len(es), onShard[s])
		}
		if onShard[s] && sl.Anchors[s] < busy-1 {
			t.Errorf("shard %d: %d anchors, want at least one of each of the %d other busy shards", s, sl.Anchors[s], busy-1)
		}
		all = append(all, es...)
	}
	settle(t, devs...)
	for _, d := range devs {
		checkHistory(t, d, all)
	}
}

// tiedToHeads reports whether, in sl, each shard with work (onShard)
// holds an anchor of the newest entry other than an anchor of every
// other shard with work.
func tiedToHeads(sl *agent.ShardLedgers, onShard map[int]bool) bool {
	for s, es := range sl.Chains {
		if !onShard[s] {
			continue
		}
		named := map[int]uint64{} // the newest entry s anchors of each shard
		for _, e := range es {
			if e.Kind == pool.KindAnchor {
				named[int(e.Task)] = max(named[int(e.Task)], e.Work)
			}
		}
		for o, other := range sl.Chains {
			if o == s || !onShard[o] {
				continue
			}
			var head uint64
			for i := len(other) - 1; i >= 0; i-- {
				if other[i].Kind != pool.KindAnchor {
					head = other[i].Seq
					break
				}
			}
			if named[o] < head {
				return false
			}
		}
	}
	return true
}

// leaderOf returns the name of the node in charge of shard s as node u
// sees it, "" when none is or u does not answer.
func leaderOf(hc *http.Client, u string, s int) string {
	resp, err := hc.Get(u + "/v1/cluster")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st coord.ClusterState
	if json.NewDecoder(resp.Body).Decode(&st) != nil || s >= len(st.Shards) || !st.Shards[s].LeaderKnown || st.Shards[s].Leader.Internal == "" {
		return ""
	}
	return st.Shards[s].Leader.Node
}

// TestDividedClusterSurvivesNodeLoss: a job on a pool divided into three
// shards on three nodes; the node in charge of its shard stops once a
// fifth of its tasks are decided. Another node takes the shard over
// (the stopping node withdraws from the live nodes: Retire), the
// agents go on through the nodes left, and the job ends with its solo
// result; the shard's ledger verifies. Out of make test (about a minute
// with its waits): make check-cluster runs it.
func TestDividedClusterSurvivesNodeLoss(t *testing.T) {
	if os.Getenv("IDLEPOOL_FULL_CLUSTER") == "" {
		t.Skip("a divided cluster losing the node in charge of a job's shard: make check-cluster (IDLEPOOL_FULL_CLUSTER=1)")
	}
	const k, tasks = 3, 400
	url, poolKey, stop := startDividedCluster(t, k)
	urls := strings.Split(url, ",")
	exec := &fakeExec{Delay: 5 * time.Millisecond}
	j := planJob(t, "divided-loss", tasks, "lease_timeout = \"5s\"\n")
	for range 3 {
		startAgent(t, url, newDevice(t, nil), exec, 2, nil)
	}
	sub := newSubmitter(t, url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience(t))
	defer cancel()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	shard, ok := jobShards(t, urls[0])[j.ID.String()] // the one its router chose
	if !ok {
		t.Fatal("the job is not on the pool's page")
	}
	var got *pool.Outcome
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, ferr = agent.Follow(ctx, sub.c, j, agent.FollowConfig{
			Dir: filepath.Join(sub.dev.dirs.Data, "merges", j.ID.String()), Poll: 20 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, Logger: quietLogger(t).With("side", "merger"),
		})
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		st, err := sub.c.Status(ctx, j.ID)
		if err == nil && st.Accepted+st.Failed >= tasks/5 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no fifth of the tasks decided")
		}
		time.Sleep(20 * time.Millisecond)
	}
	leader := leaderOf(hc, urls[0], shard)
	if leader == "" {
		t.Fatalf("no node in charge of shard %d", shard)
	}
	var i int
	fmt.Sscanf(leader, "node%d", &i)
	start := time.Now()
	stop(i - 1)
	t.Logf("stopped %s, in charge of shard %d", leader, shard)
	other := urls[i%3]
	for {
		if l := leaderOf(hc, other, shard); l != "" && l != leader {
			t.Logf("%s in charge of shard %d %s after the stop", l, shard, time.Since(start).Round(100*time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no node took shard %d over", shard)
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-done
	if ferr != nil {
		t.Fatal(ferr)
	}
	same(t, got, solo(t, j, exec))
	if err := pool.VerifyLedger(shardLedgerAt(t, other, shard), poolKey); err != nil {
		t.Errorf("ledger of shard %d: %v", shard, err)
	}
}

// shardLedgerAt downloads shard s's whole ledger from node u alone.
func shardLedgerAt(t *testing.T, u string, s int) []pool.Entry {
	t.Helper()
	c := newSubmitter(t, u, nil).c
	return shardLedger(t, c, s)
}
