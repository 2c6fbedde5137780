package cluster

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// nodeConfigEnv carries a node's config, in JSON, to the test binary run
// as that node (TestNodeProcess).
const nodeConfigEnv = "IDLEPOOL_TEST_NODE_CONFIG"

// TestNodeProcess is not a test: run by startNodeProcess as a
// subprocess of the test binary, it starts the node whose config is in
// nodeConfigEnv and runs until it is killed or its parent dies.
func TestNodeProcess(t *testing.T) {
	raw := os.Getenv(nodeConfigEnv)
	if raw == "" {
		t.Skip("runs only as a node's process (startNodeProcess)")
	}
	var cfg NodeConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	n, err := StartNode(ctx, cfg, testLogger())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	select {} // until SIGKILL, or the parent's death (Pdeathsig)
}

// startNodeProcess runs the node of cfg in a process of its own, so that
// the test can kill it with SIGKILL, as a machine that dies: no stream
// leader it holds steps down first. The process ends with the test.
func startNodeProcess(t *testing.T, cfg NodeConfig) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNodeProcess$")
	cmd.Env = append(os.Environ(), nodeConfigEnv+"="+string(raw))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// placeBucket creates the key-value bucket name kept by the server named
// server alone: made with three replicas, led from server (JetStream's
// leader stepdown with server preferred), then cut to the one replica
// that leads.
func placeBucket(t *testing.T, js jetstream.JetStream, name, server string, ttl time.Duration) {
	t.Helper()
	patience(t, 2*time.Minute, "create "+name, func() bool {
		_, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: name, History: 1, TTL: ttl, Replicas: 3, Storage: jetstream.FileStorage})
		return err == nil
	})
	stream := "KV_" + name
	leader := func() (string, *jetstream.StreamInfo) {
		st, err := js.Stream(t.Context(), stream)
		if err != nil || st.CachedInfo().Cluster == nil {
			return "", nil
		}
		return st.CachedInfo().Cluster.Leader, st.CachedInfo()
	}
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	patience(t, 2*time.Minute, name+" led from "+server, func() bool {
		if l, _ := leader(); l == server {
			return true
		}
		_, _ = js.Conn().Request(jetstream.DefaultAPIPrefix+"STREAM.LEADER.STEPDOWN."+stream, body, time.Second)
		l, _ := leader()
		return l == server
	})
	_, info := leader()
	cfg := info.Config
	cfg.Replicas = 1
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatalf("%s to one replica: %v", name, err)
	}
	patience(t, 2*time.Minute, name+" kept by "+server+" alone", func() bool {
		l, info := leader()
		return l == server && info != nil && len(info.Cluster.Replicas) == 0
	})
}

// With a lease bucket per shard, a node's death stalls only the leases
// whose buckets it held: shard 1's bucket is kept by the killed node
// alone (one replica, so it never comes back), shard 0's by another
// node, and shard 0's term goes on renewing its lease while no write to
// shard 1's bucket lands. With the one shared bucket, kept by the
// killed node, no lease could be renewed again, and the renewal awaited
// here never comes (the test then fails when its patience runs out).
// The lease is a minute long, so no term ends by its clock on a loaded
// machine, and no verdict depends on how fast anything is.
func TestShardLeaseOutlivesANodesKill(t *testing.T) {
	t.Parallel()
	cfgs := testConfigs(t, t.TempDir(), 3)
	// node3 in a process of its own; the test's two nodes start beside it
	// (a cluster's JetStream needs a majority up).
	proc := startNodeProcess(t, cfgs[2])
	nodes := startNodes(t, cfgs[:2])
	const ttl = time.Minute
	sh0, sh1 := Shard{Index: 0, Count: 2}, Shard{Index: 1, Count: 2}
	js := nodes[0].JetStream()
	placeBucket(t, js, sh0.LeaseBucket(), "node1", ttl)
	placeBucket(t, js, sh1.LeaseBucket(), "node3", ttl)
	l := newLeadership(t, nodes[0], 3, ttl, ShardLeases, 2) // binds the two buckets as they are
	term, err := l.TryLeadShard(t.Context(), 0, LeaderInfo{Node: "node1"})
	if err != nil || term == nil {
		t.Fatalf("TryLeadShard(0): %v, %v", term, err)
	}
	defer term.Resign()
	revision := func() uint64 {
		e, err := term.kv.Get(t.Context(), sh0.LeaderKey())
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	// shard1Stalled says whether a write to shard 1's bucket goes
	// unanswered.
	shard1Stalled := func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := l.kvs[1].Put(ctx, "probe", []byte("x"))
		return err != nil
	}
	patience(t, 2*time.Minute, "shard 1's bucket to take a write before any node died", func() bool { return !shard1Stalled() })
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = proc.Wait()
	patience(t, time.Minute, "shard 1's bucket to stall after node3's kill", shard1Stalled)
	before := revision()
	term.Publish("renew") // renews at once
	patience(t, 2*time.Minute, "shard 0's term to renew its lease with shard 1's bucket gone", func() bool { return revision() > before })
	if !shard1Stalled() {
		t.Fatal("shard 1's bucket, whose one replica was killed, took a write")
	}
	select {
	case <-term.Lost():
		t.Fatalf("shard 0's term ended: %v", term.Err())
	default:
	}
}
