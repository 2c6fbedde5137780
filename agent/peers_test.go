package agent_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/castore"
	"idlepool/coord"
	"idlepool/job"
	"idlepool/p2p"
	"idlepool/pool"
)

// startPeerAgent starts an agent of dev with the peer-to-peer data plane
// (Config.PeerToPeer), or without uploading when noShare.
func startPeerAgent(t *testing.T, url string, dev *device, noShare bool) *runningAgent {
	t.Helper()
	return startPeerAgentWith(t, url, dev, noShare, p2p.Config{})
}

// startPeerAgentWith is startPeerAgent with the data plane tuned by cfg
// (Config.P2P).
func startPeerAgentWith(t *testing.T, url string, dev *device, noShare bool, cfg p2p.Config) *runningAgent {
	t.Helper()
	return startPeerAgentExec(t, url, dev, noShare, cfg, &fakeExec{})
}

// startPeerAgentExec is startPeerAgentWith computing with exec.
func startPeerAgentExec(t *testing.T, url string, dev *device, noShare bool, cfg p2p.Config, exec pool.Executor) *runningAgent {
	t.Helper()
	a, err := agent.New(agent.Config{
		PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t),
		PeerToPeer: !noShare, NoShare: noShare, P2P: cfg,
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", dev.key.ID()[:6]),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// runInBackground submits j through sub and follows it to the end in a
// goroutine, within timeout; the channel gets the follow's error (also
// when sub.run stops the goroutine with t.Fatal).
func runInBackground(t *testing.T, sub *submitter, j *job.Job, timeout time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err = sub.run(t, ctx, j)
	}()
	return done
}

// twoOwnerJob is a job of one task over the file at dataPath that two
// devices of distinct owners must both compute (redundancy and quorum 2).
func twoOwnerJob(t *testing.T, dataPath string) *job.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`name = "spread"
program = "prog.wasm"
[inputs]
data = %q
[split]
rule = "range"
tasks = 1
[[merge]]
field = "square"
rule = "sum"
[policy]
lease_timeout = "10s"
redundancy = 2
quorum = 2
`, dataPath)
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// waitHolder waits until the pool's tracker names dev as the holder of
// every chunk of m.
func waitHolder(t *testing.T, url string, dev *device, m castore.Manifest) {
	t.Helper()
	asker := agentClient(t, url, newDevice(t, nil))
	deadline := time.Now().Add(patience(t))
	for {
		h, err := asker.ChunkHolders(context.Background(), m.Digests())
		if err != nil {
			t.Fatal(err)
		}
		all := len(h) == len(m.Chunks)
		for _, ids := range h {
			all = all && len(ids) == 1 && ids[0] == dev.key.ID()
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tracker does not name device %s as the holder of the %d chunks: %v", dev.key.ID(), len(m.Chunks), h)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// TestAgentsShareChunksPeerToPeer runs a job whose one task two owners
// compute, on two real agents with the data plane (p2p.Node over WebRTC
// on loopback, signalling through the real coordinator): the first
// fetches the 2 MiB input from the coordinator, the second from the
// first, and both say so in their Status; the job's status says how each
// device got the files, from their transfer reports. Once with direct
// connections, once with ICE transport policy relay through the
// coordinator's TURN relay.
func TestAgentsShareChunksPeerToPeer(t *testing.T) {
	t.Parallel() // long: its own coordinators and agents, beside the other long tests
	for _, tc := range []struct {
		name      string
		relayOnly bool
	}{{"direct", false}, {"relay only", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var relay coord.RelayConfig
			if tc.relayOnly {
				relay.Listen = "127.0.0.1:0"
			}
			co := startCoordinatorWith(t, t.TempDir(), "127.0.0.1:0", relay)
			sub := newSubmitter(t, co.url, nil)
			dataPath, data := randomFile(t, 8*castore.ChunkSize+77, 3)
			m, err := castore.ManifestOfFile(dataPath)
			if err != nil {
				t.Fatal(err)
			}
			first, second := newDevice(t, nil), newDevice(t, nil)
			cfg := p2p.Config{RelayOnly: tc.relayOnly}
			a1 := startPeerAgentWith(t, co.url, first, false, cfg)
			j := twoOwnerJob(t, dataPath)
			done := runInBackground(t, sub, j, patience(t))
			waitHolder(t, co.url, first, m)
			before := servedBytes(t, co.url, "input_chunk")
			if before != int64(len(data)) {
				t.Fatalf("the coordinator served %d input bytes to the first agent, want the input's %d", before, len(data))
			}
			a2 := startPeerAgentWith(t, co.url, second, false, cfg)
			if err := <-done; err != nil {
				t.Fatalf("job: %v", err)
			}
			if got := servedBytes(t, co.url, "input_chunk") - before; got != 0 {
				t.Errorf("the coordinator served %d input bytes to the second agent, want 0: the first holds them", got)
			}
			p1, p2 := a1.Status().Peers, a2.Status().Peers
			if p1 == nil || p2 == nil {
				t.Fatalf("Status().Peers = %v, %v: want both agents running the data plane", p1, p2)
			}
			if p2.FromPeersBytes != int64(len(data))+8 || p2.FromCoordinatorBytes != 0 {
				t.Errorf("second agent: %s; want the input's %d bytes and the 8-byte program from peers, none from the coordinator",
					p2.Words(), len(data))
			}
			direct, relayed, path := 1, 0, "direct"
			if tc.relayOnly {
				direct, relayed, path = 0, 1, "relayed"
			}
			if p2.Connected != 1 || p2.Direct != direct || p2.Relayed != relayed {
				t.Errorf("second agent: %s; want 1 peer connected, %s", p2.Words(), path)
			}
			if p1.SentBytes < uint64(len(data)) || p1.FromCoordinatorBytes < int64(len(data)) {
				t.Errorf("first agent: %s; want the input fetched from the coordinator and sent to its peer", p1.Words())
			}

			// The job's status: both devices' reports came with their results.
			st, err := sub.c.Status(context.Background(), j.ID)
			if err != nil {
				t.Fatal(err)
			}
			files := int64(len(data)) + 8
			want := pool.JobTransfer{Devices: 2, Direct: 1, CoordinatorOnly: 1, Bytes: pool.Transfer{Direct: files, Coordinator: files}}
			if tc.relayOnly {
				want = pool.JobTransfer{Devices: 2, Relayed: 1, CoordinatorOnly: 1, Bytes: pool.Transfer{Relayed: files, Coordinator: files}}
			}
			if st.Transfer == nil || *st.Transfer != want {
				t.Errorf("the job's transfer: %+v, want %+v", st.Transfer, want)
			} else {
				t.Logf("the job's status: %s", agent.TransferWords(*st.Transfer))
			}
			// Each device's history keeps what it fetched, by path.
			for _, d := range []struct {
				name string
				dev  *device
				want pool.Transfer
			}{{"first", first, pool.Transfer{Coordinator: files}}, {"second", second, want.Bytes.Add(pool.Transfer{Coordinator: -files})}} {
				notes, err := d.dev.local.JobNotes(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if got := notes[j.ID].Transfer; got != d.want {
					t.Errorf("%s agent's job note: transfer %+v, want %+v", d.name, got, d.want)
				}
			}
		})
	}
}

// TestAgentWithoutSharingUploadsNothing: an owner's share_peers=false
// (Config.NoShare) runs no data plane and announces no chunk, so the
// next device fetches the input from the coordinator.
func TestAgentWithoutSharingUploadsNothing(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	dataPath, data := randomFile(t, 3*castore.ChunkSize+5, 4)
	m, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	first, second := newDevice(t, nil), newDevice(t, nil)
	a1 := startPeerAgent(t, co.url, first, true)
	j := twoOwnerJob(t, dataPath)
	done := runInBackground(t, sub, j, patience(t))
	deadline := time.Now().Add(patience(t))
	for servedBytes(t, co.url, "input_chunk") < int64(len(data)) {
		if time.Now().After(deadline) {
			t.Fatal("the first agent never fetched the input")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	a2 := startPeerAgent(t, co.url, second, false)
	if err := <-done; err != nil {
		t.Fatalf("job: %v", err)
	}
	if got := servedBytes(t, co.url, "input_chunk"); got != 2*int64(len(data)) {
		t.Errorf("the coordinator served %d input bytes, want the input's %d twice", got, len(data))
	}
	if p := a1.Status().Peers; p != nil {
		t.Errorf("the agent that does not share runs a data plane: %s", p.Words())
	}
	h, err := a2.Client().ChunkHolders(context.Background(), m.Digests())
	if err != nil {
		t.Fatal(err)
	}
	for d, ids := range h {
		for _, id := range ids {
			if id == first.key.ID() {
				t.Errorf("the tracker names the device that does not share as a holder of chunk %x", d[:8])
			}
		}
	}
}

// coordMetric reads the sample named exactly name (with its labels) from
// the coordinator's /metrics; 0 when absent.
func coordMetric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// TestPeerFetchSurvivesHolderKilled stops the only holder of an input
// while another agent is fetching it from that holder: the fetch goes on
// from the coordinator (the fallback), the job completes, and the
// coordinator served only what the holder had not sent. The holder's
// upload is capped at 512 KiB/s, so that its part of the 8 MiB input
// lasts at least 16 s, well beyond a poll, however fast the machine.
func TestPeerFetchSurvivesHolderKilled(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	dataPath, data := randomFile(t, 32*castore.ChunkSize, 5)
	m, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	first, second := newDevice(t, nil), newDevice(t, nil)
	a1, err := agent.New(agent.Config{
		PoolURL: co.url, Home: first.dirs, DeviceKey: first.key, OwnerKey: first.owner, Slots: 1,
		Executor: &fakeExec{}, Store: first.local, HTTP: httpClient(t), PeerToPeer: true,
		P2P:        p2p.Config{Upload: p2p.NewUploadLimit(512 << 10)},
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "holder"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r1 := &runningAgent{Agent: a1, dev: first, stop: cancel, done: make(chan error, 1)}
	go func() { r1.done <- a1.Serve(ctx) }()
	t.Cleanup(func() { r1.Stop(t) })

	j := twoOwnerJob(t, dataPath)
	done := runInBackground(t, sub, j, patience(t))
	waitHolder(t, co.url, first, m)
	// The holder's replica is in: stopping it loses no result.
	deadline := time.Now().Add(patience(t))
	for coordMetric(t, co.url, `idlepool_coord_submissions_total{result="taken"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the holder never sent its result")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	before := servedBytes(t, co.url, "input_chunk")
	a2 := startPeerAgent(t, co.url, second, false)
	for {
		// The 8-byte program comes first, then the input's chunks.
		if p := a2.Status().Peers; p != nil && p.FromPeersBytes > 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second agent never fetched from the holder")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	r1.Stop(t) // mid-transfer
	if err := <-done; err != nil {
		t.Fatalf("job: %v", err)
	}
	p := a2.Status().Peers
	after := servedBytes(t, co.url, "input_chunk") - before
	t.Logf("after the holder stopped: %s; the coordinator served %d of the input's %d bytes", p.Words(), after, len(data))
	if after <= 0 || after >= int64(len(data)) {
		t.Errorf("the coordinator served %d input bytes to the second agent, want some but not all of the %d: the holder sent part before it stopped",
			after, len(data))
	}
	if p.FromPeersBytes+p.FromCoordinatorBytes < int64(len(data)) {
		t.Errorf("second agent: %s; want the whole input of %d bytes from the two", p.Words(), len(data))
	}
}

// TestTransferReportsSurviveAFailedRequest: a transfer report travels on
// the next POST /v1/work; when that request fails (the coordinator is
// down), the report waits for the one after, adding up with what came
// since, and nothing is counted twice.
func TestTransferReportsSurviveAFailedRequest(t *testing.T) {
	data := t.TempDir()
	co := startCoordinator(t, data, "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	j := planJob(t, "reports", 1, "")
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	c := agentClient(t, co.url, newDevice(t, nil))
	_, _ = c.Lease(ctx, 1) // learns the API version (no offer: no lease)

	c.NoteTransfer(j.ID, pool.Transfer{Direct: 5})
	co.Stop()
	if _, err := c.Lease(ctx, 1); err == nil {
		t.Fatal("a lease request to a stopped coordinator succeeded")
	}
	startCoordinator(t, data, co.listen) // the same address and data: a restart
	c.NoteTransfer(j.ID, pool.Transfer{Relayed: 3})
	_, _ = c.Lease(ctx, 1)
	_, _ = c.Lease(ctx, 1) // nothing left to report
	st, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := pool.JobTransfer{Devices: 1, Relayed: 1, Bytes: pool.Transfer{Direct: 5, Relayed: 3}}
	if st.Transfer == nil || *st.Transfer != want {
		t.Errorf("the job's transfer after a failed request: %+v, want %+v", st.Transfer, want)
	}
}

// TestAgentOffersChunksAsTheyArrive: a device fetching a file offers each
// chunk to the pool as soon as it holds it, not once the file is whole:
// while the second agent is still fetching the input (slowly, from a
// holder under a 512 KiB/s upload cap), the tracker names it as a holder
// of the chunks it has; a third device then fetches one of those chunks
// from it (by then the second may have the whole file: the serving of a
// chunk announced mid-fetch is what this part checks).
func TestAgentOffersChunksAsTheyArrive(t *testing.T) {
	t.Parallel() // long: runs beside the package's other long tests
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	dataPath, data := randomFile(t, 16*castore.ChunkSize, 9)
	m, err := castore.ManifestOfFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	first, second := newDevice(t, nil), newDevice(t, nil)
	startPeerAgentWith(t, co.url, first, false, p2p.Config{Upload: p2p.NewUploadLimit(512 << 10)})
	j := twoOwnerJob(t, dataPath)
	done := runInBackground(t, sub, j, patience(t))
	waitHolder(t, co.url, first, m)
	a2 := startPeerAgent(t, co.url, second, false)

	asker := agentClient(t, co.url, newDevice(t, nil))
	var offered castore.Digest
	deadline := time.Now().Add(patience(t))
	for offered == (castore.Digest{}) {
		holders, err := asker.ChunkHolders(context.Background(), m.Digests())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.Chunks {
			if slices.Contains(holders[c.Digest], second.key.ID()) {
				offered = c.Digest
				break
			}
		}
		if p := a2.Status().Peers; offered != (castore.Digest{}) && p != nil && p.FromPeersBytes >= int64(len(data)) {
			t.Fatalf("the second agent was named a holder only once it had the whole input (%s)", p.Words())
		}
		if time.Now().After(deadline) {
			t.Fatal("the tracker never named the second agent as a holder")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	third := newDevice(t, nil)
	n := startNode(t, agentClient(t, co.url, third), third, p2p.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := n.Fetch(ctx, second.key.ID(), offered)
	if err != nil {
		t.Fatalf("fetch an offered chunk from the agent still fetching: %v", err)
	}
	if sha256.Sum256(got) != offered {
		t.Fatal("the chunk's bytes do not match its digest")
	}
	if err := <-done; err != nil {
		t.Fatalf("job: %v", err)
	}
}

// TestSeedOffersBeforeTheJobIsLeasable: once Offered's channel is
// closed, the pool's tracker names the seeder as the holder of every
// chunk of the job's program and input, so that a submitter waiting for
// it before handing the job over makes the first devices fetch from it
// rather than from the coordinator; after Stop, it names nobody.
func TestSeedOffersBeforeTheJobIsLeasable(t *testing.T) {
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dataPath, _ := randomFile(t, 5*castore.ChunkSize+3, 9)
	j := twoOwnerJob(t, dataPath)
	seeder := newDevice(t, nil)
	c := agentClient(t, co.url, seeder)
	s, err := agent.Seed(context.Background(), c, j, agent.SeedConfig{})
	if err != nil || s == nil {
		t.Fatalf("Seed: %v, %v", s, err)
	}
	select {
	case <-s.Offered():
	case <-time.After(patience(t)): // bounds a hang only
		s.Stop()
		t.Fatal("the seeder never offered the job's files")
	}
	var chunks []castore.Digest
	for _, path := range []string{j.Program.Path, dataPath} {
		m, err := castore.ManifestOfFile(path)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, m.Digests()...)
	}
	asker := agentClient(t, co.url, newDevice(t, nil))
	h, err := asker.ChunkHolders(context.Background(), chunks)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range chunks {
		if ids := h[d]; len(ids) != 1 || ids[0] != seeder.key.ID() {
			t.Errorf("chunk %x: holders %v, want the seeder %s alone, as soon as Offered is closed", d[:8], ids, seeder.key.ID())
		}
	}
	s.Stop()
	if h, err := asker.ChunkHolders(context.Background(), chunks); err != nil || len(h) != 0 {
		t.Errorf("after Stop the tracker names %v (%v), want nobody", h, err)
	}
	var none *agent.Seeder
	select {
	case <-none.Offered():
	default:
		t.Error("a nil Seeder's Offered channel is open, want it closed")
	}
}
