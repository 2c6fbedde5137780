package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/castore"
	"idlepool/home"
	"idlepool/job"
	"idlepool/pool"
)

// peersInputMB is the size of the input TestJoinSpreadsInputsPeerToPeer
// spreads: 8 MB, two tasks and a short third (each computed twice), which
// leaves replicas for the agents that join after the first;
// IDLEPOOL_P2P_INPUT_MB changes it (`make bench-p2p` uses 200).
func peersInputMB(t *testing.T) int {
	if v := os.Getenv("IDLEPOOL_P2P_INPUT_MB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("IDLEPOOL_P2P_INPUT_MB=%q: want a whole number of MB", v)
		}
		return n
	}
	return 8
}

// holdsFile reports whether the job cache of the device in dir holds
// the whole file of manifest m.
func holdsFile(t *testing.T, dir string, m castore.Manifest) bool {
	dirs, err := home.Resolve(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(agent.JobCache(dirs), "blobs", job.Digest(m.SHA256).String()))
	return err == nil && fi.Size() == m.Size
}

// agentPeers reads the peer-to-peer state of the donor running in home
// from `idlepool status --json`; nil when it reports none.
func agentPeers(t *testing.T, home string) *agent.PeerStatus {
	t.Helper()
	out := idlepool(t, home, "status", "--json")
	if out.code != 0 {
		t.Fatalf("status --json: exit %d\n%s", out.code, out.stderr)
	}
	var doc struct {
		Agent *agent.AgentStatus `json:"agent"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.stdout)
	}
	if doc.Agent == nil || len(doc.Agent.Pools) == 0 {
		return nil
	}
	return doc.Agent.Pools[0].Peers
}

// writeCSV writes a CSV file of three numeric columns of at least size
// bytes and returns its path and chunk manifest.
func writeCSV(t *testing.T, size int) (string, castore.Manifest) {
	t.Helper()
	var csv strings.Builder
	csv.Grow(size + 64)
	csv.WriteString("a,b,c\n")
	for i := 0; csv.Len() < size; i++ {
		fmt.Fprintf(&csv, "%d,%d.5,%d\n", i, i%1000, i%97)
	}
	dataPath := filepath.Join(t.TempDir(), "data.csv")
	if err := os.WriteFile(dataPath, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	return dataPath, m
}

// TestJoinSpreadsInputsPeerToPeer is the data plane end to end, with real
// processes: csvstats over a large input (8 MB here; 200 MB with
// `make bench-p2p`) with redundancy 2 on four `idlepool join` agents of
// four owners. The first agent fetches the input from the coordinator
// (its first copy); the three that join later get it from the devices
// that hold it, over WebRTC data channels on loopback. The coordinator
// serves at most 1% of the input's bytes after the first copy, every
// later agent fetched at least 99% of its chunk bytes from peers (its
// status), and the result equals `run --json` byte for byte.
// peersAgents is how many agents TestJoinSpreadsInputsPeerToPeer runs: 4,
// or IDLEPOOL_P2P_AGENTS (`make bench-p2p P2P_AGENTS=16`).
func peersAgents(t *testing.T) int {
	if v := os.Getenv("IDLEPOOL_P2P_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > 64 {
			t.Fatalf("IDLEPOOL_P2P_AGENTS=%q: want 2 to 64 agents", v)
		}
		return n
	}
	return 4
}

func TestJoinSpreadsInputsPeerToPeer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("moves tens of MB between four agents")
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	dataPath, data := writeCSV(t, peersInputMB(t)<<20)
	input := float64(data.Size)
	text := strings.Replace(exampleManifest(t, "csvstats"), `data = "data.csv"`, `data = "`+dataPath+`"`, 1)
	// A task per 4 MiB of records; each task twice, by two owners.
	text = strings.Replace(text, "chunk_bytes = 1048576", "chunk_bytes = 4194304", 1)
	text = strings.Replace(text, "[policy]\n", "[policy]\nredundancy = 2\nquorum = 2\n", 1)
	m := writeManifest(t, "csvstats", text)
	_, want := runJSON(t, t.TempDir(), m)

	homes := make([]string, peersAgents(t))
	for i := range homes {
		homes[i] = filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
	}
	// IDLEPOOL_P2P_COORDINATOR_ONLY=1 measures the same job with every
	// device set to share_peers=false: the figure to compare with.
	coordOnly := os.Getenv("IDLEPOOL_P2P_COORDINATOR_ONLY") == "1"
	subHome := t.TempDir()
	// Otherwise every device sends at full speed: the figures measure
	// the data plane, not the donors' default upload cap (1 MiB/s).
	setting := "share_upload=unlimited"
	if coordOnly {
		setting = "share_peers=false"
	}
	for _, h := range append([]string{subHome}, homes...) {
		if out := idlepool(t, h, "settings", "set", setting); out.code != 0 {
			t.Fatalf("settings set %s: exit %d\n%s", setting, out.code, out.stderr)
		}
	}
	startJoin(t, homes[0], url)
	done := make(chan runOut, 1)
	go func() { done <- idlepool(t, subHome, "submit", m, "--pool", url, "--follow", "--json") }()

	// The first agent alone computes at first: it gets the job's files
	// from the submitter, which offers them while it follows the job, or
	// with sharing off from the coordinator.
	deadline := patient(t)
	for !holdsFile(t, homes[0], data) {
		if time.Now().After(deadline) {
			t.Fatal("the first agent never fetched the input")
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
	for !coordOnly && metricValue(t, url, "idlepool_coord_tracker_chunks") < float64(len(data.Chunks)) {
		if time.Now().After(deadline) {
			t.Fatalf("the first agent never announced the input's %d chunks", len(data.Chunks))
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
	first := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input_chunk"}`)
	if coordOnly && first < input {
		t.Fatalf("the coordinator served %v input bytes for the first copy, want the input's %v", first, input)
	}
	started := time.Now()
	for _, h := range homes[1:] {
		startJoin(t, h, url)
	}
	// Spread: until each later agent holds the input (or the job ended:
	// one that leased no task never fetches it).
	var out runOut
	spread, holders := time.Duration(0), 0
	for out.stdout == "" && out.code == 0 && holders < len(homes)-1 {
		select {
		case out = <-done:
		case <-time.After(20 * time.Millisecond): // polling a condition
		}
		holders = 0
		for _, h := range homes[1:] {
			if holdsFile(t, h, data) {
				holders++
			}
		}
		spread = time.Since(started)
	}
	t.Logf("the input reached %d more agents (%d holders) %v after they joined (coordinator only: %t)",
		holders, holders+1, spread.Round(time.Millisecond), coordOnly)
	if out.stdout == "" && out.code == 0 {
		out = <-done
	}
	if out.code != 0 {
		t.Fatalf("submit --follow: exit %d\n%s", out.code, out.stderr)
	}
	t.Logf("the job finished %v after the other %d agents joined", time.Since(started).Round(time.Millisecond), len(homes)-1)
	if diff := cmp.Diff(want, out.stdout); diff != "" {
		t.Fatalf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}
	after := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input_chunk"}`) - first
	whole := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input"}`)
	t.Logf("input %.1f MB; the coordinator served %.0f bytes to the first agent and %.0f (%.3f%% of the input) after it",
		input/1e6, first, after, 100*after/input)
	if coordOnly {
		return // the figures above; nothing travelled between devices
	}
	if first+after > input/100 || whole != 0 {
		t.Errorf("after the submitter's upload the coordinator served %v input bytes in chunks and %v whole; want at most 1%% of %v and none whole", first+after, whole, input)
	}
	fetched := 0
	for _, h := range homes {
		ps := agentPeers(t, h)
		if ps == nil {
			t.Fatalf("agent %s reports no peer-to-peer data plane", filepath.Base(h))
		}
		t.Logf("%s: %s", filepath.Base(h), ps.Words())
		total := ps.FromPeersBytes + ps.FromCoordinatorBytes
		if total == 0 {
			continue // it leased no task
		}
		fetched++
		if float64(ps.FromPeersBytes) < 0.99*float64(total) || float64(ps.FromPeersBytes) < input {
			t.Errorf("agent %s fetched %d bytes from peers and %d from the coordinator; want the input's %v, at least 99%% from peers",
				filepath.Base(h), ps.FromPeersBytes, ps.FromCoordinatorBytes, input)
		}
		if ps.Direct+ps.Relayed != ps.Connected || ps.Relayed != 0 {
			t.Errorf("agent %s: %s; want every connection on loopback direct", filepath.Base(h), ps.Words())
		}
	}
	if fetched < 2 {
		t.Fatalf("%d agents fetched the input, want at least 2", fetched)
	}
	checkJobTransfer(t, subHome, url, out.stderr, input)
}

// dataLine is the summary `submit --follow` ends with on loopback.
var dataLine = regexp.MustCompile(`(?m)^data: (\d+) of (\d+) peers direct, 0 relayed; .+ direct, 0 B relayed, .+ from the coordinator$`)

// checkJobTransfer checks what the pool says of how the job's devices
// fetched its files (the devices' transfer reports): in the job's status,
// in the "data:" line `submit --follow` ended with, and in /metrics.
// Every device got the files direct from peers (the first from the
// submitter), at least two of them fetched, nothing was relayed on
// loopback, and the coordinator gave at most 1% of the input.
func checkJobTransfer(t *testing.T, subHome, url, submitStderr string, input float64) {
	t.Helper()
	merges, _ := filepath.Glob(filepath.Join(subHome, "data", "merges", "*"))
	if len(merges) != 1 {
		t.Fatalf("the submitter merged %d jobs, want 1", len(merges))
	}
	out := idlepool(t, subHome, "status", filepath.Base(merges[0]), "--pool", url, "--json")
	var st struct{ Transfer *pool.JobTransfer }
	if out.code != 0 || json.Unmarshal([]byte(out.stdout), &st) != nil {
		t.Fatalf("status --json: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	tr := st.Transfer
	if tr == nil {
		t.Fatalf("the job's status reports no transfer:\n%s", out.stdout)
	}
	t.Logf("the job's status: %s", agent.TransferWords(*tr))
	if tr.Devices < 2 || tr.Direct != tr.Devices || tr.CoordinatorOnly != 0 || tr.Relayed != 0 ||
		float64(tr.Bytes.Direct) < 2*input || float64(tr.Bytes.Coordinator) > input/100 || tr.Bytes.Relayed != 0 {
		t.Errorf("the job's transfer: %+v; want every device direct from peers (the input's %v bytes each, at least two devices), at most 1%% from the coordinator, none relayed", *tr, input)
	}
	if m := dataLine.FindStringSubmatch(submitStderr); m == nil || m[1] != m[2] || m[1] == "1" {
		t.Errorf("submit --follow printed no line matching %q with every one of at least 2 peers direct:\n%s", dataLine, submitStderr)
	}
	if got := metricValue(t, url, `idlepool_transfer_bytes_total{path="direct"}`); got < float64(tr.Bytes.Direct) {
		t.Errorf("/metrics: %v direct bytes reported, want at least the job's %d", got, tr.Bytes.Direct)
	}
}

// TestJoinFetchSurvivesHolderKilled: with real processes, two `idlepool
// join` agents hold a job's files and a third fetches them from both;
// the first holder is killed (SIGKILL) in the middle of that transfer,
// and the third goes on from the other holder: the coordinator serves it
// nothing, and the job's result equals `run --json`. The holders' upload
// is capped (share_upload=1MiB/s) so that the transfer lasts seconds.
func TestJoinFetchSurvivesHolderKilled(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	if testing.Short() {
		t.Skip("moves megabytes between three agents at a capped rate")
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	dataPath, data := writeCSV(t, 3<<20)
	text := strings.Replace(exampleManifest(t, "csvstats"), `data = "data.csv"`, `data = "`+dataPath+`"`, 1)
	// One task over the whole input, computed by all three owners.
	text = strings.Replace(text, "chunk_bytes = 1048576", "chunk_bytes = 8388608", 1)
	text = strings.Replace(text, "[policy]\n", "[policy]\nredundancy = 3\nquorum = 3\n", 1)
	m := writeManifest(t, "csvstats", text)
	_, want := runJSON(t, t.TempDir(), m)

	homes := make([]string, 3)
	for i := range homes {
		homes[i] = filepath.Join(t.TempDir(), fmt.Sprintf("agent%d", i))
		if out := idlepool(t, homes[i], "settings", "set", "share_upload=1MiB/s"); out.code != 0 {
			t.Fatalf("settings set share_upload: exit %d\n%s", out.code, out.stderr)
		}
	}
	holderA := startJoin(t, homes[0], url)
	// The submitter offers nothing here: A and B are the holders.
	subHome := t.TempDir()
	if out := idlepool(t, subHome, "settings", "set", "share_peers=false"); out.code != 0 {
		t.Fatalf("settings set share_peers=false: exit %d\n%s", out.code, out.stderr)
	}
	sub := startDaemon(t, "submit", subHome, "submit", m, "--pool", url, "--follow", "--json")
	deadline := patient(t)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
			time.Sleep(50 * time.Millisecond) // polling a condition
		}
	}
	waitUntil("the first agent holds the input", func() bool { return holdsFile(t, homes[0], data) })
	startJoin(t, homes[1], url)
	waitUntil("the second agent holds the input", func() bool { return holdsFile(t, homes[1], data) })
	waitUntil("both holders announced the input", func() bool {
		return metricValue(t, url, "idlepool_coord_tracker_chunks") >= float64(2*len(data.Chunks))
	})
	// Both holders' results are in before one is killed: the task needs
	// all three owners.
	waitUntil("both holders' results are taken", func() bool {
		return metricValue(t, url, `idlepool_coord_submissions_total{result="taken"}`) >= 2
	})
	before := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input_chunk"}`)

	startJoin(t, homes[2], url)
	waitUntil("the third agent fetches from peers", func() bool {
		ps := agentPeers(t, homes[2])
		return ps != nil && ps.FromPeersBytes > 0
	})
	if holdsFile(t, homes[2], data) {
		t.Fatal("the third agent had the whole input before the holder was killed: nothing tested")
	}
	holderA.kill()
	t.Logf("killed the first holder; the third agent: %s", agentPeers(t, homes[2]).Words())

	select {
	case <-sub.done:
	case <-time.After(time.Until(deadline)):
		t.Fatal("submit --follow did not finish")
	}
	stdout, _ := os.ReadFile(sub.stdout)
	if code := sub.cmd.ProcessState.ExitCode(); code != 0 {
		stderr, _ := os.ReadFile(sub.stderr)
		t.Fatalf("submit --follow: exit %d\n%s", code, stderr)
	}
	if diff := cmp.Diff(want, string(stdout)); diff != "" {
		t.Errorf("submit --follow --json differs from run --json (-run +submit):\n%s", diff)
	}
	ps := agentPeers(t, homes[2])
	after := metricValue(t, url, `idlepool_coord_bytes_served_total{kind="input_chunk"}`) - before
	t.Logf("the third agent: %s; the coordinator served it %.0f input bytes", ps.Words(), after)
	if after != 0 {
		t.Errorf("the coordinator served %.0f input bytes after the holders had the input; want 0: the second holder had every chunk", after)
	}
	if ps == nil || ps.FromPeersBytes < data.Size {
		t.Errorf("the third agent fetched %v from peers; want at least the input's %d bytes", ps, data.Size)
	}
}
